package test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// Consumer timeout (RabbitMQ's consumer_timeout) with amqp091-go.

// expectTimeoutClose waits for ch to be closed by the consumer timeout.
func expectTimeoutClose(t *testing.T, closed <-chan *amqp.Error, within time.Duration) {
	t.Helper()
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.PreconditionFailed || !strings.Contains(e.Reason, "delivery acknowledgement on channel 1 timed out") {
			t.Fatalf("channel closed with %v, want 406 delivery acknowledgement timed out", e)
		}
	case <-time.After(within):
		t.Fatal("the channel was not closed by the consumer timeout")
	}
}

func publishN(t *testing.T, ch *amqp.Channel, queue string, n int) {
	t.Helper()
	for i := range n {
		if err := ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{
			Body: []byte{byte('a' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConsumerTimeoutQueueArg(t *testing.T) {
	b := startBroker(t)
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("ct", false, false, false, false, amqp.Table{"x-consumer-timeout": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	publishN(t, ch, "ct", 3)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	ds, err := ch.Consume("ct", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		receive(t, ds) // and never ack
	}
	start := time.Now()
	expectTimeoutClose(t, closed, 10*time.Second)
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Fatalf("closed %v after the deliveries, before the 1 s timeout", el)
	}
	// Every unacknowledged delivery is back, redelivered.
	_, ch2 := channel(t, b.URL)
	ds2, err := ch2.Consume("ct", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d := receive(t, ds2)
		if !d.Redelivered || string(d.Body) != string(rune('a'+i)) {
			t.Fatalf("after the timeout, delivery %d: %q redelivered=%v", i, d.Body, d.Redelivered)
		}
	}

	// A malformed x-consumer-timeout is refused, naming it.
	_, ch3 := channel(t, b.URL)
	_, err = ch3.QueueDeclare("ct-bad", false, false, false, false, amqp.Table{"x-consumer-timeout": "soon"})
	if amqpCode(err) != amqp.PreconditionFailed || !strings.Contains(err.Error(), "x-consumer-timeout") {
		t.Fatalf("bad x-consumer-timeout: %v", err)
	}
}

// A channel that acknowledges in time stays open past the timeout.
func TestConsumerTimeoutNotWhenAcked(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.ConsumerTimeout = time.Second })
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("ok", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	ds, err := ch.Consume("ok", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		publishN(t, ch, "ok", 1)
		d := receive(t, ds)
		time.Sleep(700 * time.Millisecond)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case e := <-closed:
		t.Fatalf("a channel that acked within the timeout was closed: %v", e)
	default:
	}
	// The node default applies to a queue without its own.
	publishN(t, ch, "ok", 1)
	receive(t, ds)
	expectTimeoutClose(t, closed, 10*time.Second)
}

func TestConsumerTimeoutPolicy(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	code, body := api.do("PUT", "/api/policies/%2F/bad-ct", map[string]any{"pattern": "^pct", "apply-to": "queues",
		"definition": map[string]any{"consumer-timeout": "later"}})
	if code != 400 || !strings.Contains(string(body), "consumer-timeout") {
		t.Fatalf("bad consumer-timeout policy: %d %s", code, body)
	}
	api.expect(201, "PUT", "/api/policies/%2F/ct", map[string]any{"pattern": "^pct", "apply-to": "queues",
		"definition": map[string]any{"consumer-timeout": 1000}})
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("pct.q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishN(t, ch, "pct.q", 1)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	d, ok, err := ch.Get("pct.q", false)
	if err != nil || !ok {
		t.Fatalf("basic.get: %v %v", ok, err)
	}
	_ = d
	expectTimeoutClose(t, closed, 10*time.Second)
	_, ch2 := channel(t, b.URL)
	q, err := ch2.QueueDeclarePassive("pct.q", false, false, false, false, nil)
	if err != nil || q.Messages != 1 {
		t.Fatalf("after the timeout the queue holds %d (%v), want the requeued 1", q.Messages, err)
	}
}
