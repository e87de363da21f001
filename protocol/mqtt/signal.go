package mqtt

import "sync/atomic"

// signal is a channel closed once, made only when someone waits for it.
// A connection has three (its writer stopped, its reader stopped, abort),
// and most connections end without anyone waiting for two of them: as
// channels made up front they were ~340 bytes of every idle connection.
// The zero value is ready; fire must be called at most once.
type signal struct{ p atomic.Pointer[chan struct{}] }

// firedSignal is the closed channel of every signal fired before anyone
// waited for it.
var firedSignal = func() *chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return &ch
}()

// C is the channel closed when the signal fires.
func (s *signal) C() <-chan struct{} {
	if p := s.p.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if s.p.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *s.p.Load()
}

// fire closes the channel, or marks the signal fired if no one has asked
// for it yet.
func (s *signal) fire() {
	if s.p.CompareAndSwap(nil, firedSignal) {
		return
	}
	if p := s.p.Load(); p != firedSignal {
		close(*p)
	}
}
