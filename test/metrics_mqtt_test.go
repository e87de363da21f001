package test

import (
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/trident-broker/trident/conf"
)

// MQTT QoS 1: each PUBACK is a publish-to-confirm observation, each
// delivery to the QoS 1 subscriber an enqueue-to-deliver one and its
// PUBACK a deliver-to-ack one, all labelled protocol="mqtt".
func TestMetricsMQTTLatencies(t *testing.T) {
	b := startMQTTBroker(t, func(c *conf.Config) { c.Prometheus.Listen = "127.0.0.1:0" })
	murl := "http://" + b.n.MetricsAddr().String() + "/metrics"
	sub := dial3(t, "tcp://"+b.mqttAddr(), "sub", true)
	sub.subscribe(t, "m/#", 1)
	pub := dial3(t, "tcp://"+b.mqttAddr(), "pub", true)
	const n = 5
	for i := 0; i < n; i++ {
		pub.publish(t, "m/x", 1, false, "hello") // waits for the PUBACK
	}
	for i := 0; i < n; i++ {
		sub.receive(t)
	}
	l := []string{"vhost", "/", "protocol", "mqtt"}
	h := waitHistogram(t, murl, "trident_deliver_to_ack_seconds", n, l...)
	if h.GetSampleCount() != n {
		t.Fatalf("deliver_to_ack: %d, want %d", h.GetSampleCount(), n)
	}
	fams := scrape(t, murl)
	if h := histogram(fams, "trident_publish_to_confirm_seconds", l...); h.GetSampleCount() != n {
		t.Fatalf("publish_to_confirm: %v, want %d PUBACKs", h, n)
	}
	if h := histogram(fams, "trident_enqueue_to_deliver_seconds", l...); h.GetSampleCount() != n {
		t.Fatalf("enqueue_to_deliver: %v, want %d", h, n)
	}
	if v := value(fams, "trident_connections_opened_total", "protocol", "mqtt"); v != 2 {
		t.Fatalf("mqtt connections opened %v, want 2", v)
	}
}

// STOMP: a SEND with a receipt is a publish-to-confirm observation, a
// client-acked subscription's MESSAGE and ACK the other two, all
// labelled protocol="stomp".
func TestMetricsSTOMPLatencies(t *testing.T) {
	b := stBroker(t, func(c *conf.Config) { c.Prometheus.Listen = "127.0.0.1:0" })
	murl := "http://" + b.n.MetricsAddr().String() + "/metrics"
	c := stDial(t, b)
	sub, err := c.Subscribe("/queue/sq", stomp.AckClient)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := 0; i < n; i++ {
		if err := c.Send("/queue/sq", "text/plain", []byte("x"), stomp.SendOpt.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if err := c.Ack(m); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no MESSAGE")
		}
	}
	l := []string{"vhost", "/", "protocol", "stomp"}
	waitHistogram(t, murl, "trident_deliver_to_ack_seconds", n, l...)
	fams := scrape(t, murl)
	for _, name := range []string{"trident_publish_to_confirm_seconds", "trident_enqueue_to_deliver_seconds", "trident_deliver_to_ack_seconds"} {
		if h := histogram(fams, name, l...); h.GetSampleCount() != n {
			t.Fatalf("%s: %v, want %d", name, h, n)
		}
	}
	if v := value(fams, "trident_connections_opened_total", "protocol", "stomp"); v != 1 {
		t.Fatalf("stomp connections opened %v", v)
	}
}
