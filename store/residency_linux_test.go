package store

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no RssFile")
	return 0
}

// TestTrimMappedPagesOutTheValueLog: bodies written through Badger's
// mapping of its value log stop counting in the process's resident size
// once trimMapped has run, and still read back intact, those written
// while it ran too, after the store is opened again.
func TestTrimMappedPagesOutTheValueLog(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(dir, BadgerOptions{TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()              // the store opened last
	body := bytes.Repeat([]byte("trident!"), 512) // 4 KiB, in the value log
	const n = 8000                                // ~32 MiB
	for i := uint64(1); i <= n; i++ {
		s.AppendMessage(1, i, body, nil)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	read := 0
	if err := s.ReadMessages(1, 0, func(_ uint64, d []byte) bool { read++; return bytes.Equal(d, body) }); err != nil || read != n {
		t.Fatalf("read %d: %v", read, err)
	}
	before := rssFile(t)
	trimMapped(dir)
	time.Sleep(50 * time.Millisecond)
	after := rssFile(t)
	t.Logf("RssFile %d MiB before, %d MiB after", before>>20, after>>20)
	if before-after < 16<<20 {
		t.Fatalf("RssFile %d before, %d after: the value log stayed resident", before, after)
	}
	read = 0
	if err := s.ReadMessages(1, 0, func(_ uint64, d []byte) bool { read++; return bytes.Equal(d, body) }); err != nil || read != n {
		t.Fatalf("after the trim: read %d intact: %v", read, err)
	}
	// Pages written and not yet synced when their mapping is dropped are
	// not lost: more bodies, a trim before the sync, then the store
	// closed and opened again reads every one.
	for i := uint64(n + 1); i <= 2*n; i++ {
		s.AppendMessage(1, i, body, nil)
		if i == n+n/2 {
			trimMapped(dir)
		}
	}
	trimMapped(dir)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBadger(dir, BadgerOptions{TrimInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	read = 0
	if err := s.ReadMessages(1, 0, func(_ uint64, d []byte) bool { read++; return bytes.Equal(d, body) }); err != nil || read != 2*n {
		t.Fatalf("after trims while writing and a reopen: read %d of %d intact: %v", read, 2*n, err)
	}
}

func TestResidentFileBytes(t *testing.T) {
	if got, want := residentFileBytes(), rssFile(t); got <= 0 || got > 2*want+1<<20 {
		t.Fatalf("residentFileBytes %d, RssFile %d", got, want)
	}
}
