package exchange

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// flakyMetaStore fails the first fails puts of named stream offsets.
type flakyMetaStore struct {
	*fakeStore
	fails atomic.Int32
}

func (s *flakyMetaStore) PutMeta(key string, val []byte) error {
	if strings.HasPrefix(key, "streamoff/") && s.fails.Add(-1) >= 0 {
		return errors.New("no leader")
	}
	return s.fakeStore.PutMeta(key, val)
}

// TestStreamOffsetFlushRetried: a named offset whose write failed (in a
// cluster: the metadata group without a leader for a while) is written
// again, even if the consumer acks nothing more and is cancelled.
func TestStreamOffsetFlushRetried(t *testing.T) {
	fs := &flakyMetaStore{fakeStore: newFakeStore()}
	fs.fails.Store(2)
	v := mustVHost(t, newTestBroker(t, fs), "/")
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 3; i++ {
		publish(t, v, "", "s", "m")
	}
	s := &sink{}
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 5, Sink: s, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "n"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "3 deliveries", func() bool { return s.len() == 3 })
	q.Ack(s.deliveries()[2].Seq)
	eventually(t, 5*time.Second, "offset 2 stored after 2 failed writes", func() bool {
		return storedOffset(fs.fakeStore, "n") == 2
	})
	if n := fs.fails.Load(); n > -1 {
		t.Fatalf("%d failures left: the writes were not tried", n+1)
	}
}

// gatedMetaStore holds the first put of a named stream offset until
// release is closed (heldDone is closed once it is written), and reports
// each such put on puts.
type gatedMetaStore struct {
	*fakeStore
	first    atomic.Bool
	release  chan struct{}
	heldDone chan struct{}
	puts     chan string
}

func (s *gatedMetaStore) PutMeta(key string, val []byte) error {
	if strings.HasPrefix(key, "streamoff/") {
		s.puts <- key
		if s.first.CompareAndSwap(false, true) {
			<-s.release
			defer close(s.heldDone)
		}
	}
	return s.fakeStore.PutMeta(key, val)
}

// TestStreamOffsetFlushesInOrder: a cancelled named consumer's last flush
// waits for a flush still under way (the timer's, with an older offset),
// so the record written last is the newest offset.
func TestStreamOffsetFlushesInOrder(t *testing.T) {
	fs := &gatedMetaStore{fakeStore: newFakeStore(), release: make(chan struct{}), heldDone: make(chan struct{}), puts: make(chan string, 16)}
	v := mustVHost(t, newTestBroker(t, fs), "/")
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 3; i++ {
		publish(t, v, "", "s", "m")
	}
	s := &sink{}
	c, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 5, Sink: s, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "n"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "3 deliveries", func() bool { return s.len() == 3 })
	ds := s.deliveries()
	q.Ack(ds[0].Seq)
	select {
	case <-fs.puts: // the timer's flush of offset 0, held
	case <-time.After(5 * time.Second):
		t.Fatal("no flush of offset 0")
	}
	q.AckMany([]uint64{ds[1].Seq, ds[2].Seq})
	cancelled := make(chan struct{})
	go func() {
		c.Cancel() // flushes offset 2
		close(cancelled)
	}()
	// Without the ordering the cancel's flush would be written now, and
	// the held one after it.
	select {
	case <-fs.puts:
	case <-time.After(100 * time.Millisecond):
	}
	close(fs.release)
	<-cancelled
	<-fs.heldDone
	if got := storedOffset(fs.fakeStore, "n"); got != 2 {
		t.Fatalf("stored offset %d after the consumer acked 2 and was cancelled", got)
	}
}

// storedOrder is the (epoch, offset) of the stored record of named offset
// name of stream s.
func storedOrder(fs *fakeStore, name string) namedOffset {
	fs.Mu.Lock()
	defer fs.Mu.Unlock()
	e, n, _ := MetaStamp("streamoff/", fs.Meta["streamoff//\x00s\x00"+name])
	return namedOffset{off: n, epoch: e}
}

// TestStreamOffsetOrder: a named offset's record carries its consumer's
// epoch; a committed record that orders before the one held (the same
// consumer's older offset written late by another node, as when acks of
// what the previous member delivered reach it after the next member
// stored a later offset; or an older consumer's) does not move the
// offset; a later consumer's record replaces it, a value of this node's
// still dirty included, even one lower (that consumer went back); a write
// that failed is retried as it was taken.
func TestStreamOffsetOrder(t *testing.T) {
	fs := &flakyMetaStore{fakeStore: newFakeStore()}
	v := mustVHost(t, newTestBroker(t, fs), "/")
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 5; i++ {
		publish(t, v, "", "s", "m")
	}
	s := &sink{}
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c", Prefetch: 5, Sink: s, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "n"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "5 deliveries", func() bool { return s.len() == 5 })
	ds := s.deliveries()
	q.st.mu.Lock()
	var epoch uint64
	for _, cur := range q.st.cursors {
		epoch = cur.epoch
	}
	q.st.mu.Unlock()
	fs.fails.Store(1)
	q.Ack(ds[2].Seq)
	eventually(t, 5*time.Second, "offset 2 stored after a failed write", func() bool {
		return storedOffset(fs.fakeStore, "n") == 2
	})
	if got := storedOrder(fs.fakeStore, "n"); epoch == 0 || got != (namedOffset{off: 2, epoch: epoch}) {
		t.Fatalf("stored %+v, want offset 2 of epoch %d", got, epoch)
	}
	rec := func(off, epoch uint64) []byte { return encodeRecord(Table{"offset": off, "epoch": epoch}) }
	held := func() namedOffset {
		q.st.mu.Lock()
		defer q.st.mu.Unlock()
		return q.st.offsets["n"]
	}
	for _, r := range []namedOffset{{off: 1, epoch: epoch}, {off: 9, epoch: epoch - 1}} {
		if err := v.applyStreamOffset("s\x00n", rec(r.off, r.epoch)); err != nil || held().off != 2 {
			t.Fatalf("a record %+v before the one held: err %v, held %+v, want offset 2", r, err, held())
		}
	}
	q.Ack(ds[3].Seq) // dirty: 3
	if err := v.applyStreamOffset("s\x00n", rec(0, epoch+1)); err != nil || held() != (namedOffset{off: 0, epoch: epoch + 1}) {
		t.Fatalf("a later consumer's record: err %v, held %+v", err, held())
	}
	q.st.mu.Lock()
	dirty, clock := q.st.dirty["n"], q.st.clock
	q.st.mu.Unlock()
	if dirty || clock < epoch+1 {
		t.Fatalf("after a later consumer's record: dirty %v, clock %d below its epoch %d", dirty, clock, epoch+1)
	}
	// A consumer subscribing now is later than every epoch seen.
	s2 := &sink{}
	if _, err := v.Consume("s", ConsumeOpts{Tag: "c2", Prefetch: 5, Sink: s2, Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "m"}}); err != nil {
		t.Fatal(err)
	}
	q.st.mu.Lock()
	for _, cur := range q.st.cursors {
		if cur.name == "m" && cur.epoch <= epoch+1 {
			t.Errorf("a new consumer's epoch %d, not above %d", cur.epoch, epoch+1)
		}
	}
	q.st.mu.Unlock()
	if _, _, ok := MetaStamp("queue/x", rec(1, 5)); ok {
		t.Fatal("MetaStamp orders a queue record")
	}
}
