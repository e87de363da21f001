package store

import (
	"sync"
	"testing"
	"time"
)

// TestWriterGivesBackWhenIdle: a burst of 32 MiB of appends from four
// publishers grows the writer's batches (a pending batch of up to 4 MiB,
// and the batches it keeps for reuse); once the writer stayed idle
// giveBackAfter, it keeps neither: an idle store does not hold a burst's
// buffers.
func TestWriterGivesBackWhenIdle(t *testing.T) {
	s, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 16<<10)
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Waves of 1 MiB, each waiting for its confirms, as
			// publishers with a window of unconfirmed messages.
			for w := range 8 {
				var wave sync.WaitGroup
				for i := range 64 {
					wave.Add(1)
					s.AppendMessage(uint64(p+1), uint64(w*64+i), data, func(error) { wave.Done() })
				}
				wave.Wait()
			}
		}()
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond) // the notifier recycles after the callbacks
	held := func() (int, int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := cap(s.pend.arena)
		for _, c := range s.free {
			n += cap(c.arena)
		}
		return n, len(s.free)
	}
	n, free := held()
	if n < 1<<20 {
		t.Skipf("the burst left only %d bytes of batches to give back", n)
	}
	t.Logf("after the burst: %d batches kept, %d bytes of buffers", free, n)
	deadline := time.Now().Add(giveBackAfter + 5*time.Second)
	for {
		n, free = held()
		if n <= 64<<10 && free == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle writer still holds %d batches and %d bytes of buffers %v after its last write", free, n, giveBackAfter+5*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
