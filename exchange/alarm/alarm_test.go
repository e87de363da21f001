package alarm

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
)

func TestMemoryLimit(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if got := MemoryLimit(123<<20, 40, log); got != 123<<20 {
		t.Fatalf("bytes set: limit %d, want %d (bytes win over percent)", got, 123<<20)
	}
	if got := MemoryLimit(0, 0, log); got != 0 {
		t.Fatalf("nothing set: limit %d, want 0", got)
	}
	total := totalMemory()
	if total <= 0 {
		t.Fatal("/proc/meminfo has no MemTotal on this machine")
	}
	if got := MemoryLimit(0, 40, log); got != total*40/100 {
		t.Fatalf("40%%: limit %d, want %d of %d", got, total*40/100, total)
	}
}

// TestWatchDisk raises the disk alarm when the data directory's file system
// has less free space than the limit, and leaves it clear otherwise.
func TestWatchDisk(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	free, err := diskFree(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit int64
		want  bool
	}{{free * 4, true}, {1 << 20, false}} {
		alarms := exchange.NewAlarms()
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { WatchDisk(alarms, t.TempDir(), tc.limit, 10*time.Millisecond, stop, log); close(done) }()
		time.Sleep(50 * time.Millisecond) // a few checks
		close(stop)
		<-done
		if got := slices.Contains(alarms.Active(), "disk"); got != tc.want {
			t.Fatalf("limit %d with %d free: disk alarm %v, want %v", tc.limit, free, got, tc.want)
		}
	}
}

// TestStoreTrim: the store pages its value log out past an eighth of the
// memory limit, within [32 MiB, the store's default], ten times a second;
// without a limit the store's defaults stand.
func TestStoreTrim(t *testing.T) {
	const dflt = 256 << 20
	if _, _, ok := StoreTrim(0, dflt); ok {
		t.Fatal("a trim without a memory limit")
	}
	for limit, want := range map[int64]int64{
		400 << 20: 50 << 20,  // an eighth
		64 << 20:  32 << 20,  // at least 32 MiB
		8 << 30:   256 << 20, // at most the default
	} {
		above, every, ok := StoreTrim(limit, dflt)
		if !ok || above != want || every != 100*time.Millisecond {
			t.Errorf("limit %d: above %d every %v (%v), want %d every 100ms", limit, above, every, ok, want)
		}
	}
}
