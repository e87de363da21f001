package test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestQuorumQueueRetryAcrossNodes: a consumer on a node that does not lead
// a quorum queue with x-retry-delays nacks a message without requeue: it
// comes back after the delay, counted, and is dead-lettered after the last.
func TestQuorumQueueRetryAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch0 := dialNode(t, nodes[0])
	if _, err := ch0.QueueDeclare("retry-dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch0.QueueDeclare("qq-retry", true, false, false, false, amqp.Table{"x-queue-type": "quorum",
		"x-retry-delays": "300ms", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry-dlq"}); err != nil {
		t.Fatal(err)
	}
	leader := leaderIndex(nodes, "qq-retry")
	other := nodes[(leader+1)%len(nodes)]
	_, ch := dialNode(t, other)
	eventually(t, 10*time.Second, "qq-retry on "+other.name, func() bool {
		c, err := dialChannel(other)
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.QueueDeclarePassive("qq-retry", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err == nil
	})
	if err := ch.Publish("", "qq-retry", false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("job")}); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("qq-retry", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	next := func(i int) amqp.Delivery {
		select {
		case d := <-ds:
			return d
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d did not come", i)
		}
		return amqp.Delivery{}
	}
	d := next(0)
	at := time.Now()
	if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	d = next(1)
	if time.Since(at) < 300*time.Millisecond || retryCount(d) != 1 || string(d.Body) != "job" {
		t.Fatalf("retry after %v: %q x-retry-count %v", time.Since(at), d.Body, d.Headers["x-retry-count"])
	}
	if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the dead letter", func() bool {
		m, ok, err := ch0.Get("retry-dlq", true)
		return err == nil && ok && string(m.Body) == "job"
	})
}
