package test

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestMQTTPublishRunFlushed: an MQTT publisher's packets of one read are a
// run (exchange.Batch) whose deliveries may defer their consumers'
// writers and whose stream appends collect in one chunk; the run ends
// before the reader waits again. An MQTT 3.1.1 client publishes a burst at
// QoS 0 to a queue an AMQP consumer reads and then stays connected, idle:
// every message reaches the consumer. Then QoS 1 publishes to a stream
// are each acknowledged (their chunk was written) and read back from the
// stream in order.
func TestMQTTPublishRunFlushed(t *testing.T) {
	b := startMQTTBroker(t)
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("mb-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("mb-q", "mb.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("mb-q", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := dial3(t, "tcp://"+b.mqttAddr(), "mb-pub", true)
	const n = 200
	for i := range n {
		pub.Publish("mb/x", 0, false, fmt.Sprintf("m%03d", i)) // not waited for: one burst
	}
	for i := range n {
		select {
		case d := <-ds:
			if want := fmt.Sprintf("m%03d", i); string(d.Body) != want {
				t.Fatalf("delivery %d is %q, want %q", i, d.Body, want)
			}
		case <-time.After(5 * time.Second): // (a stalled writer is woken by the next heartbeat, 10 s)
			t.Fatalf("the AMQP consumer got %d of %d messages of an idle MQTT publisher's burst", i, n)
		}
	}

	if _, err := ch.QueueDeclare("mb-s", true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("mb-s", "mbs.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	const m = 20
	toks := make([]interface {
		WaitTimeout(time.Duration) bool
		Error() error
	}, m)
	for i := range m {
		toks[i] = pub.Publish("mbs/x", 1, false, fmt.Sprintf("s%02d", i))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("QoS 1 publish %d to a stream not acknowledged: %v", i, tok.Error())
		}
	}
	_, sch := channel(t, b.URL)
	if err := sch.Qos(100, 0, false); err != nil {
		t.Fatal(err)
	}
	sd, err := sch.Consume("mb-s", "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		select {
		case d := <-sd:
			if want := fmt.Sprintf("s%02d", i); string(d.Body) != want {
				t.Fatalf("stream message %d is %q, want %q", i, d.Body, want)
			}
			_ = d.Ack(false)
		case <-time.After(10 * time.Second):
			t.Fatalf("stream: %d of %d messages", i, m)
		}
	}
}
