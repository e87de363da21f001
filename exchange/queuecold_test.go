package exchange

import (
	"testing"
	"time"
)

// lazyParts reports which of q's parts made on first use it holds: its
// cold part (queueCold), its state's rare part (stateRare) and its rare
// effects (rareEffects).
func lazyParts(q *Queue) (cold, rare, fx bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cold.Load() != nil, q.rare != nil, q.fx.rare != nil
}

// TestQueueSmallUntilUsed: a queue that only publishes, delivers and
// takes acks (an MQTT device's) holds none of the parts made on first
// use; a policy with a TTL and a dead-letter exchange makes them, and
// through them a message expires and is dead-lettered; the policy
// removed, the queue names none.
func TestQueueSmallUntilUsed(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "dev", QueueOpts{})
	declareQ(t, v, "dead", QueueOpts{})
	declareX(t, v, "dlx", KindFanout, ExchangeOpts{})
	bindQ(t, v, "dead", "dlx", "", nil)

	c, s := consume(t, v, "dev", ConsumeOpts{Prefetch: 1})
	for i := range 3 {
		publish(t, v, "", "dev", "m")
		eventually(t, 5*time.Second, "a delivery", func() bool { return s.len() == i+1 })
		q.Ack(s.deliveries()[i].Seq)
	}
	if cold, rare, fx := lazyParts(q); cold || rare || fx {
		t.Fatalf("a queue only published to, delivered from and acked holds parts made on first use: cold %v, rare state %v, rare effects %v",
			cold, rare, fx)
	}
	c.Cancel()

	if _, err := v.SetPolicy(Policy{Name: "ttl", Pattern: "^dev$", ApplyTo: ApplyToQueues,
		Definition: Table{polMessageTTL: int64(30), polDLX: "dlx"}}); err != nil {
		t.Fatal(err)
	}
	if name, _ := q.Policy(); name != "ttl" {
		t.Fatalf("policy %q, want ttl", name)
	}
	publish(t, v, "", "dev", "expires")
	dead, err := v.Queue("dead", nil)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the expired message dead-lettered", func() bool { return ready(dead) == 1 })
	if ready(q) != 0 {
		t.Fatalf("%d ready after the TTL", ready(q))
	}
	if cold, _, fx := lazyParts(q); !cold || !fx {
		t.Fatalf("cold part %v, rare effects %v after a policy's TTL dead-lettered a message", cold, fx)
	}
	if err := v.DeletePolicy("ttl"); err != nil {
		t.Fatal(err)
	}
	if name, _ := q.Policy(); name != "" {
		t.Fatalf("policy %q after it was deleted", name)
	}
	// Another queue, never under the policy, still has no cold part.
	other := declareQ(t, v, "other", QueueOpts{})
	if cold, _, _ := lazyParts(other); cold {
		t.Fatal("a new queue holds a cold part")
	}
}

// TestLimitKickAcrossQueues: credit given back on one queue wakes a
// consumer of another queue under the same channel-wide limit (the kick
// goes out through the acking queue's rare effects).
func TestLimitKickAcrossQueues(t *testing.T) {
	v, _ := newTestVHost(t)
	qa := declareQ(t, v, "a", QueueOpts{})
	declareQ(t, v, "b", QueueOpts{})
	l := &Limit{}
	l.SetMax(1)
	_, sa := consume(t, v, "a", ConsumeOpts{Limit: l})
	_, sb := consume(t, v, "b", ConsumeOpts{Limit: l})
	publish(t, v, "", "a", "1")
	eventually(t, 5*time.Second, "a's delivery", func() bool { return sa.len() == 1 })
	publish(t, v, "", "b", "2")
	time.Sleep(50 * time.Millisecond)
	if sb.len() != 0 {
		t.Fatal("b delivered past the channel-wide limit")
	}
	qa.Ack(sa.deliveries()[0].Seq)
	eventually(t, 5*time.Second, "b's delivery once a's was acked", func() bool { return sb.len() == 1 })
}

// TestTrimDropsEmptyLanesOnly: Trim forgets the lanes of an empty
// queue, never of one holding messages; lanes made again keep the
// queue's priorities. A new queue has its lanes (a first publish makes
// none: no allocation more on the publish path).
func TestTrimDropsEmptyLanesOnly(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-priority": int32(5)}})
	lanes := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.ready.levels)
	}
	if n := lanes(); n != 6 {
		t.Fatalf("a new queue holds %d lanes, want 6", n)
	}
	q.Trim()
	if n := lanes(); n != 0 {
		t.Fatalf("a new queue keeps %d lanes after Trim", n)
	}
	pubP := func(body string, prio uint8) {
		m := &Message{RoutingKey: "q", Body: []byte(body)}
		m.Props.Priority = prio
		publishM(t, v, m, PublishOpts{})
	}
	for round := range 2 {
		pubP("low", 0)
		pubP("high", 5)
		q.Trim()
		if n := lanes(); n != 6 {
			t.Fatalf("round %d: %d lanes with 2 messages ready, want 6", round, n)
		}
		if got := getBodies(q); !equalStrings(got, []string{"high", "low"}) {
			t.Fatalf("round %d: %v after Trim", round, got)
		}
		q.Trim()
		if n := lanes(); n != 0 {
			t.Fatalf("round %d: an empty queue keeps %d lanes after Trim", round, n)
		}
	}
	// A message delivered and not yet acked is not in a lane: Trim drops
	// them, and its requeue makes them again.
	c, s := consume(t, v, "q", ConsumeOpts{Prefetch: 1})
	pubP("m", 1)
	eventually(t, 5*time.Second, "the delivery", func() bool { return s.len() == 1 })
	c.Cancel()
	q.Trim()
	q.Reject([]uint64{s.deliveries()[0].Seq}, true)
	if got := getBodies(q); !equalStrings(got, []string{"m"}) {
		t.Fatalf("requeued after Trim: %v", got)
	}
}

// TestQueueSchedPublished: a queue's consumer timeout and retry delays,
// from its arguments or a policy, reach readers without q.mu; a queue
// with neither publishes nothing of its own.
func TestQueueSchedPublished(t *testing.T) {
	v, _ := newTestVHost(t)
	plain := declareQ(t, v, "plain", QueueOpts{})
	if d, ok := plain.ConsumerTimeout(); ok || d != 0 || plain.RetryDelays() != nil || plain.sched.Load() != nil {
		t.Fatalf("a queue without settings: timeout %v %v, retry %v", d, ok, plain.RetryDelays())
	}
	q := declareQ(t, v, "timed", QueueOpts{Args: Table{argConsumerTimeout: int64(5000), argRetryDelays: "1s,2s"}})
	if d, ok := q.ConsumerTimeout(); !ok || d != 5*time.Second {
		t.Fatalf("timeout %v %v, want 5s", d, ok)
	}
	if r := q.RetryDelays(); len(r) != 2 || r[0] != time.Second || r[1] != 2*time.Second {
		t.Fatalf("retry delays %v", r)
	}
	if _, err := v.SetPolicy(Policy{Name: "ct", Pattern: "^plain$", ApplyTo: ApplyToQueues,
		Definition: Table{polConsumerTimeout: int64(3000)}}); err != nil {
		t.Fatal(err)
	}
	if d, ok := plain.ConsumerTimeout(); !ok || d != 3*time.Second {
		t.Fatalf("timeout from a policy %v %v, want 3s", d, ok)
	}
	if err := v.DeletePolicy("ct"); err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.ConsumerTimeout(); ok {
		t.Fatal("the policy's timeout outlived the policy")
	}
}
