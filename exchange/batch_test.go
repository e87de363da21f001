package exchange

import "testing"

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
	if !b.Pending() {
		t.Fatal("not pending")
	}
	b.Flush()
	if f.n != maxDeferred || b.Pending() {
		t.Fatalf("flushed %d, pending %v", f.n, b.Pending())
	}
	b.Flush()
	if f.n != maxDeferred {
		t.Fatal("a second Flush flushed again")
	}
}
