package test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// TestMemoryAlarmBlocksPublishers raises the memory alarm: a publishing
// connection gets connection.blocked and its message is held back, a
// consumer on another connection keeps draining what was queued before,
// and when the alarm clears the publisher is unblocked and nothing is lost.
func TestMemoryAlarmBlocksPublishers(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.MemoryHighWatermarkPercent = 0 })
	pubConn, pub := channel(t, b.URL)
	_, sub := channel(t, b.URL)
	q, err := pub.QueueDeclare("alarm-q", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, body := range []string{"before-1", "before-2"} {
		if err := pub.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	blockings := pubConn.NotifyBlocked(make(chan amqp.Blocking, 4))

	alarms := b.n.Broker().Alarms()
	// Make sure the two messages are in the queue before the alarm.
	waitFor(t, func() bool {
		n, _ := pub.QueueDeclarePassive(q.Name, false, false, false, false, nil)
		return n.Messages == 2
	})
	alarms.Set("memory", true)

	if err := pub.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{Body: []byte("during")}); err != nil {
		t.Fatal(err)
	}
	select {
	case bl := <-blockings:
		if !bl.Active || bl.Reason != "low on memory" {
			t.Fatalf("got %+v, want active blocking with reason 'low on memory'", bl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.blocked")
	}

	// Consumers keep draining while publishers are blocked.
	ds, err := sub.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"before-1", "before-2"} {
		if d := receive(t, ds); string(d.Body) != want {
			t.Fatalf("got %q, want %q", d.Body, want)
		}
	}
	noDelivery(t, ds, 300*time.Millisecond) // "during" is held back

	alarms.Set("memory", false)
	select {
	case bl := <-blockings:
		if bl.Active {
			t.Fatalf("got %+v, want unblocked", bl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.unblocked")
	}
	if d := receive(t, ds); string(d.Body) != "during" {
		t.Fatalf("got %q after the alarm cleared, want 'during'", d.Body)
	}
}

// TestMemoryWatermarkRaisesAlarm sets an absolute watermark below what any
// process uses: the node's watcher raises the memory alarm.
func TestMemoryWatermarkRaisesAlarm(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.MemoryHighWatermarkBytes = 1 << 20 })
	waitFor(t, func() bool {
		a := b.n.Broker().Alarms().Active()
		return len(a) == 1 && a[0] == "memory"
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
