package exchange

import (
	"testing"
	"time"
)

type countFlusher struct{ n int }

func (f *countFlusher) Flush() { f.n++ }

// TestPublishBatch: the deliveries a publish makes carry its Batch; those
// made later (an ack frees prefetch credit) do not.
func TestPublishBatch(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "b-q", QueueOpts{})
	_, s := consume(t, v, "b-q", ConsumeOpts{Prefetch: 1})
	var b Batch
	publishM(t, v, &Message{RoutingKey: "b-q", Body: []byte("1")}, PublishOpts{Batch: &b})
	publishM(t, v, &Message{RoutingKey: "b-q", Body: []byte("2")}, PublishOpts{Batch: &b})
	ds := s.deliveries()
	if len(ds) != 1 || ds[0].Batch != &b {
		t.Fatalf("deliveries %+v: want one, with the publisher's batch", ds)
	}
	ds[0].Queue.Ack(ds[0].Seq)
	ds = s.deliveries()
	if len(ds) != 2 || ds[1].Batch != nil {
		t.Fatalf("after the ack: %d deliveries, the second with batch %p; want 2, none", len(ds), ds[len(ds)-1].Batch)
	}
}

func TestBatchFlush(t *testing.T) {
	var b Batch
	f := &countFlusher{}
	for i := 0; i < maxDeferred; i++ {
		if !b.Defer(f) {
			t.Fatalf("Defer %d refused", i)
		}
	}
	if b.Defer(f) {
		t.Fatal("a full batch took one more")
	}
	if !b.Active() {
		t.Fatal("not pending")
	}
	b.Flush()
	if f.n != maxDeferred || b.Active() {
		t.Fatalf("flushed %d, pending %v", f.n, b.Active())
	}
	b.Flush()
	if f.n != maxDeferred {
		t.Fatal("a second Flush flushed again")
	}
}

// TestBatchClock: the publishes of one run share a reading of the clock,
// taken again after clockUses of them and after Tick; a message published
// with a batch is stamped with it.
func TestBatchClock(t *testing.T) {
	var b Batch
	if b.Active() {
		t.Fatal("a fresh batch is active")
	}
	first := b.time()
	if first == 0 || !b.Active() {
		t.Fatalf("time %d, active %v", first, b.Active())
	}
	for i := 1; i < clockUses; i++ {
		if got := b.time(); got != first {
			t.Fatalf("publish %d of the run got %d, want the run's %d", i, got, first)
		}
	}
	time.Sleep(time.Millisecond)
	if got := b.time(); got <= first {
		t.Fatalf("publish %d of the run got %d, want a new reading", clockUses, got)
	}
	b.Tick()
	if b.Active() {
		t.Fatal("active after Tick")
	}
	b.Tick()
	before := nowNano()
	v, _ := newTestVHost(t)
	declareQ(t, v, "c-q", QueueOpts{})
	m := &Message{RoutingKey: "c-q", Body: []byte("1")}
	publishM(t, v, m, PublishOpts{Batch: &b})
	if m.ts != b.now || m.ts < before {
		t.Fatalf("message stamped %d, batch %d, before %d", m.ts, b.now, before)
	}
}
