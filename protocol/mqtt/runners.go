package mqtt

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Reader and writer goroutines started for a burst, bounded. An idle
// connection holds no goroutine: a burst that wakes a fleet (a command
// to every device, their acknowledgements) starts one writer, and often
// a reader, per connection. The goroutine that starts them (a publisher
// fanning a message out, the event loop) runs ahead of the ones it
// starts, so a burst to 18,000 devices had about as many alive at once;
// and the runtime keeps every goroutine's descriptor (480 bytes) for
// reuse for as long as the process lives, never freeing one (measured:
// ~6 MB, a third of a kilobyte per device, of the resident memory a burst
// left behind, for good). So past the bound (maxRunners) alive, a start
// waits in a list, and a goroutine that ends takes the next start on the
// list in place of ending: a burst makes about the bound's worth of
// descriptors.
//
// Readers and writers can run long (a stream) or wait long (a client
// that reads nothing, a packet that comes in pieces): if none of those
// alive has ended for runnersStall while starts wait, the bound grows by
// its base, once for each stall, so that as many long-running ones delay
// the others by runnersStall, once. It goes back to its base once at
// most half the base are alive. (A stall must be longer than a round of
// every runner: a writer yields once before it ends, behind all the
// others.)
const runnersStall = 100 * time.Millisecond

// maxRunners is the bound's base: enough to keep every processor busy.
func maxRunners() int64 { return int64(max(512, 128*runtime.GOMAXPROCS(0))) }

// Kinds of start.
const (
	runWrite = iota + 1 // c.writeLoop
	runRead             // c.readOn(false)
)

type runStart struct {
	c    *conn
	kind uint8
}

// startList is a list of waiting starts, first in first out.
type startList struct {
	cs   []*conn
	head int
}

func (l *startList) len() int { return len(l.cs) - l.head }

func (l *startList) push(c *conn) { l.cs = append(l.cs, c) }

// pop takes the first; the list keeps no room once empty after a burst.
func (l *startList) pop() *conn {
	c := l.cs[l.head]
	l.cs[l.head] = nil
	l.head++
	if l.head == len(l.cs) {
		l.cs, l.head = l.cs[:0], 0
		if cap(l.cs) > 256 {
			l.cs = nil
		}
	}
	return c
}

// runners counts the goroutines started through it and holds the starts
// that wait.
type runners struct {
	live   atomic.Int64 // goroutines started through start and not ended
	queued atomic.Int64 // starts waiting, readable without mu
	ended  atomic.Int64 // starts run to their end
	limit  atomic.Int64 // the bound: base, grown by stalls
	base   int64        // set before use (NewServer: maxRunners); 0: no bound

	mu      sync.Mutex
	timer   *time.Timer // armed while starts wait
	seen    int64       // ended when the timer was last armed
	armedAt time.Time
	// The waiting starts, writers first: a reader may wait for its
	// connection's writer (closing: stopWriter), a writer for no reader.
	writers, readers startList
}

// setBase sets the bound's base, before use.
func (r *runners) setBase(n int64) {
	r.base = n
	r.limit.Store(n)
}

// spawn starts a goroutine for s (counted in live).
func (r *runners) spawn(c *conn, kind uint8) {
	if kind == runWrite {
		go c.runWriter() // made once: allocates nothing
	} else {
		go r.run(c, kind)
	}
}

// start runs c's writer or reader on a goroutine of its own, or, past the
// bound, on the next goroutine that ends. It does not wait: it may run
// under a queue's lock (conn.Deliver).
func (r *runners) start(c *conn, kind uint8) {
	if r.queued.Load() == 0 {
		if r.live.Add(1) <= r.limit.Load() || r.base == 0 {
			r.spawn(c, kind)
			return
		}
		r.live.Add(-1)
	}
	r.mu.Lock()
	if kind == runWrite {
		r.writers.push(c)
	} else {
		r.readers.push(c)
	}
	r.queued.Add(1)
	if r.timer == nil {
		r.seen, r.armedAt = r.ended.Load(), time.Now()
		r.timer = time.AfterFunc(runnersStall, r.stalled)
	}
	r.mu.Unlock()
	// A goroutine may have ended between the count and the list (it saw
	// none waiting): whichever comes second sees the other.
	for r.live.Load() < r.limit.Load() {
		s, ok := r.next(true)
		if !ok {
			return
		}
		r.spawn(s.c, s.kind)
	}
}

// next takes the first waiting writer, or else the first waiting reader;
// live counts it (again) when count.
func (r *runners) next(count bool) (runStart, bool) {
	if r.queued.Load() == 0 {
		return runStart{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var s runStart
	switch {
	case r.writers.len() > 0:
		s = runStart{c: r.writers.pop(), kind: runWrite}
	case r.readers.len() > 0:
		s = runStart{c: r.readers.pop(), kind: runRead}
	default:
		return runStart{}, false
	}
	r.queued.Add(-1)
	if count {
		r.live.Add(1)
	}
	return s, true
}

// run runs one start, then the waiting ones, one after the other.
func (r *runners) run(c *conn, kind uint8) {
	for {
		switch kind {
		case runWrite:
			c.writeLoop()
		case runRead:
			c.readOn(false)
		}
		r.ended.Add(1)
		s, ok := r.next(false)
		if !ok {
			break
		}
		c, kind = s.c, s.kind
	}
	if r.live.Add(-1) <= r.base/2 && r.limit.Load() > r.base {
		r.limit.Store(r.base) // the long-running ones have gone
	}
	// A start may have been listed after next found none, and seen this
	// goroutine still alive.
	if r.queued.Load() > 0 && r.live.Load() < r.limit.Load() {
		if s, ok := r.next(true); ok {
			r.spawn(s.c, s.kind)
		}
	}
}

// stalled runs runnersStall after starts began to wait, and again every
// runnersStall while they do: if no start ended meanwhile, those running
// run long or wait on the network, and the bound grows by its base. A
// timer that fired late (the process did not run) does not count.
func (r *runners) stalled() {
	r.mu.Lock()
	if r.writers.len()+r.readers.len() == 0 {
		r.timer = nil
		r.mu.Unlock()
		return
	}
	now, e := time.Now(), r.ended.Load()
	stuck := e == r.seen && now.Sub(r.armedAt) < 2*runnersStall
	r.seen, r.armedAt = e, now
	r.timer.Reset(runnersStall)
	if stuck {
		r.limit.Add(r.base)
	}
	r.mu.Unlock()
	for stuck && r.live.Load() < r.limit.Load() {
		s, ok := r.next(true)
		if !ok {
			return
		}
		r.spawn(s.c, s.kind)
	}
}

// runWriterLoop is a writer goroutine started by runners: c's round, then
// the starts waiting.
func (c *conn) runWriterLoop() { c.s.run.run(c, runWrite) }
