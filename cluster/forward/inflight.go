package forward

import (
	"errors"
	"sync"
	"time"
)

// ErrMoved: the queue moved (its Locator names another node, or the
// Remote was closed because the queue became local or went away) while a
// publish sent to the old place still awaited its confirm. The old node
// may be frozen rather than dead, and then its confirm would come only
// once it goes on, holding every later confirm of the publisher's
// channel behind it; the outcome is unknown, so the core nacks it and the
// publisher republishes (at least once, as after a lost connection).
var ErrMoved = errors.New("forward: queue moved while a publish awaited its confirm")

const (
	// movedGrace is how long publishes to a node the queue moved away
	// from may still wait for their confirm: one that node forwards on
	// (a clean handover) is confirmed well within it; one sent to a
	// frozen node is failed after it.
	movedGrace = 500 * time.Millisecond
	// inflightCheck is how often a Remote with publishes awaiting their
	// confirm asks its Locator whether the queue moved.
	inflightCheck = 100 * time.Millisecond
)

// pubFlights are a Remote's publishes handed to a link and not yet
// settled, by the address they were sent to. A watcher goroutine runs
// while there are any: it fails those sent to an address the queue has
// left for movedGrace (ErrMoved), so that no publisher waits on a node
// that no longer holds its queue. Each publish's done runs exactly once:
// whichever of its confirm and the watcher comes first.
type pubFlights struct {
	mu       sync.Mutex // a leaf: locate is never called with it held
	by       map[string]*flights
	watching bool
	closedAt time.Time // the Remote was closed: every address is left
}

type flights struct {
	sent    map[*ticket]struct{}
	movedAt time.Time // when the Locator first named another address
}

type ticket struct {
	addr string
	done func(error)
}

// track records a publish of done sent to addr and returns the callback
// to hand to the link. start is true when the caller must start the
// watcher (go r.watchInflight()).
func (in *pubFlights) track(addr string, done func(error)) (cb func(error), start bool) {
	t := &ticket{addr: addr, done: done}
	in.mu.Lock()
	if in.by == nil {
		in.by = map[string]*flights{}
	}
	fs := in.by[addr]
	if fs == nil {
		fs = &flights{sent: map[*ticket]struct{}{}}
		in.by[addr] = fs
	}
	fs.sent[t] = struct{}{}
	if !in.watching {
		in.watching, start = true, true
	}
	in.mu.Unlock()
	return func(err error) {
		if in.take(t) {
			t.done(err)
		}
	}, start
}

// take removes t; false if it was settled already.
func (in *pubFlights) take(t *ticket) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	fs := in.by[t.addr]
	if fs == nil {
		return false
	}
	if _, ok := fs.sent[t]; !ok {
		return false
	}
	delete(fs.sent, t)
	if len(fs.sent) == 0 {
		delete(in.by, t.addr)
	}
	return true
}

// close marks every address as left: what is in flight fails after
// movedGrace unless its confirm comes first.
func (in *pubFlights) close() (start bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closedAt.IsZero() {
		in.closedAt = time.Now()
	}
	if len(in.by) > 0 && !in.watching {
		in.watching, start = true, true
	}
	return start
}

// check is one look of the watcher: addr is where the Locator says the
// queue is now ("" if it could not say: nothing counts as moved then).
// It returns the tickets to fail and whether the watcher is still needed.
func (in *pubFlights) check(addr string, now time.Time) (fail []*ticket, more bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for a, fs := range in.by {
		left := !in.closedAt.IsZero() || (addr != "" && a != addr)
		switch {
		case !left:
			fs.movedAt = time.Time{}
			continue
		case fs.movedAt.IsZero():
			fs.movedAt = now
			if !in.closedAt.IsZero() {
				fs.movedAt = in.closedAt
			}
		}
		if now.Sub(fs.movedAt) < movedGrace {
			continue
		}
		for t := range fs.sent {
			fail = append(fail, t)
		}
		delete(in.by, a)
	}
	if len(in.by) == 0 {
		in.watching = false
		return fail, false
	}
	return fail, true
}

// watchInflight is the watcher goroutine of r's publishes in flight.
func (r *remote) watchInflight() {
	t := time.NewTicker(inflightCheck)
	defer t.Stop()
	for range t.C {
		r.mu.Lock()
		closed := r.closed
		var addr string
		if !closed {
			// Under r.mu, as Publish calls it (lock order remote.mu →
			// the Locator's locks).
			addr, _ = r.locate()
		}
		r.mu.Unlock()
		fail, more := r.inflight.check(addr, time.Now())
		if len(fail) > 0 {
			r.log.Warn("publishes failed: the queue moved while they awaited their confirm", "messages", len(fail), "to", addr)
		}
		for _, tk := range fail {
			tk.done(ErrMoved)
		}
		if !more {
			return
		}
	}
}
