package store

import (
	"slices"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

func openTestBadger(t *testing.T, dir string) *Badger {
	t.Helper()
	s, err := OpenBadger(dir, BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func allSeqs(t *testing.T, s *Badger, qid uint64) []uint64 {
	t.Helper()
	var out []uint64
	if err := s.MessageKeys(qid, 0, func(seq uint64, _ int64) bool {
		out = append(out, seq)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func seqsFrom(lo, hi uint64) []uint64 {
	var out []uint64
	for s := lo; s <= hi; s++ {
		out = append(out, s)
	}
	return out
}

// TestRangeDeleteInChunks: a range larger than a chunk is deleted over
// several batches, yet reads see it gone at once; records of the queue
// past the range do not end it early, and their confirms come before it
// ends; a record inside the range issued after it survives it.
func TestRangeDeleteInChunks(t *testing.T) {
	old := rangeChunk
	rangeChunk = 10
	t.Cleanup(func() { rangeChunk = old })
	s := openTestBadger(t, t.TempDir())
	defer s.Close()
	fillQueue(t, s, 1, 20000) // 19,800 in the range: ~2,000 batches
	fillQueue(t, s, 2, 50)

	batches := s.Stats().Batches
	s.DeleteMessages(1, 101, 19901)
	want := append(seqsFrom(1, 100), seqsFrom(19901, 20000)...)
	if got := allSeqs(t, s, 1); !slices.Equal(got, want) {
		t.Fatalf("right after the range delete: %d keys %v…, want %d", len(got), got[:min(len(got), 5)], len(want))
	}
	// An append past the range (a stream's tail) is confirmed while the
	// range is still being deleted.
	done := make(chan error, 1)
	s.AppendMessage(1, 30000, []byte("tail"), func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	under := len(s.rangeView)
	s.mu.Unlock()
	if under != 1 {
		t.Fatalf("%d ranges under way after the tail's confirm, want 1 (19,800 keys at 10 a batch)", under)
	}
	want = append(want, 30000)
	if got := allSeqs(t, s, 1); !slices.Equal(got, want) {
		t.Fatalf("during the range delete: %v…", got[:min(len(got), 5)])
	}
	// A record inside the range, issued after it, survives it.
	s.AppendMessage(1, 500, []byte("again"), nil)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	want = append(seqsFrom(1, 100), 500)
	want = append(append(want, seqsFrom(19901, 20000)...), 30000)
	if got := allSeqs(t, s, 1); !slices.Equal(got, want) {
		t.Fatalf("after an append inside the range: %d keys, want %d", len(got), len(want))
	}
	if got := allSeqs(t, s, 2); len(got) != 50 {
		t.Fatalf("the other queue has %d keys, want 50", len(got))
	}
	s.mu.Lock()
	under = len(s.rangeView)
	s.mu.Unlock()
	if under != 0 {
		t.Fatalf("%d ranges under way after the append inside the range", under)
	}
	if s.Stats().Batches-batches < 3 {
		t.Fatalf("%d batches: the range was not chunked", s.Stats().Batches-batches)
	}
	// Nothing of the range, nor its tombstone, is on disk.
	if n := countRaw(t, s, []byte{rangeTag}); n != 0 {
		t.Fatalf("%d tombstones left", n)
	}
}

// TestRangeDeleteFinishesAtClose: Close finishes a range under way; a
// tombstone left by a crash (written here by hand) has its range finished
// by the next open.
func TestRangeDeleteFinishesAtClose(t *testing.T) {
	old := rangeChunk
	rangeChunk = 10
	t.Cleanup(func() { rangeChunk = old })
	dir := t.TempDir()
	s := openTestBadger(t, dir)
	fillQueue(t, s, 1, 500)
	s.DeleteMessages(1, 1, 401)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestBadger(t, dir)
	if got := allSeqs(t, s, 1); !slices.Equal(got, seqsFrom(401, 500)) {
		t.Fatalf("after Close and open: %d keys", len(got))
	}
	// A crash's leftovers: the range's keys and its tombstone.
	if err := s.db.Update(func(txn *badgerTxn) error {
		return txn.Set(rangeMarkKey(1, 401, 451), nil)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestBadger(t, dir)
	defer s.Close()
	if got := allSeqs(t, s, 1); !slices.Equal(got, seqsFrom(451, 500)) {
		t.Fatalf("after a tombstone: %d keys from %v", len(got), got[:min(len(got), 3)])
	}
	if n := countRaw(t, s, []byte{rangeTag}); n != 0 {
		t.Fatalf("%d tombstones left after open", n)
	}
}

type badgerTxn = badger.Txn

// countRaw counts the keys with prefix in Badger itself.
func countRaw(t *testing.T, s *Badger, prefix []byte) int {
	t.Helper()
	n := 0
	if err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
