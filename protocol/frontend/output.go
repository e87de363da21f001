package frontend

import (
	"net"
	"runtime"
	"sync"
	"syscall"

	"github.com/trident-broker/trident/exchange"
)

// Watermarks of a connection's output buffer: a delivery that leaves more
// than High bytes queued pauses its consumer (exchange.Sink.Deliver
// returns false: the core's back-pressure); once the writer has the
// buffer under Low the paused consumers resume.
const (
	High = 4 << 20
	Low  = 1 << 20
)

// Output is a connection's outgoing bytes. The protocol appends encoded
// frames to Buf with Mu held (Mu also guards whatever the protocol keeps
// with its output: scratch encoders, confirm runs) and calls Signal; one
// writer takes the whole buffer at a time and writes it, so that frames
// queued together go out in one write.
//
// The writer is either permanent (Init, then a goroutine runs Run until
// Stop) or on demand (InitOnDemand): a writer goroutine is started when
// output is signalled and none runs, it writes until nothing is queued
// (Drain) and returns, and an idle output gives its state back (Release):
// an idle connection then holds no goroutine and no buffer, only Mu and a
// nil pointer.
type Output struct {
	Mu sync.Mutex
	// The output's state: set by Init for good; for an on-demand output
	// nil while it is idle (Acquire, Release). Mu.
	*OutputState
}

// OutputState is what an Output holds while it has (or may have) output.
type OutputState struct {
	Buf    []byte               // queued bytes (Mu)
	Ends   []int                // frame ends in Buf, for a transport that frames messages (Mu)
	Closed bool                 // nothing more is queued: Stop, or a failed write (Mu)
	Paused []*exchange.Consumer // consumers paused over High, resumed under Low (Mu)
	// Pending, if set, tells the writer (Mu held) that there is output
	// Buf does not hold yet: the protocol appends it in Prepare.
	Pending func() bool
	// Prepare, if set, is called with Mu held before each take.
	Prepare func()
	// Direct, if set, writes p on the caller's goroutine without waiting
	// for the transport: it returns how much of p the transport took
	// (less when it would block). See WriteNow.
	Direct func(p []byte) (int, error)
	// DirectMax, if not 0, is the most a publisher's batch writes itself
	// at its end (Flush); past it the writer is woken instead.
	DirectMax int

	// hooks, for an on-demand output, in place of Prepare and Direct (a
	// state from the pool takes them without an allocation).
	hooks OnDemand

	wake    *sync.Cond // the permanent writer waits for output
	drained *sync.Cond // WaitBelowHigh waits for the writer
	cond    sync.Cond  // drained, of an on-demand output
	waiters int32      // in WaitBelowHigh: the state is not released (Mu)
	spare   []byte
	wends   []int // Drain's copy of Ends
	writing bool  // a write is under way, the writer's or WriteNow's (Mu)
	// running: an on-demand writer goroutine was started and has not
	// returned; finished: the output is over (Closed and written, or a
	// failed write) and Drain has reported it (Mu).
	running, finished bool
	// deferred is the publisher's batch whose Flush wakes the writer for
	// what was appended last (see exchange.Batch), or nil (Mu).
	deferred *exchange.Batch
}

// OnDemand is the protocol's side of an on-demand Output. Its methods are
// called with Mu held, but for DirectWrite.
type OnDemand interface {
	// StartWriter starts a goroutine that calls Drain.
	StartWriter()
	// PendingOutput is Pending: work for a write that Buf does not show
	// (the write is then called with an empty buffer).
	PendingOutput() bool
	// PrepareOutput is Prepare: called before each take.
	PrepareOutput()
	// DirectWrite is Direct (nil error and 0 written: not a socket, the
	// writer writes all); called without Mu.
	DirectWrite(p []byte) (int, error)
	// Idle is called by Drain as it returns with nothing queued: the
	// protocol may Release.
	Idle()
}

// Init readies o for use with a permanent writer (Run).
func (o *Output) Init() {
	o.OutputState = &OutputState{}
	o.wake = sync.NewCond(&o.Mu)
	o.drained = sync.NewCond(&o.Mu)
}

// InitOnDemand readies o for use with writers started on demand: h starts
// them. Call Acquire (Mu held) before touching the state.
func (o *Output) InitOnDemand(h OnDemand) {
	o.Mu.Lock()
	o.Acquire(h)
	o.Mu.Unlock()
}

// states holds the states of idle on-demand outputs.
var states = sync.Pool{New: func() any { return new(OutputState) }}

// maxKeptBuf bounds the buffers a pooled state keeps.
const maxKeptBuf = 16 << 10

// Acquire gives an on-demand output a state (from the pool) if it has
// none (Mu held).
func (o *Output) Acquire(h OnDemand) {
	if o.OutputState == nil {
		st := states.Get().(*OutputState)
		st.hooks = h
		st.cond.L = &o.Mu
		st.drained = &st.cond
		o.OutputState = st
	}
}

// Release gives an idle on-demand output's state back to the pool (Mu
// held): nothing queued or paused, no writer, not closed. It reports
// whether it did.
func (o *Output) Release() bool {
	st := o.OutputState
	if st == nil || st.hooks == nil || st.running || st.writing || st.Closed || st.waiters > 0 ||
		len(st.Buf) > 0 || len(st.Paused) > 0 || st.deferred != nil || o.pending() {
		return false
	}
	o.OutputState = nil
	buf, spare := st.Buf, st.spare
	if cap(buf) > maxKeptBuf {
		buf = nil
	}
	if cap(spare) > maxKeptBuf {
		spare = nil
	}
	*st = OutputState{Buf: buf[:0], spare: spare[:0]}
	states.Put(st)
	return true
}

// Busy reports whether an on-demand output has a writer running, a write
// under way or bytes queued (Mu held).
func (o *Output) Busy() bool {
	return o.OutputState != nil && (o.running || o.writing || len(o.Buf) > 0)
}

// Idle reports whether o holds no state (an on-demand output released).
func (o *Output) Idle() bool { return o.OutputState == nil }

// kick wakes the writer for what was appended (Mu held): the permanent
// one's condition, or an on-demand writer started unless one runs or a
// write is under way (which kicks again when it ends).
func (o *Output) kick() {
	if o.hooks == nil {
		o.wake.Signal()
		return
	}
	if o.running || o.writing || o.finished ||
		len(o.Buf) == 0 && !o.Closed && !o.pending() {
		return
	}
	o.running = true
	o.hooks.StartWriter()
}

func (o *Output) prepare() {
	switch {
	case o.Prepare != nil:
		o.Prepare()
	case o.hooks != nil:
		o.hooks.PrepareOutput()
	}
}

func (o *Output) pending() bool {
	return o.Pending != nil && o.Pending() || o.hooks != nil && o.hooks.PendingOutput()
}

func (o *Output) broadcast() {
	if o.drained != nil {
		o.drained.Broadcast()
	}
}

// DeferMax is how much output a publisher's batch may hold back: as much
// as one read of a publisher's brings in small messages, so that a batch's
// deliveries to a consumer go out in one write.
const DeferMax = 64 << 10

// Signal wakes the writer for what was appended (Mu held).
func (o *Output) Signal() { o.kick() }

// SignalIn is Signal for a delivery that batch (nil: none) made: within
// a publisher's batch the writer is woken by the batch's Flush instead,
// once, at its end, while what the batch holds back stays under DeferMax
// (a consumer with a prefetch window must see its deliveries, and ack
// them, while the batch goes on). Mu held.
func (o *Output) SignalIn(batch *exchange.Batch) {
	if batch == nil || len(o.Buf) >= DeferMax || (o.deferred != batch && !batch.Defer(o)) {
		o.kick()
		return
	}
	o.deferred = batch
}

// Flush implements exchange.Flusher: a publisher's batch that delivered
// here is over. What it delivered is written at once on the publisher's
// goroutine (WriteNow) unless it is over DirectMax; the writer is woken
// for the rest.
func (o *Output) Flush() {
	o.Mu.Lock()
	if o.OutputState == nil {
		o.Mu.Unlock()
		return
	}
	o.deferred = nil
	if o.DirectMax > 0 && len(o.Buf) > o.DirectMax {
		o.kick()
	} else {
		o.WriteNow()
	}
	o.Mu.Unlock()
}

// PauseLocked reports whether the buffer is over High, and if so records
// c (if not nil) to resume later (Mu held). A Sink's Deliver returns its
// negation.
func (o *Output) PauseLocked(c *exchange.Consumer) bool {
	if len(o.Buf) < High {
		return false
	}
	if c != nil {
		o.Paused = append(o.Paused, c)
	}
	return true
}

// Run is the writer loop: it writes what is queued with write (ends are
// the frame ends in buf, when the protocol records them) until Stop and
// the buffer is empty, or a write fails; it returns that write's error
// (the caller closes the transport).
func (o *Output) Run(write func(buf []byte, ends []int) error) error {
	var ends []int
	o.Mu.Lock()
	for {
		for o.writing || len(o.Buf) == 0 && !o.Closed && (o.Pending == nil || !o.Pending()) {
			o.wake.Wait()
		}
		o.prepare()
		if len(o.Buf) == 0 {
			o.Mu.Unlock()
			return nil
		}
		ends = append(ends[:0], o.Ends...)
		o.Ends = o.Ends[:0]
		buf := o.takeLocked()
		o.Mu.Unlock()

		err := write(buf, ends)

		// One lock per round: the writer keeps Mu from here to its next
		// take (the protocol's appends contend with it less).
		o.Mu.Lock()
		o.wroteLocked(buf, len(buf))
		var resume []*exchange.Consumer
		if len(o.Buf) < Low && len(o.Paused) > 0 {
			resume, o.Paused = o.Paused, nil
		}
		if err != nil {
			o.Closed = true
			o.Buf = nil
		}
		o.broadcast()
		if len(resume) > 0 || err != nil {
			o.Mu.Unlock()
			for _, c := range resume {
				c.Resume()
			}
			if err != nil {
				return err
			}
			o.Mu.Lock()
		}
	}
}

// WriteNow (Mu held; it releases Mu while it writes) writes what is
// queued on the caller's goroutine when no write is under way and Direct
// is set, and wakes the writer for whatever the transport did not take
// at once (or instead, when it cannot write now). A publisher's reader
// that ends a batch of deliveries calls it: the bytes it just encoded go
// out from its own core in one write, without a writer's wake-up between
// the publish and the consumer (nor the buffer's cache lines moving to the
// writer's core). Never for output that records frame ends (Ends).
func (o *Output) WriteNow() {
	if o.Direct == nil && o.hooks == nil || o.writing || o.running || o.Closed || len(o.Paused) > 0 || len(o.Ends) > 0 {
		o.kick()
		return
	}
	o.prepare()
	if len(o.Buf) == 0 {
		if o.pending() {
			o.kick()
		}
		return
	}
	buf := o.takeLocked()
	o.Mu.Unlock()

	var n int
	if o.Direct != nil {
		n, _ = o.Direct(buf) // an error is the writer's to meet and report
	} else {
		n, _ = o.hooks.DirectWrite(buf)
	}

	o.Mu.Lock()
	o.wroteLocked(buf, n)
	// The writer, woken meanwhile, waited for this write: wake it again
	// for what came since (bytes, or output Prepare will append).
	o.broadcast()
	if len(o.Buf) > 0 || o.Closed || o.pending() {
		o.kick()
	} else if o.hooks != nil && !o.running {
		o.hooks.Idle() // which may Release
	}
}

// Drain is an on-demand writer: it writes what is queued with write (as
// Run's) until nothing is, then returns. A goroutine that StartWriter
// started calls it. last is true, once, when the output is over: Stop and
// everything written, or a write failed (err); the caller then closes the
// transport or lets it linger.
func (o *Output) Drain(write func(buf []byte, ends []int) error) (err error, last bool) {
	o.Mu.Lock()
	yielded := false
	took := 0 // the most one take of this Drain held
	var resume []*exchange.Consumer
	for !o.writing && err == nil {
		o.prepare()
		if len(o.Buf) == 0 && !o.pending() {
			if o.Closed || yielded {
				break
			}
			// Before returning, let the goroutines that are ready run
			// once: a stream's next deliveries are often among what
			// they do, and this writer goes on instead of another
			// starting (with a new stack, grown again).
			yielded = true
			o.Mu.Unlock()
			runtime.Gosched()
			o.Mu.Lock()
			continue
		}
		yielded = false
		o.wends = append(o.wends[:0], o.Ends...)
		o.Ends = o.Ends[:0]
		buf := o.takeLocked()
		took = max(took, len(buf))
		o.Mu.Unlock()

		err = write(buf, o.wends)

		o.Mu.Lock()
		o.wroteLocked(buf, len(buf))
		if len(o.Buf) < Low && len(o.Paused) > 0 {
			resume, o.Paused = append(resume[:0], o.Paused...), o.Paused[:0]
		}
		if err != nil {
			o.Closed = true
			o.Buf = nil
		}
		o.broadcast()
		if len(resume) > 0 {
			o.Mu.Unlock()
			for i, c := range resume {
				c.Resume()
				resume[i] = nil
			}
			resume = resume[:0]
			o.Mu.Lock()
		}
	}
	o.running = false
	switch {
	case o.writing:
		// WriteNow or WriteAround is under way: it kicks a writer again
		// for what it leaves.
	case (err != nil || o.Closed && len(o.Buf) == 0) && !o.finished:
		o.finished, last = true, true
	case !o.Closed && len(o.Buf) == 0 && !o.pending():
		// A burst is over: a buffer it grew past what the rounds
		// used goes (a connection that never parks keeps no 4 MiB).
		if cap(o.spare) > maxKeptBuf && cap(o.spare) > 4*took {
			o.spare = nil
		}
		if cap(o.Buf) > maxKeptBuf && cap(o.Buf) > 4*took {
			o.Buf = nil
		}
		o.hooks.Idle()
	}
	o.Mu.Unlock()
	return err, last
}

// WriteAround writes p (which the caller keeps) in the writer's place, on
// the caller's goroutine and without waiting, when nothing is queued and
// no write is under way; what the transport does not take, or all of p
// otherwise, is queued for the writer. False if the output is closed or
// over High (the caller leaves p to a reader, which WaitBelowHigh holds).
// An event loop answers a parked connection's keep-alive with it. An
// on-demand output (h) that was idle is idle again after it, if all of p
// went out.
func (o *Output) WriteAround(p []byte, direct func(p []byte) (int, error), h OnDemand) bool {
	o.Mu.Lock()
	defer o.Mu.Unlock()
	idle := o.OutputState == nil
	if idle {
		o.Acquire(h)
	}
	if o.Closed || len(o.Buf) >= High {
		return false
	}
	if o.writing || o.running || len(o.Buf) > 0 {
		o.Buf = append(o.Buf, p...)
		o.kick()
		return true
	}
	o.writing = true
	o.Mu.Unlock()
	n, _ := direct(p) // an error is the writer's to meet
	o.Mu.Lock()
	o.writing = false
	if rest := p[n:]; len(rest) > 0 {
		// Ahead of what was queued meanwhile.
		o.Buf = append(append(make([]byte, 0, len(rest)+len(o.Buf)), rest...), o.Buf...)
	}
	o.broadcast()
	if len(o.Buf) > 0 || o.Closed || o.pending() {
		o.kick()
	} else if idle {
		o.Release()
	}
	return true
}

// takeLocked starts a write (the writer's or WriteNow's) of what Buf
// holds: Buf gets the spare buffer.
func (o *Output) takeLocked() []byte {
	buf := o.Buf
	o.Buf, o.spare = o.spare[:0], nil
	o.writing = true
	return buf
}

// wroteLocked ends the write of buf, of which the transport took n bytes:
// the rest goes back before what was queued meanwhile, and the buffer
// left over is the next spare.
func (o *Output) wroteLocked(buf []byte, n int) {
	o.writing = false
	if n < len(buf) {
		meanwhile := o.Buf
		o.Buf = append(buf[:copy(buf, buf[n:])], meanwhile...)
		buf = meanwhile
	}
	if cap(buf) <= High {
		o.spare = buf[:0]
	}
}

// Stop lets the writer write what is queued and return. For an on-demand
// output use Acquire and StopLocked: its last Drain reports it.
func (o *Output) Stop() {
	o.Mu.Lock()
	o.StopLocked()
	o.Mu.Unlock()
}

// StopLocked is Stop with Mu held (an on-demand output's state acquired).
func (o *Output) StopLocked() {
	o.Closed = true
	o.kick()
	o.broadcast()
}

// WaitBelowHigh holds the caller (a connection's reader) while the buffer
// is over High, so that a client that sends without reading what it is
// answered cannot grow it without bound.
func (o *Output) WaitBelowHigh() {
	o.Mu.Lock()
	for o.OutputState != nil && len(o.Buf) >= High && !o.Closed {
		o.waiters++
		o.drained.Wait()
		o.waiters--
	}
	o.Mu.Unlock()
}

// NonBlockingWrite returns a write to nc's socket that takes what the
// kernel accepts without waiting (for Output.Direct), or nil if nc is not
// a socket (TLS, an in-process pipe): those go through the writer alone.
func NonBlockingWrite(nc net.Conn) func(p []byte) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func(p []byte) (n int, err error) {
		werr := rc.Write(func(fd uintptr) bool {
			for n < len(p) {
				m, e := syscall.Write(int(fd), p[n:])
				if m > 0 {
					n += m
				}
				switch {
				case e == syscall.EINTR:
				case e == syscall.EAGAIN:
					return true // full: the rest is the writer's
				case e != nil:
					err = e
					return true
				case m <= 0:
					return true
				}
			}
			return true
		})
		if err == nil {
			err = werr
		}
		return n, err
	}
}
