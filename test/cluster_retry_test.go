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

// TestQuorumQueueRetrySurvivesLeaderLoss: a retry waiting for its delay is
// held in the quorum queue's Raft group, not on the leader alone: the
// leader is killed (and stays down) while the retry waits, and the message
// comes back from the new leader once its delay has passed.
func TestQuorumQueueRetrySurvivesLeaderLoss(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch0 := dialNode(t, nodes[0])
	if _, err := ch0.QueueDeclare("qq-retry-kill", true, false, false, false, amqp.Table{"x-queue-type": "quorum",
		"x-retry-delays": "3s"}); err != nil {
		t.Fatal(err)
	}
	// A new group may still change its leader under load (the first
	// publish is then nacked): publish until confirmed, then use the
	// leader of that moment.
	var leader int
	var lch *closingChannel
	eventually(t, 20*time.Second, "a confirmed publish to the leader", func() bool {
		leader = leaderIndex(nodes, "qq-retry-kill")
		if leader < 0 {
			return false
		}
		c, err := dialChannel(nodes[leader])
		if err != nil {
			return false
		}
		if err := c.Confirm(false); err != nil {
			c.Close()
			return false
		}
		confirms := c.NotifyPublish(make(chan amqp.Confirmation, 1))
		if err := c.Publish("", "qq-retry-kill", false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("job")}); err != nil {
			c.Close()
			return false
		}
		select {
		case cf := <-confirms:
			if !cf.Ack {
				c.Close()
				return false
			}
		case <-time.After(5 * time.Second):
			c.Close()
			return false
		}
		lch = c
		return true
	})
	t.Cleanup(func() { lch.Close() })
	ds, err := lch.Consume("qq-retry-kill", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var d amqp.Delivery
	select {
	case d = <-ds:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	// The hold is committed by the group within moments; then the leader dies.
	time.Sleep(500 * time.Millisecond)
	if err := nodes[leader].p.Kill(); err != nil {
		t.Fatal(err)
	}
	survivor := nodes[(leader+1)%3]
	_, sch := dialNode(t, survivor)
	var got amqp.Delivery
	eventually(t, 30*time.Second, "the retry from the new leader", func() bool {
		m, ok, err := sch.Get("qq-retry-kill", false)
		if err != nil || !ok {
			return false
		}
		got = m
		return true
	})
	if time.Since(at) < 3*time.Second {
		t.Fatalf("retried after %v, before its 3 s delay", time.Since(at))
	}
	if string(got.Body) != "job" || retryCount(got) != 1 {
		t.Fatalf("retry: %q x-retry-count %v", got.Body, got.Headers["x-retry-count"])
	}
	if err := got.Ack(false); err != nil {
		t.Fatal(err)
	}
	t.Logf("retry came back %v after the nack, with leader %s dead", time.Since(at).Round(time.Millisecond), nodes[leader].name)
}
