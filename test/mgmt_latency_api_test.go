package test

import (
	"context"
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestLatencyAPI: GET /api/latency[/{vhost}] (Trident) reports the
// vhost's latency histograms after confirmed publishes and acked
// deliveries over AMQP, with quantiles within the histogram's range; a
// management user without access to the vhost is refused it and does
// not see it in the list.
func TestLatencyAPI(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("lat-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 100))
	for range 20 {
		if err := ch.PublishWithContext(context.Background(), "", "lat-q", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-confirms:
		case <-time.After(10 * time.Second):
			t.Fatal("no confirm")
		}
	}
	ds, err := ch.Consume("lat-q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		d := receive(t, ds)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	byMetric := func(l []map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, e := range l {
			if e["vhost"] == "/" && e["protocol"] == "amqp091" {
				out[e["metric"].(string)] = e
			}
		}
		return out
	}
	var got map[string]map[string]any
	waitUntil(t, "three AMQP histograms with 20 each", func() bool {
		got = byMetric(api.list("/api/latency/%2F"))
		for _, m := range []string{"publish_to_confirm", "enqueue_to_deliver", "deliver_to_ack"} {
			if got[m] == nil || num(got[m]["count"]) != 20 {
				return false
			}
		}
		return true
	})
	for m, e := range got {
		p50, p99, mean := num(e["p50_seconds"]), num(e["p99_seconds"]), num(e["mean_seconds"])
		if p50 <= 0 || p99 < p50 || p99 > 300 || mean < 0 {
			t.Errorf("%s: p50 %v p99 %v mean %v", m, p50, p99, mean)
		}
		if bs, _ := e["buckets"].([]any); len(bs) == 0 {
			t.Errorf("%s: no buckets", m)
		}
	}
	if all := byMetric(api.list("/api/latency")); len(all) != 3 {
		t.Errorf("/api/latency lists %d AMQP histograms of /, want 3", len(all))
	}

	// A management user with access to another vhost only.
	api.expect(201, "PUT", "/api/vhosts/lat-other", map[string]any{})
	api.expect(201, "PUT", "/api/users/lat-mgmt", map[string]any{"password": "pw", "tags": "management"})
	api.expect(201, "PUT", "/api/permissions/lat-other/lat-mgmt", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	other := api.as("lat-mgmt", "pw")
	if code, body := other.do("GET", "/api/latency/%2F", nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("latency of / as a user without access: %d %s", code, body)
	}
	for _, e := range other.list("/api/latency") {
		if e["vhost"] == "/" {
			t.Fatalf("a user without access to / sees its latency: %v", e)
		}
	}
	other.expect(200, "GET", "/api/latency/lat-other", nil)
}
