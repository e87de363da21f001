package sched

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// memStore is an in-memory Store: appends applied at once, done called
// at once.
type memStore struct {
	mu   sync.Mutex
	msgs map[uint64]map[uint64][]byte
}

func newMemStore() *memStore { return &memStore{msgs: map[uint64]map[uint64][]byte{}} }

func (s *memStore) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	s.mu.Lock()
	if s.msgs[qid] == nil {
		s.msgs[qid] = map[uint64][]byte{}
	}
	s.msgs[qid][seq] = append([]byte(nil), data...)
	s.mu.Unlock()
	if done != nil {
		done(nil)
	}
}

func (s *memStore) DeleteMessage(qid, seq uint64) {
	s.mu.Lock()
	delete(s.msgs[qid], seq)
	s.mu.Unlock()
}

func (s *memStore) ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error {
	s.mu.Lock()
	var seqs []uint64
	for k := range s.msgs[qid] {
		if k >= from {
			seqs = append(seqs, k)
		}
	}
	slices.Sort(seqs)
	data := make([][]byte, len(seqs))
	for i, k := range seqs {
		data[i] = s.msgs[qid][k]
	}
	s.mu.Unlock()
	for i, k := range seqs {
		if !fn(k, data[i]) {
			break
		}
	}
	return nil
}

func (s *memStore) DropMessages(qid uint64) error {
	s.mu.Lock()
	delete(s.msgs, qid)
	s.mu.Unlock()
	return nil
}

func (s *memStore) count(qid uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs[qid])
}

// routed collects what a Delayer routes: each value with the time it
// was routed.
type routed struct {
	mu  sync.Mutex
	got []string
	at  []int64
}

func (r *routed) route(v string) {
	r.mu.Lock()
	r.got = append(r.got, v)
	r.at = append(r.at, time.Now().UnixMilli())
	r.mu.Unlock()
}

func (r *routed) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func newTestDelayer(st *memStore, r *routed, keep func(string) bool) *Delayer[string] {
	return New(Config[string]{Store: st, ID: 7, Keep: keep, Route: r.route,
		Decode: func(b []byte) (string, error) {
			if len(b) == 0 {
				return "", errors.New("empty")
			}
			return string(b), nil
		}})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// More messages than the window holds: the window stays bounded, the rest
// is read ahead from the store, each message is routed once, never before
// it is due, and its record is gone once routed.
func TestDelayerWindowAndOrder(t *testing.T) {
	st, r := newMemStore(), &routed{}
	d := newTestDelayer(st, r, nil)
	const n = 2*WindowMsgs + 50
	due := map[string]int64{}
	now := time.Now()
	for i := range n {
		ms := int64(300 + (i*7919)%500)
		v := strconv.Itoa(i)
		due[v] = now.UnixMilli() + ms
		d.Schedule(v, []byte(v), ms, now.UnixNano(), nil)
	}
	if w := d.Window(); w > WindowMsgs {
		t.Fatalf("window holds %d, bound %d", w, WindowMsgs)
	}
	if d.Held() != n || st.count(7) != n {
		t.Fatalf("held %d, stored %d, want %d", d.Held(), st.count(7), n)
	}
	d.Start()
	waitUntil(t, "every message routed", func() bool { return r.n() == n })
	d.Stop(false)
	<-d.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for i, v := range r.got {
		if seen[v] {
			t.Fatalf("%s routed twice", v)
		}
		seen[v] = true
		if r.at[i] < due[v] {
			t.Fatalf("%s routed at %d, due at %d", v, r.at[i], due[v])
		}
	}
	for i := 1; i < len(r.got); i++ { // in due order
		if due[r.got[i]] < due[r.got[i-1]] {
			t.Fatalf("%s (due %d) routed after %s (due %d)", r.got[i], due[r.got[i]], r.got[i-1], due[r.got[i-1]])
		}
	}
	if d.Held() != 0 || st.count(7) != 0 {
		t.Fatalf("after routing: held %d, stored %d", d.Held(), st.count(7))
	}
}

// A start finds what the store holds: Keep's refusals and records that do
// not decode are deleted, the rest counted and routed; new keys go on
// above the highest counter kept.
func TestDelayerRecover(t *testing.T) {
	st, r := newMemStore(), &routed{}
	now := time.Now().UnixNano()
	st.AppendMessage(7, Key(dueAfter(now, 50), 5), []byte("keep"), nil)
	st.AppendMessage(7, Key(dueAfter(now, 50), 9), []byte("drop"), nil)
	st.AppendMessage(7, Key(dueAfter(now, 50), 3), nil, nil) // corrupt
	d := newTestDelayer(st, r, func(v string) bool { return v != "drop" })
	if err := d.Recover(); err != nil {
		t.Fatal(err)
	}
	if d.Held() != 1 || st.count(7) != 1 {
		t.Fatalf("recovered: held %d, stored %d, want 1 and 1", d.Held(), st.count(7))
	}
	d.Schedule("new", []byte("new"), 60, now, nil)
	var newSeq uint64
	_ = st.ReadMessages(7, 0, func(seq uint64, b []byte) bool {
		if string(b) == "new" {
			newSeq = seq
		}
		return true
	})
	if newSeq&SeqMask <= 5 {
		t.Fatalf("a new key's counter %d is not above the highest kept, 5", newSeq&SeqMask)
	}
	d.Start()
	waitUntil(t, "both routed", func() bool { return r.n() == 2 })
	d.Stop(true)
	<-d.Done()
	waitUntil(t, "dropped", func() bool { return st.count(7) == 0 })
}

// A delayer stopped with drop removes what it holds and says so; one
// stopped without keeps it for the next start and routes nothing more.
func TestDelayerStop(t *testing.T) {
	st, r := newMemStore(), &routed{}
	d := newTestDelayer(st, r, nil)
	dropped := make(chan struct{})
	d.c.Dropped = func() { close(dropped) }
	d.Schedule("a", []byte("a"), 100_000, time.Now().UnixNano(), nil)
	d.Start()
	d.Stop(false)
	<-d.Done()
	if st.count(7) != 1 || r.n() != 0 {
		t.Fatalf("a stop without drop: stored %d, routed %d", st.count(7), r.n())
	}
	d2 := newTestDelayer(st, r, nil)
	d2.c.Dropped = func() { close(dropped) }
	if err := d2.Recover(); err != nil {
		t.Fatal(err)
	}
	d2.Stop(true) // never started
	<-d2.Done()
	select {
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("Dropped not called")
	}
	if st.count(7) != 0 {
		t.Fatalf("after a drop: %d stored", st.count(7))
	}
}
