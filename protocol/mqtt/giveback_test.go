package mqtt

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestGiveBackAfterManyEnded: a wave of ended connections runs one
// collection that gives memory back, after the delay; fewer run none.
func TestGiveBackAfterManyEnded(t *testing.T) {
	var calls atomic.Int32
	old := giveBack
	giveBack = func() { calls.Add(1) }
	defer func() { giveBack = old }()

	g := &giveBackState{delay: 50 * time.Millisecond}
	for range giveBackAfter - 1 {
		g.noteEnded()
	}
	time.Sleep(200 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d collections after %d ended connections, want none", n, giveBackAfter-1)
	}
	for range 3 * giveBackAfter {
		g.noteEnded()
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d collections for one wave of disconnections, want 1", n)
	}
	// The next wave runs another.
	for range giveBackAfter {
		g.noteEnded()
	}
	deadline = time.Now().Add(5 * time.Second)
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d collections after two waves, want 2", n)
	}
}
