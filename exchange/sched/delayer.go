package sched

import (
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// The in-memory window of a Delayer: at most WindowMsgs messages and
// windowBytes bytes (whichever comes first); refilled from the store when
// it holds fewer than lowWater.
const (
	WindowMsgs  = 4096
	windowBytes = 16 << 20
	lowWater    = WindowMsgs / 4
)

// Store is what a Delayer needs of the node's store (exchange.Store):
// appends are group-committed (done once durable, in issue order),
// deletes are batched and ordered after the appends issued before them.
type Store interface {
	AppendMessage(qid, seq uint64, data []byte, done func(error))
	DeleteMessage(qid, seq uint64)
	ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error
	DropMessages(qid uint64) error
}

// Config is what a Delayer is made of.
type Config[T any] struct {
	Store Store
	// ID is the store keyspace of its held messages.
	ID uint64
	// Decode reads a stored record (refill, recovery).
	Decode func(data []byte) (T, error)
	// Keep reports whether a record found at a start is kept (false:
	// deleted, as a transient message is lost at a restart); nil keeps
	// every one.
	Keep func(T) bool
	// Route hands on a message that fell due; the Delayer then deletes its
	// record. It is called on the Delayer's goroutine, holding none of its
	// locks, and may block (it publishes).
	Route func(T)
	// Dropped is called after Stop(true) dropped the stored messages.
	Dropped func()
	// Log gets the Delayer's errors (a record that does not decode, a
	// failed read or drop).
	Log *slog.Logger
}

// Entry is a held message in the window.
type entry[T any] struct {
	seq  uint64
	val  T
	size int64
}

// Delayer holds messages until they fall due, then routes them.
//
// Invariant (under mu): every held message whose seq is at most horizon is
// in win, which is sorted by seq; the rest are only in the store. A message
// is appended to the store before it is put in win, and deleted from the
// store only after it was taken out of win and routed, so a crash between
// the two routes it again (at least once), never loses it.
type Delayer[T any] struct {
	c Config[T]

	ctr  atomic.Uint64
	held atomic.Int64 // messages held, in window and store

	mu        sync.Mutex
	win       []entry[T]
	winBytes  int64
	horizon   uint64
	refilling bool
	during    []entry[T] // scheduled above horizon while refilling

	refills sync.WaitGroup // the refill in flight, waited for before done
	wake    chan struct{}
	stopc   chan struct{}
	done    chan struct{}
	started bool
	stopped bool
	drop    bool // on stop, drop the stored messages
}

// New returns a Delayer that holds nothing yet: Recover loads what the
// store holds, Start runs its clock.
func New[T any](c Config[T]) *Delayer[T] {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return &Delayer[T]{c: c, horizon: math.MaxUint64,
		wake: make(chan struct{}, 1), stopc: make(chan struct{}), done: make(chan struct{})}
}

// Held is how many messages the Delayer holds, in memory and in the store.
func (d *Delayer[T]) Held() int64 { return d.held.Load() }

// Done is closed once the Delayer stopped (Stop) and its goroutines ended.
func (d *Delayer[T]) Done() <-chan struct{} { return d.done }

// Window is how many held messages are in memory.
func (d *Delayer[T]) Window() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.win)
}

// Start runs the Delayer's clock, once.
func (d *Delayer[T]) Start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.stopped {
		return
	}
	d.started = true
	go d.run()
}

// Stop ends the Delayer without waiting for it (the caller may hold a
// lock that Route takes); drop removes its stored messages, else they
// stay for the next start.
func (d *Delayer[T]) Stop(drop bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.stopped, d.drop = true, drop
	close(d.stopc)
	if !d.started {
		close(d.done)
		if drop {
			go d.dropStored()
		}
	}
}

func (d *Delayer[T]) dropStored() {
	if err := d.c.Store.DropMessages(d.c.ID); err != nil {
		d.c.Log.Warn("delayed messages of a deleted exchange not dropped", "err", err)
		return
	}
	if d.c.Dropped != nil {
		d.c.Dropped()
	}
}

// Schedule holds val (stored as data) for ms milliseconds from now (unix
// ns). done (may be nil) is told when the store has it.
func (d *Delayer[T]) Schedule(val T, data []byte, ms int64, now int64, done func(error)) {
	seq := Key(dueAfter(now, ms), d.ctr.Add(1))
	d.c.Store.AppendMessage(d.c.ID, seq, data, done)
	d.held.Add(1)

	e := entry[T]{seq: seq, val: val, size: int64(len(data))}
	d.mu.Lock()
	head := len(d.win) == 0 || seq < d.win[0].seq
	switch {
	case seq <= d.horizon:
		d.insertLocked(e)
		if !d.refilling {
			d.evictLocked()
		}
	case d.refilling:
		d.during = append(d.during, e)
	}
	d.mu.Unlock()
	if head {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// insertLocked puts e in the window unless it is there already (a refill
// may have read it from the store first).
func (d *Delayer[T]) insertLocked(e entry[T]) {
	i := sort.Search(len(d.win), func(i int) bool { return d.win[i].seq >= e.seq })
	if i < len(d.win) && d.win[i].seq == e.seq {
		return
	}
	d.win = append(d.win, entry[T]{})
	copy(d.win[i+1:], d.win[i:])
	d.win[i] = e
	d.winBytes += e.size
}

// evictLocked drops the latest-due messages from memory (they stay in the
// store) while the window is over its bounds.
func (d *Delayer[T]) evictLocked() {
	for len(d.win) > 1 && (len(d.win) > WindowMsgs || d.winBytes > windowBytes) {
		last := len(d.win) - 1
		d.winBytes -= d.win[last].size
		d.win[last] = entry[T]{}
		d.win = d.win[:last]
		d.horizon = d.win[last-1].seq
	}
}

// run routes messages as they fall due and refills the window.
func (d *Delayer[T]) run() {
	defer close(d.done)
	defer d.refills.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch []entry[T]
	for {
		d.mu.Lock()
		nowMs := time.Now().UnixMilli()
		n := 0
		for n < len(d.win) && Due(d.win[n].seq) <= nowMs {
			n++
		}
		batch = append(batch[:0], d.win[:n]...)
		for i := range n {
			d.winBytes -= d.win[i].size
		}
		rest := copy(d.win, d.win[n:])
		clear(d.win[rest:])
		d.win = d.win[:rest]
		// The refill reads the store on its own goroutine, so that
		// messages falling due meanwhile are routed on time: it adds only
		// messages past horizon, and routing takes them from the head.
		if len(d.win) < lowWater && d.horizon != math.MaxUint64 && !d.refilling {
			d.refilling = true
			d.refills.Add(1)
			go d.refill()
		}
		wait := time.Hour
		if len(d.win) > 0 {
			wait = time.Duration(Due(d.win[0].seq)-nowMs) * time.Millisecond
		}
		d.mu.Unlock()

		for i := range batch {
			d.route(batch[i])
			batch[i] = entry[T]{}
		}
		if n > 0 {
			continue // more may have fallen due while routing
		}
		timer.Reset(wait)
		select {
		case <-d.stopc:
			if d.drop {
				d.dropStored()
			}
			return
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// route hands on a due message and then deletes it from the store.
func (d *Delayer[T]) route(e entry[T]) {
	select {
	case <-d.stopc:
		// Stopping: a deleted exchange drops the message; at a broker
		// stop it stays stored and routes after the restart.
		return
	default:
	}
	d.held.Add(-1)
	d.c.Route(e.val)
	d.c.Store.DeleteMessage(d.c.ID, e.seq)
}

// refill reads the next-due messages past the window from the store.
// refilling is set (under mu) by the caller, which starts it.
func (d *Delayer[T]) refill() {
	defer d.refills.Done()
	d.mu.Lock()
	from := d.horizon + 1
	want := max(WindowMsgs-len(d.win), lowWater)
	d.mu.Unlock()

	var read []entry[T]
	var bytes int64
	err := d.c.Store.ReadMessages(d.c.ID, from, func(seq uint64, data []byte) bool {
		val, err := d.c.Decode(data)
		if err != nil {
			d.c.Log.Error("corrupt delayed message dropped", "seq", seq, "err", err)
			d.c.Store.DeleteMessage(d.c.ID, seq)
			d.held.Add(-1)
			return true
		}
		read = append(read, entry[T]{seq: seq, val: val, size: int64(len(data))})
		bytes += int64(len(data))
		return len(read) < want && bytes < windowBytes
	})
	d.mu.Lock()
	defer func() {
		d.mu.Unlock()
		select { // the head may be new
		case d.wake <- struct{}{}:
		default:
		}
	}()
	d.refilling = false
	if err != nil {
		d.c.Log.Error("delayed messages not read", "err", err)
		d.during = nil
		return
	}
	full := len(read) >= want || bytes >= windowBytes
	if full {
		d.horizon = read[len(read)-1].seq
	} else {
		d.horizon = math.MaxUint64
	}
	for _, e := range read {
		d.insertLocked(e)
	}
	for _, e := range d.during {
		if e.seq <= d.horizon {
			d.insertLocked(e)
		}
	}
	clear(d.during)
	d.during = d.during[:0]
	d.evictLocked()
}

// Recover reads the stored messages at a start, before Start and by one
// goroutine (it takes no lock): it counts them, deletes those Keep
// refuses and those that do not decode, and fills the window with the
// earliest.
func (d *Delayer[T]) Recover() error {
	st := d.c.Store
	var maxCtr uint64
	d.horizon = math.MaxUint64
	err := st.ReadMessages(d.c.ID, 0, func(seq uint64, data []byte) bool {
		val, err := d.c.Decode(data)
		if err != nil {
			d.c.Log.Error("corrupt delayed message dropped", "seq", seq, "err", err)
			st.DeleteMessage(d.c.ID, seq)
			return true
		}
		if d.c.Keep != nil && !d.c.Keep(val) {
			st.DeleteMessage(d.c.ID, seq)
			return true
		}
		maxCtr = max(maxCtr, seq&SeqMask)
		d.held.Add(1)
		if d.horizon == math.MaxUint64 {
			d.win = append(d.win, entry[T]{seq: seq, val: val, size: int64(len(data))})
			d.winBytes += int64(len(data))
			if len(d.win) >= WindowMsgs || d.winBytes >= windowBytes {
				d.horizon = seq
			}
		}
		return true
	})
	d.ctr.Store(maxCtr)
	return err
}
