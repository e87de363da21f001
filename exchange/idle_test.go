package exchange

import "testing"

// TestQueueTrim: once its deliveries are acked, Trim leaves an idle queue
// no unacked ring and no ready buffer (what a burst to thousands of MQTT
// session queues would otherwise keep), and keeps what is still unacked.
func TestQueueTrim(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	_, s := consume(t, v, "q", ConsumeOpts{Prefetch: 100})
	for range 20 {
		publish(t, v, "", "q", "m")
	}
	ds := s.deliveries()
	if len(ds) != 20 {
		t.Fatalf("%d deliveries, want 20", len(ds))
	}
	q.Ack(ds[0].Seq)
	q.Trim()
	q.mu.Lock()
	if q.unacked.len() != 19 || q.unacked.ring == nil {
		t.Fatalf("Trim dropped unacked entries: %d left", q.unacked.len())
	}
	q.mu.Unlock()
	for _, d := range ds[1:] {
		q.Ack(d.Seq)
	}
	q.mu.Lock()
	if q.unacked.ring == nil {
		t.Fatal("the ring went before Trim: the test measures nothing")
	}
	q.mu.Unlock()
	q.Trim()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.unacked.ring != nil || q.unacked.other != nil {
		t.Fatalf("ring of %d kept after Trim", len(q.unacked.ring))
	}
	for i, l := range q.ready.levels {
		if l.head.buf != nil || l.tail.buf != nil {
			t.Fatalf("lane %d keeps buffers of %d and %d entries", i, len(l.head.buf), len(l.tail.buf))
		}
	}
}

// TestQueueTrimThenDeliver: a trimmed queue delivers and acks as before.
func TestQueueTrimThenDeliver(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	q.Trim()
	_, s := consume(t, v, "q", ConsumeOpts{Prefetch: 100})
	for round := range 3 {
		for range 10 {
			publish(t, v, "", "q", "m")
		}
		ds := s.deliveries()
		if len(ds) != 10*(round+1) {
			t.Fatalf("round %d: %d deliveries", round, len(ds))
		}
		for _, d := range ds[10*round:] {
			q.Ack(d.Seq)
		}
		if _, unacked, _ := q.Stats(); unacked != 0 {
			t.Fatalf("round %d: %d unacked", round, unacked)
		}
		q.Trim()
	}
}

// TestQueuesShareNoArgs: queues declared without arguments share their
// parsed declared arguments; one declared with some has its own, and a
// policy still applies over either.
func TestQueuesShareNoArgs(t *testing.T) {
	v, _ := newTestVHost(t)
	a := declareQ(t, v, "a", QueueOpts{})
	b := declareQ(t, v, "b", QueueOpts{AutoDelete: true})
	c := declareQ(t, v, "c", QueueOpts{Args: Table{"x-max-length": int64(5)}})
	if a.xa != noArgs || b.xa != noArgs {
		t.Fatal("queues without arguments do not share them")
	}
	if c.xa == noArgs || c.xa.maxLen != 5 || noArgs.maxLen != -1 {
		t.Fatalf("declared arguments: %+v, shared %+v", *c.xa, *noArgs)
	}
}
