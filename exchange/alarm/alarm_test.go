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

// A heap that stopped growing has its garbage given back once it has been
// quiet for idleQuiet, when the garbage is worth it, and not again within
// idleEvery; while it grows, never.
func TestIdleGiveBack(t *testing.T) {
	const mib = 1 << 20
	var g idleGiveBack
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// A burst: the heap grows every tick.
	for i := range 20 {
		if g.due(at(time.Duration(i)*100*time.Millisecond), int64(100+10*i)*mib, 50*mib) {
			t.Fatalf("given back at tick %d while the heap grows", i)
		}
	}
	grown := at(1900 * time.Millisecond)
	// Quiet, with 240 MiB of garbage over 50 live, less than idleQuiet.
	if g.due(grown.Add(idleQuiet-100*time.Millisecond), 290*mib, 50*mib) {
		t.Fatal("given back before the heap was quiet for idleQuiet")
	}
	// A small allocation (under idleSlack) does not count as growth.
	if !g.due(grown.Add(idleQuiet), 290*mib+idleSlack/2, 50*mib) {
		t.Fatal("not given back after idleQuiet with 240 MiB of garbage")
	}
	// Not again within idleEvery, even with garbage.
	if g.due(grown.Add(idleQuiet+time.Second), 290*mib, 50*mib) {
		t.Fatal("given back twice within idleEvery")
	}
	// Collected: the heap is its live part; later little garbage: nothing.
	if g.due(grown.Add(idleEvery+idleQuiet+time.Second), 52*mib, 50*mib) {
		t.Fatal("given back 2 MiB of garbage")
	}
	// Garbage under an eighth of the live heap: nothing.
	var h idleGiveBack
	h.due(t0, 890*mib, 800*mib)
	if h.due(t0.Add(time.Minute), 890*mib, 800*mib) {
		t.Fatal("given back 90 MiB of garbage over an 800 MiB live heap")
	}
	// What a fleet's bursts leave: 8 MiB of garbage over 60 MiB live.
	var f idleGiveBack
	f.due(t0, 68*mib, 60*mib)
	if !f.due(t0.Add(idleQuiet), 68*mib, 60*mib) {
		t.Fatal("8 MiB of garbage over a 60 MiB live heap not given back")
	}
}
