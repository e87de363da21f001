package exchange

import (
	"github.com/trident-broker/trident/exchange/streamlog"
	"sync/atomic"
	"testing"
)

// In a cluster no chunk record is written until stream_chunks is
// enabled (a node of an older release could not read it).
func TestStreamChunksFeatureFlag(t *testing.T) {
	v, st := newTestVHost(t)
	if !v.StreamChunksEnabled() {
		t.Fatal("a node alone: chunks disabled")
	}
	c := &gatedCluster{fakeCluster: fakeCluster{name: "a"}}
	v.b.SetCluster(c)
	if v.StreamChunksEnabled() {
		t.Fatal("a cluster without the flag: chunks enabled")
	}
	l := streamlog.New(streamlog.Config{Store: st, NewID: func() uint64 { return 7 }, Prefix: "streamseg/t\x00s\x00",
		Chunks: v.StreamChunksEnabled, TimeOf: recordTime})
	var b Batch
	l.Lock()
	if _, err := l.AppendBatchLocked([]byte{1}, 1, 1<<30, nil, nil, logBatchOf(&b)); err != nil {
		t.Fatal(err)
	}
	l.Unlock()
	// A segment of message records: the record is in the store at once,
	// as it was appended (a chunk would wait for the batch).
	st.Mu.Lock()
	chunked := string(st.Msgs[7][0]) != "\x01"
	st.Mu.Unlock()
	if chunked || b.Active() {
		t.Fatal("a chunk written without the flag")
	}
	c.on = true
	if !v.StreamChunksEnabled() {
		t.Fatal("the flag enabled: chunks disabled")
	}
}

// A duplicate of a named producer waits for its first copy, which may be
// in the pending chunk: the chunk is written then, and both confirmed.
func TestStreamChunkDuplicateWritesTail(t *testing.T) {
	v, st := newTestVHost(t)
	declareQ(t, v, "s", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream"}})
	q, err := v.Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	var ok atomic.Int32
	done := func(err error) {
		if err == nil {
			ok.Add(1)
		}
	}
	for range 2 {
		m := &Message{RoutingKey: "s", Body: []byte("x")}
		m.SetStreamWriter("p", 1)
		if acc, _, _ := q.st.enqueue(m, nil, done, nowNano(), &b); !acc {
			t.Fatal("not accepted")
		}
	}
	st.WG.Wait()
	waitFor(t, "both confirmed without the batch's flush", func() bool { return ok.Load() == 2 })
	if n, _, _, _, _ := q.st.log.Stats(); n != 1 {
		t.Fatalf("%d messages stored, want 1", n)
	}
}

// A stream that closes (the broker stops) writes its pending chunk: its
// publishes are confirmed, not left waiting for a batch that may never
// flush.
func TestStreamChunkWrittenAtClose(t *testing.T) {
	v, st := newTestVHost(t)
	declareQ(t, v, "s", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream"}})
	q, err := v.Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	var ok atomic.Int32
	for range 3 {
		m := &Message{RoutingKey: "s", Body: []byte("x")}
		q.st.enqueue(m, nil, func(err error) {
			if err == nil {
				ok.Add(1)
			}
		}, nowNano(), &b)
	}
	st.WG.Wait()
	if ok.Load() != 0 || !b.Active() {
		t.Fatal("the chunk did not wait for the batch")
	}
	q.st.close(false)
	st.WG.Wait()
	if ok.Load() != 3 {
		t.Fatalf("%d confirmed at close, want 3", ok.Load())
	}
	if keys := st.TotalMessages(); keys != 1 { // the stream's are the store's only messages
		t.Fatalf("%d store keys, want one chunk", keys)
	}
}
