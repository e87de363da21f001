package mqtt

import (
	"sync"
	"testing"
	"time"
)

// TestSignal: a signal's channel is closed once it fires, whether it was
// asked for before, after or while it fired, and firing allocates no
// channel when no one waits.
func TestSignal(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
	var before signal
	ch := before.C()
	select {
	case <-ch:
		t.Fatal("closed before it fired")
	default:
	}
	before.fire()
	if !closed(ch) || !closed(before.C()) {
		t.Fatal("not closed after it fired")
	}
	var after signal
	after.fire()
	if after.p.Load() != firedSignal {
		t.Fatal("a fire with no waiter made a channel")
	}
	if !closed(after.C()) {
		t.Fatal("not closed when asked after it fired")
	}
	for range 200 {
		var s signal
		var wg sync.WaitGroup
		chs := make([]<-chan struct{}, 4)
		for i := range chs {
			wg.Go(func() { chs[i] = s.C() })
		}
		wg.Go(s.fire)
		wg.Wait()
		for _, ch := range chs {
			if !closed(ch) {
				t.Fatal("a waiter racing the fire was not woken")
			}
		}
	}
}
