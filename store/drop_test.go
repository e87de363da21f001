package store

import (
	"sync"
	"testing"
	"time"
)

func countKeys(t *testing.T, s *Badger, qid uint64) (n int, seqs []uint64) {
	t.Helper()
	if err := s.MessageKeys(qid, 0, func(seq uint64, _ int64) bool {
		n++
		if len(seqs) < 8 {
			seqs = append(seqs, seq)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n, seqs
}

func fillQueue(t *testing.T, s *Badger, qid uint64, n int) {
	t.Helper()
	data := make([]byte, 16)
	for seq := 1; seq <= n; seq++ {
		s.AppendMessage(qid, uint64(seq), data, nil)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

// waitDropping waits until the writer has a drop under way.
func waitDropping(t *testing.T, s *Badger) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		d := s.dropping
		s.mu.Unlock()
		if d > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no drop under way")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDropInChunks: a drop of a large queue is done a chunk per batch, so
// another queue's appends issued meanwhile are durable (their done
// called) before the drop ends; the drop's caller returns once every key
// is gone.
func TestDropInChunks(t *testing.T) {
	s, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 20 * dropChunk
	fillQueue(t, s, 1, n)
	dropped := make(chan error, 1)
	go func() { dropped <- s.DropMessages(1) }()
	waitDropping(t, s)
	appended := make(chan error, 1)
	s.AppendMessage(2, 1, []byte("other"), func(err error) { appended <- err })
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-dropped:
		t.Fatalf("the drop (%v) ended before an append issued during it was durable", err)
	}
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	if k, _ := countKeys(t, s, 1); k != 0 {
		t.Fatalf("%d keys of the dropped queue left", k)
	}
	if k, _ := countKeys(t, s, 2); k != 1 {
		t.Fatalf("the other queue has %d messages", k)
	}
}

// TestDropThenSameQueue: a record of the queue being dropped (its id used
// again) waits for the drop: the new message survives, none of the old.
func TestDropThenSameQueue(t *testing.T) {
	s, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fillQueue(t, s, 7, 10*dropChunk)
	dropped := make(chan error, 1)
	go func() { dropped <- s.DropMessages(7) }()
	waitDropping(t, s)
	var wg sync.WaitGroup
	wg.Add(1)
	s.AppendMessage(7, 3, []byte("new"), func(err error) {
		defer wg.Done()
		if err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	k, seqs := countKeys(t, s, 7)
	if k != 1 || seqs[0] != 3 {
		t.Fatalf("after the drop and a new append: %d keys %v", k, seqs)
	}
	var got string
	_ = s.ReadMessages(7, 0, func(_ uint64, data []byte) bool { got = string(data); return false })
	if got != "new" {
		t.Fatalf("message 3 is %q", got)
	}
}

// TestDropFinishesAtClose: Close finishes a drop under way, so that a
// reopened store holds nothing of the dropped queue.
func TestDropFinishesAtClose(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(dir, BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fillQueue(t, s, 5, 10*dropChunk)
	dropped := make(chan error, 1)
	go func() { dropped <- s.DropMessages(5) }()
	waitDropping(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-dropped; err != nil {
		t.Fatalf("drop: %v", err)
	}
	s, err = OpenBadger(dir, BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if k, _ := countKeys(t, s, 5); k != 0 {
		t.Fatalf("%d keys of the dropped queue after a reopen", k)
	}
}

func TestMaxQueueID(t *testing.T) {
	s, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if id, err := s.MaxQueueID(1 << 61); err != nil || id != 0 {
		t.Fatalf("empty store: %d %v", id, err)
	}
	for _, q := range []uint64{3, 41, 1<<61 | 5} {
		fillQueue(t, s, q, 2)
	}
	if id, err := s.MaxQueueID(1 << 61); err != nil || id != 41 {
		t.Fatalf("MaxQueueID = %d %v, want 41", id, err)
	}
	if id, _ := s.MaxQueueID(41); id != 3 {
		t.Fatalf("MaxQueueID below 41 = %d, want 3", id)
	}
	m := NewMemory()
	m.AppendMessage(9, 1, []byte("x"), nil)
	if id, _ := m.MaxQueueID(1 << 61); id != 9 {
		t.Fatalf("memory: %d", id)
	}
}
