package streamlog

import (
	"errors"
	"sync"
	"testing"
)

// gateLog is a clustered stream's group that commits only when told: an
// append reaches the leader's store and its done callback at release.
type gateLog struct {
	st *fakeStore
	mu sync.Mutex
	q  []gated
}

type gated struct {
	seq  uint64
	data []byte
	done func(error)
}

func (g *gateLog) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	g.mu.Lock()
	g.q = append(g.q, gated{seq, append([]byte(nil), data...), done})
	g.mu.Unlock()
}

func (g *gateLog) DeleteMessage(qid, seq uint64) {}

// release commits the queued appends (err nil) or fails them.
func (g *gateLog) release(err error) {
	g.mu.Lock()
	q := g.q
	g.q = nil
	g.mu.Unlock()
	for _, a := range q {
		if err == nil {
			g.st.AppendMessage(9, a.seq, a.data, nil)
		}
		a.done(err)
	}
}

// publish is what stream.enqueue does with a named producer's message on
// the log's owner: it reports whether the message was appended; done is
// its confirm.
func dedupPublish(t *testing.T, l *Log, ref string, seq uint64, done func(error)) bool {
	t.Helper()
	w := &Writer{Ref: ref, Seq: seq}
	l.mu.Lock()
	if l.DuplicateLocked(w) {
		l.AfterTailLocked(done)
		l.mu.Unlock()
		l.FireWaiters(nil)
		return false
	}
	if _, err := l.AppendLocked(testRecord(w, 1, []byte("x")), 1, 1<<30, w, done); err != nil {
		t.Fatal(err)
	}
	l.NoteWriterLocked(w)
	l.mu.Unlock()
	return true
}

// A duplicate is confirmed only once its first copy is durable (and
// fails with it); a leader that stops leading forgets what its group did
// not commit and rebuilds from its store.
func TestStreamDedupConfirmsAfterFirstCopy(t *testing.T) {
	st := newFakeStore()
	g := &gateLog{st: st}
	l := New(Config{Store: st, NewID: func() uint64 { panic("no segment ids") }, Prefix: "streamseg/t\x00s\x00", TimeOf: testTime})
	l.EnterReplicated(9, 1<<30)
	l.ml = g

	var first, dup error = errors.New("not called"), errors.New("not called")
	if !dedupPublish(t, l, "p", 1, func(err error) { first = err }) {
		t.Fatal("first copy not appended")
	}
	if dedupPublish(t, l, "p", 1, func(err error) { dup = err }) {
		t.Fatal("a resend appended again")
	}
	if dup == nil {
		t.Fatal("the duplicate was confirmed before its first copy was durable")
	}
	g.release(nil)
	if first != nil || dup != nil {
		t.Fatalf("after the commit: first %v, duplicate %v", first, dup)
	}

	// A resend of an id whose first copy fails fails with it.
	dedupPublish(t, l, "p", 2, func(error) {})
	dup = errors.New("not called")
	dedupPublish(t, l, "p", 2, func(err error) { dup = err })
	g.release(errLost)
	if !errors.Is(dup, errLost) {
		t.Fatalf("duplicate of a failed append: %v", dup)
	}

	// The node stops leading: id 2 never reached its store, id 1 did.
	l.mu.Lock()
	l.ml = nil
	l.ForgetWritersLocked()
	l.mu.Unlock()
	if seq, err := l.WriterSeq("p"); err != nil || seq != 1 {
		t.Fatalf("a follower's sequence: %d %v", seq, err)
	}
	// It leads again: 2 is not a duplicate, 1 is.
	l.mu.Lock()
	l.ml = g
	l.mu.Unlock()
	if !dedupPublish(t, l, "p", 2, func(error) {}) || dedupPublish(t, l, "p", 1, func(error) {}) {
		t.Fatal("after a change of leader the table is not the store's")
	}
	g.release(nil)
	if seq, err := l.WriterSeq("p"); err != nil || seq != 2 {
		t.Fatalf("sequence: %d %v", seq, err)
	}
}
