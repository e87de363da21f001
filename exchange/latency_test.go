package exchange

import (
	"testing"
	"time"
)

// A confirm completed during a store round takes the round's start as its
// end when its publish began before the round; a publish that began during
// the round, or a confirm outside one, reads the clock.
func TestConfirmClockRounds(t *testing.T) {
	var b Broker
	before := nowNano()
	b.StoreRound(true)
	start := b.confirmClock(before)
	if start < before {
		t.Fatalf("round start %d before %d", start, before)
	}
	time.Sleep(2 * time.Millisecond)
	if got := b.confirmClock(before); got != start {
		t.Fatalf("inside the round the clock moved: %d, want %d", got, start)
	}
	// A publish that began after the round started: the clock, never a
	// time before its start.
	late := nowNano()
	if got := b.confirmClock(late); got < late {
		t.Fatalf("a publish begun at %d inside the round ends at %d, before it began", late, got)
	}
	b.StoreRound(false)
	if got := b.confirmClock(before); got-start < int64(2*time.Millisecond) {
		t.Fatalf("after the round the clock is %d ns past its start, want ≥ 2 ms", got-start)
	}
}
