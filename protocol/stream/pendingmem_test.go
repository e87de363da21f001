package stream

import (
	"sync"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// collect is a core consumer's sink that keeps what it is given.
type collect struct {
	mu   sync.Mutex
	ds   []exchange.Delivery
	runs []exchange.RecordRun
	nrec int
}

func (s *collect) DeliverRun(r exchange.RecordRun) bool {
	s.mu.Lock()
	s.runs = append(s.runs, r)
	s.nrec += len(r.Recs)
	s.mu.Unlock()
	return true
}

func (s *collect) Deliver(d exchange.Delivery) bool {
	s.mu.Lock()
	s.ds = append(s.ds, d)
	s.mu.Unlock()
	return true
}

func (s *collect) Cancelled(*exchange.Consumer) {}

// consumeAll consumes stream "s" of vh with o (its Tag, Sink, Owner set
// here; Prefetch n and the first offset unless o says otherwise) until n
// messages or records came.
func consumeAll(t testing.TB, vh *exchange.VHost, o exchange.ConsumeOpts, n int) (*collect, *exchange.Consumer) {
	t.Helper()
	sink := &collect{}
	o.Tag, o.Sink, o.Owner = "t", sink, t
	if o.Prefetch == 0 {
		o.Prefetch = n
	}
	if o.Args == nil {
		o.Args = exchange.Table{"x-stream-offset": "first"}
	}
	cons, err := vh.Consume("s", o)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); sink.len() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			cons.Cancel()
			t.Fatalf("%d of %d delivered", sink.len(), n)
		}
	}
	return sink, cons
}

func (s *collect) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ds) + s.nrec
}

// TestSubscriptionPendingKeepsArray: the deliveries a subscription holds
// until its credit lets them out are written a chunk at a time, and the
// slice that holds them keeps its array (bounded by the prefetch) from
// chunk to chunk: no array grown from nothing after each chunk, which was
// the largest churn of ten subscribers reading a stream from first.
func TestSubscriptionPendingKeepsArray(t *testing.T) {
	s := newTestServer(t)
	c := dial(t, s)
	c.open()
	c.createWithPublisher("")
	const n = 2500
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	for i := 0; i < n; i += 500 {
		c.publish(1, 1, "", ids[i:i+500]...)
		c.confirms(1, 500)
	}
	vh, _ := s.b.VHost("/")
	sink, cons := consumeAll(t, vh, exchange.ConsumeOpts{NoOffsetHeader: true}, n)
	defer cons.Cancel()
	cn := &conn{frameMax: 1 << 20}
	cn.w.Init()
	sub := &subscription{c: cn, q: cons.Queue(), credit: 1 << 20}
	sink.mu.Lock()
	for _, d := range sink.ds {
		sub.pending = append(sub.pending, d)
		sub.pendingBytes += len(d.Msg.Body)
	}
	sink.mu.Unlock()
	if _, ok := offsetOf(sub.pending[0]); !ok {
		t.Fatal("a delivery without an offset")
	}
	array, size := &sub.pending[:1][0], cap(sub.pending)
	chunks := 0
	for len(sub.pending) > 0 {
		cn.chunkLocked(sub)
		cn.w.Buf = cn.w.Buf[:0]
		chunks++
		if len(sub.pending) > 0 && (&sub.pending[:1][0] != array || cap(sub.pending) != size) {
			t.Fatalf("after chunk %d the pending deliveries are in another array (cap %d, was %d)", chunks, cap(sub.pending), size)
		}
	}
	if chunks < 3 {
		t.Fatalf("%d deliveries went in %d chunks, want at least 3", n, chunks)
	}
	if cap(sub.pending) != size || &sub.pending[:1][0] != array {
		t.Fatalf("an emptied subscription lost its array (cap %d, was %d)", cap(sub.pending), size)
	}
	if sub.pendingBytes != 0 || len(cn.toAck) != n {
		t.Fatalf("pending bytes %d, %d to ack, want 0 and %d", sub.pendingBytes, len(cn.toAck), n)
	}
}
