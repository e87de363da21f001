package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/trident-broker/trident/store"
)

// TestCommitLingerCancels: a delete issued soon after its append, within
// CommitLinger, cancels both across the writer's batches: the message is
// never written, its done is called without waiting for the linger, and
// the done callbacks come in issue order.
func TestCommitLingerCancels(t *testing.T) {
	opts := testOptions()
	opts.CommitLinger = 2 * time.Second // far longer than the test issues take
	s, err := store.OpenBadger(t.TempDir(), opts, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Linger()
	const n = 100
	var mu sync.Mutex
	var order []uint64
	for seq := uint64(1); seq <= n; seq++ {
		s.AppendMessage(7, seq, []byte{byte(seq)}, func(err error) {
			if err != nil {
				t.Errorf("append %d: %v", seq, err)
			}
			mu.Lock()
			order = append(order, seq)
			mu.Unlock()
		})
		if seq == 1 {
			// Let the writer take the first append on its own (as
			// the aged batch), so that its delete comes in the next.
			time.Sleep(50 * time.Millisecond)
		}
	}
	before := s.Stats()
	for seq := uint64(1); seq <= n/2; seq++ {
		s.DeleteMessage(7, seq)
	}
	// The cancelled appends' done callbacks wait for neither the linger
	// nor a write: nothing was issued before them that is still to be
	// written.
	deadline := time.Now().Add(opts.CommitLinger / 2)
	for {
		mu.Lock()
		k := len(order)
		mu.Unlock()
		if k >= n/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d cancelled appends' callbacks within half the linger", k, n/2)
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(order) != n {
		t.Fatalf("%d done callbacks after Sync, want %d", len(order), n)
	}
	for i, seq := range order {
		if seq != uint64(i+1) {
			t.Fatalf("done callbacks out of issue order: %v", order)
		}
	}
	mu.Unlock()
	if c := s.Stats().Cancelled - before.Cancelled; c != n/2 {
		t.Fatalf("cancelled %d append+delete pairs, want %d", c, n/2)
	}
	if d := s.Stats().Deletes; d != 0 {
		t.Fatalf("%d deletes written, want none (all cancelled)", d)
	}
	var got []uint64
	if err := s.LoadMessages(7, func(seq uint64, data []byte) error {
		if len(data) != 1 || data[0] != byte(seq) {
			t.Errorf("seq %d: data %x", seq, data)
		}
		got = append(got, seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != n/2 || got[0] != n/2+1 || got[len(got)-1] != n {
		t.Fatalf("stored %v, want %d..%d", got, n/2+1, n)
	}
}

// TestCommitLingerOnlyWhenItPays: a publisher that waits for each confirm,
// with nothing deleting its messages, is not held up by CommitLinger: the
// writer ages batches only while they get cancelled.
func TestCommitLingerOnlyWhenItPays(t *testing.T) {
	opts := testOptions()
	opts.CommitLinger = 300 * time.Millisecond
	s, err := store.OpenBadger(t.TempDir(), opts, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Linger() // it stops once a batch shows nothing cancelled
	const n = 20
	start := time.Now()
	for seq := uint64(1); seq <= n; seq++ {
		done := make(chan error, 1)
		s.AppendMessage(3, seq, []byte("x"), func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Ageing each would take n × 300 ms; the first alone may age.
	if d := time.Since(start); d > n*opts.CommitLinger/2 {
		t.Fatalf("%d confirmed appends took %v: the writer lingered without cancellations", n, d)
	}
}
