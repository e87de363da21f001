package test

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"
)

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value returns the value of the family's series with the given labels
// (name, value pairs), or -1.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return -1
}

func TestMgmtMetricsAgreeWithAPI(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	murl := "http://" + b.n.MetricsAddr().String()
	_, ch := channel(t, b.URL)
	for _, q := range []string{"m1", "m2"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 7; i++ {
		if err := ch.Publish("", "m1", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := ch.Publish("", "m2", false, false, amqp.Publishing{Body: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}
	d, ok, err := ch.Get("m2", false) // one unacked
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	_ = d
	waitUntil(t, "publishes counted", func() bool {
		return num(a.object("/api/overview")["message_stats"].(map[string]any)["publish"]) == 10
	})

	fams := scrape(t, murl+"/metrics")
	ov := a.object("/api/overview")
	ot, qt := ov["object_totals"].(map[string]any), ov["queue_totals"].(map[string]any)
	ms := ov["message_stats"].(map[string]any)
	for _, c := range []struct {
		metric string
		api    float64
	}{
		{"rabbitmq_connections", num(ot["connections"])},
		{"rabbitmq_channels", num(ot["channels"])},
		{"rabbitmq_consumers", num(ot["consumers"])},
		{"rabbitmq_queues", num(ot["queues"])},
		{"rabbitmq_queue_messages_ready", num(qt["messages_ready"])},
		{"rabbitmq_queue_messages_unacked", num(qt["messages_unacknowledged"])},
		{"rabbitmq_queue_messages", num(qt["messages"])},
		{"rabbitmq_channel_messages_published_total", num(ms["publish"])},
		{"rabbitmq_channel_get_ack_total", num(ms["get"])},
	} {
		if got := value(fams, c.metric); got != c.api {
			t.Errorf("%s = %v, API says %v", c.metric, got, c.api)
		}
	}
	if value(fams, "rabbitmq_queue_messages_ready") != 9 || value(fams, "rabbitmq_queue_messages_unacked") != 1 || value(fams, "rabbitmq_connections") != 1 {
		t.Errorf("absolute figures wrong: ready %v unacked %v", value(fams, "rabbitmq_queue_messages_ready"), value(fams, "rabbitmq_queue_messages_unacked"))
	}
	for _, n := range []string{"go_goroutines", "process_cpu_seconds_total", "rabbitmq_identity_info"} {
		if fams[n] == nil {
			t.Errorf("no %s", n)
		}
	}
	if f := fams["rabbitmq_queue_messages_ready"]; f != nil && len(f.Metric[0].Label) != 0 {
		t.Errorf("aggregated metric has labels: %v", f.Metric[0].Label)
	}

	per := scrape(t, murl+"/metrics/per-object")
	for _, q := range []string{"m1", "m2"} {
		api := a.object("/api/queues/%2F/" + q)
		if got := value(per, "rabbitmq_queue_messages_ready", "vhost", "/", "queue", q); got != num(api["messages_ready"]) {
			t.Errorf("%s ready: metric %v, API %v", q, got, api["messages_ready"])
		}
		if got := value(per, "rabbitmq_queue_messages_unacked", "vhost", "/", "queue", q); got != num(api["messages_unacknowledged"]) {
			t.Errorf("%s unacked: metric %v, API %v", q, got, api["messages_unacknowledged"])
		}
		if got := value(per, "rabbitmq_queue_messages_published_total", "vhost", "/", "queue", q); got != num(api["message_stats"].(map[string]any)["publish"]) {
			t.Errorf("%s published: metric %v", q, got)
		}
	}
}
