package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512 // what the file takes on disk (preallocated files are sparse)
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestReclaimWhileWriting: a reclaim (which makes Badger refuse writes for
// a moment) running while messages are appended and deleted and metadata
// is written fails none of them.
func TestReclaimWhileWriting(t *testing.T) {
	s, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		if failed == nil {
			failed = err
		}
		mu.Unlock()
	}
	wg.Go(func() {
		body := bytes.Repeat([]byte("x"), 1000)
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			s.AppendMessage(1, seq, body, func(err error) {
				if err != nil {
					fail(err)
				}
			})
			if seq > 10 {
				s.DeleteMessage(1, seq-10)
			}
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.PutMeta(fmt.Sprint("k/", i%50), []byte("v")); err != nil {
				fail(err)
			}
		}
	})
	for i := 0; i < 5; i++ {
		time.Sleep(20 * time.Millisecond)
		s.reclaim()
	}
	close(stop)
	wg.Wait()
	if err := s.Sync(); err != nil {
		t.Fatalf("store failed: %v", err)
	}
	if failed != nil {
		t.Fatalf("a write failed during reclaim: %v", failed)
	}
}

// TestReclaimGivesDiskBack: after a backlog is written and deleted, an idle
// store's reclaim and value-log GC give most of its disk back.
func TestReclaimGivesDiskBack(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(dir, BadgerOptions{GCInterval: -1, TrimInterval: -1, ValueLogFileSize: 8 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB
	const n = 100_000                                    // ~100 MiB
	for seq := uint64(1); seq <= n; seq++ {
		s.AppendMessage(1, seq, body, nil)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	peak := dirBytes(t, dir)
	for seq := uint64(1); seq <= n; seq++ {
		s.DeleteMessage(1, seq)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.reclaim()
	s.eng.collect(s.opts.GCDiscardRatio)
	after := dirBytes(t, dir)
	t.Logf("data dir %d MiB at peak, %d MiB after reclaim and GC", peak>>20, after>>20)
	if after > peak/10 {
		t.Fatalf("data dir %d after the drain, peak %d: not given back", after, peak)
	}
}

// TestRangeAndDropDeletesCount: the keys a range delete (a purge) and a
// drop (a deleted queue) remove count as message deletes, as each
// DeleteMessage does: the count is what makes an idle store reclaim its
// space (reclaimIfIdle), which never happened after a purge or a queue deletion.
func TestRangeAndDropDeletesCount(t *testing.T) {
	defer func(r int) { rangeChunk = r }(rangeChunk)
	rangeChunk = 100
	s, err := OpenBadger(t.TempDir(), BadgerOptions{GCInterval: -1, TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 2*dropChunk + 50 // several chunks each
	for seq := uint64(1); seq <= n; seq++ {
		s.AppendMessage(1, seq, []byte("x"), nil)
		s.AppendMessage(2, seq, []byte("y"), nil)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.DeleteMessages(1, 0, n+1)
	if err := s.DropMessages(2); err != nil {
		t.Fatal(err)
	}
	// A range goes a chunk per batch: later batches carry it to its end.
	for i := 0; i < 100 && s.Stats().Deletes < 2*n; i++ {
		s.AppendMessage(3, uint64(i+1), []byte("z"), nil)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if d := s.Stats().Deletes; d != 2*n {
		t.Fatalf("%d message deletes counted, %d keys deleted", d, 2*n)
	}
}
