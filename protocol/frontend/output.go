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
// Stop) or on demand (Attach): a writer goroutine is started when output
// is signalled and none runs, it writes until nothing is queued (Drain)
// and returns, and an idle output gives its state back (Release): an idle
// connection then holds no goroutine and no buffer, only Mu and a nil
// pointer. An on-demand protocol may also queue work that it encodes on
// the writer's goroutine (OnDemand.WriteOutput), counted in Queued.
type Output struct {
	Mu sync.Mutex
	// The output's state: set by Init for good; for an on-demand output
	// nil while it is idle (Attach, Release). Mu.
	*OutputState
}

// OutputState is what an Output holds while it has (or may have) output.
// An on-demand protocol keeps it in a pooled state of its own (Attach).
type OutputState struct {
	Buf    []byte               // queued bytes (Mu)
	Ends   []int                // frame ends in Buf, for a transport that frames messages (Mu)
	Closed bool                 // nothing more is queued: Stop, or a failed write (Mu)
	Paused []*exchange.Consumer // consumers paused over High, resumed under Low (Mu)
	// Queued is how many bytes (or their estimate) of output the
	// protocol holds for the writer outside Buf: an on-demand protocol's
	// work that the writer encodes (OnDemand.TakeOutput gives it to the
	// writer and takes it off). It counts against the watermarks as Buf
	// does (Mu).
	Queued int
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

	hooks   OnDemand   // an on-demand output's protocol, nil for Init's
	wake    *sync.Cond // the permanent writer waits for output
	drained *sync.Cond // WaitBelowHigh waits for the writer
	cond    sync.Cond  // drained, of an on-demand output
	waiters int32      // in WaitBelowHigh: the state is not released (Mu)
	spare   []byte
	writing bool // a write is under way, the writer's, WriteNow's or WriteAround's (Mu)
	// running: an on-demand writer goroutine was started and has not
	// returned; halted: an on-demand output starts no writer again (Halt,
	// a failed write) (Mu).
	running, halted bool
	// deferred is the publisher's batch whose Flush wakes the writer for
	// what was appended last (see exchange.Batch), or nil (Mu).
	deferred *exchange.Batch
}

// OnDemand is the protocol's side of an on-demand Output. Its methods are
// called with Mu held, but for WriteOutput.
type OnDemand interface {
	// StartWriter starts a goroutine that calls Drain.
	StartWriter()
	// PendingOutput reports whether the protocol holds output for the
	// writer that Buf does not (counted in Queued).
	PendingOutput() bool
	// TakeOutput gives that output to the write about to start (and
	// takes it off Queued): WriteOutput then encodes it.
	TakeOutput()
	// WriteOutput (without Mu, on the writer's goroutine) appends the
	// encoding of what TakeOutput took to buf (the bytes Buf held), writes
	// the whole to the transport and returns the buffer, for reuse, with
	// the write's error. An error ends the output (it is halted).
	WriteOutput(buf []byte) ([]byte, error)
	// Stopped is called once the output is halted and no write is
	// under way: nothing is written any more.
	Stopped()
}

// Init readies o for use with a permanent writer (Run).
func (o *Output) Init() {
	o.OutputState = &OutputState{}
	o.wake = sync.NewCond(&o.Mu)
	o.drained = sync.NewCond(&o.Mu)
}

// maxKeptBuf bounds the buffers an idle on-demand state keeps.
const maxKeptBuf = 16 << 10

// Attach gives an on-demand output the state st (the protocol's, zero or
// released before) if it has none (Mu held); h is the protocol.
func (o *Output) Attach(st *OutputState, h OnDemand) {
	if o.OutputState != nil {
		return
	}
	st.hooks = h
	st.cond.L = &o.Mu
	st.drained = &st.cond
	o.OutputState = st
}

// Release detaches an idle on-demand output's state (Mu held): nothing
// queued or paused, no writer, not halted, nobody waiting. It reports
// whether it did; the state (with buffers under maxKeptBuf kept) is then
// the protocol's to pool and Attach again.
func (o *Output) Release() bool {
	st := o.OutputState
	if st == nil || st.hooks == nil || st.running || st.writing || st.halted || st.Closed || st.waiters > 0 ||
		len(st.Buf) > 0 || len(st.Paused) > 0 || st.Queued > 0 || st.hooks.PendingOutput() {
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
	return true
}

// Busy reports whether an on-demand output has a writer running, a write
// under way, or output queued (Mu held).
func (o *Output) Busy() bool {
	return o.OutputState != nil && (o.running || o.writing || len(o.Buf) > 0 || o.pending())
}

// Active reports whether an on-demand output has a writer running or a
// write under way (Mu held).
func (o *Output) Active() bool {
	return o.OutputState != nil && (o.running || o.writing)
}

// Halted reports whether an on-demand output writes no more (Mu held).
func (o *Output) Halted() bool { return o.OutputState != nil && o.halted }

// Level is what is queued for the writer, in bytes: Buf and Queued (Mu
// held).
func (o *Output) Level() int { return len(o.Buf) + o.Queued }

// StartLocked is Signal for an on-demand output whose protocol starts
// the writer itself, after Mu is released (a start outside the lock that
// the protocol's appends take): it reports whether the caller must start
// one (a writer goroutine that calls Drain). Mu held.
func (o *Output) StartLocked() bool {
	if o.running || o.writing || o.halted || len(o.Buf) == 0 && !o.pending() {
		return false
	}
	o.running = true
	return true
}

// kick wakes the writer for what was appended (Mu held): the permanent
// one's condition, or an on-demand writer started unless one runs or a
// write is under way (which kicks again when it ends).
func (o *Output) kick() {
	if o.hooks == nil {
		o.wake.Signal()
		return
	}
	if o.StartLocked() {
		o.hooks.StartWriter()
	}
}

func (o *Output) pending() bool {
	return o.Pending != nil && o.Pending() || o.hooks != nil && o.hooks.PendingOutput()
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
	if o.Level() < High {
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
		if o.Prepare != nil {
			o.Prepare()
		}
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
		if o.Level() < Low && len(o.Paused) > 0 {
			resume, o.Paused = o.Paused, nil
		}
		if err != nil {
			o.Closed = true
			o.Buf = nil
		}
		o.drained.Broadcast()
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
	if o.Direct == nil || o.writing || o.running || o.Closed || len(o.Paused) > 0 || len(o.Ends) > 0 {
		o.kick()
		return
	}
	if o.Prepare != nil {
		o.Prepare()
	}
	if len(o.Buf) == 0 {
		return
	}
	buf := o.takeLocked()
	o.Mu.Unlock()

	n, _ := o.Direct(buf) // an error is the writer's to meet and report

	o.Mu.Lock()
	o.wroteLocked(buf, n)
	// The writer, woken meanwhile, waited for this write: wake it again
	// for what came since (bytes, or output Prepare will append).
	o.drained.Broadcast()
	if len(o.Buf) > 0 || o.Closed || o.pending() {
		o.kick()
	}
}

// Drain is an on-demand writer: it writes what is queued, Buf's bytes
// followed by what the protocol encodes (OnDemand.WriteOutput), a round
// at a time, until nothing is, then returns (a goroutine that the
// protocol started for StartLocked or StartWriter calls it). Before it
// returns it lets the goroutines that are ready run once: a stream's next
// deliveries are often among what they do, and this writer then goes on
// instead of another starting. It returns the error of a failed write
// (the output is halted then), nil otherwise.
func (o *Output) Drain() error {
	o.Mu.Lock()
	yielded := false
	took := 0 // the most one write of this Drain held
	var err error
	var resume []*exchange.Consumer
	for err == nil && !o.writing && !o.halted {
		if len(o.Buf) == 0 && !o.hooks.PendingOutput() {
			if yielded {
				break
			}
			yielded = true
			o.Mu.Unlock()
			runtime.Gosched()
			o.Mu.Lock()
			continue
		}
		yielded = false
		buf := o.takeLocked()
		o.hooks.TakeOutput()
		o.Mu.Unlock()

		buf, err = o.hooks.WriteOutput(buf)

		o.Mu.Lock()
		took = max(took, len(buf))
		o.wroteLocked(buf, len(buf))
		if err != nil {
			o.halted, o.Closed = true, true
			o.Buf = nil
		}
		if o.Level() < Low && len(o.Paused) > 0 {
			resume = append(resume[:0], o.Paused...)
			clear(o.Paused) // the state may go to a pool: it holds no consumer
			o.Paused = o.Paused[:0]
		}
		o.drained.Broadcast()
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
	case o.halted && !o.writing:
		o.hooks.Stopped()
	case len(o.Buf) == 0 && !o.writing:
		// A burst is over: a buffer it grew past what the writes used
		// goes (a connection that never goes idle keeps no 4 MiB).
		if cap(o.spare) > maxKeptBuf && cap(o.spare) > 4*took {
			o.spare = nil
		}
		if cap(o.Buf) > maxKeptBuf && cap(o.Buf) > 4*took {
			o.Buf = nil
		}
	}
	o.Mu.Unlock()
	return err
}

// WriteAround writes p in the writer's place (Mu held, a state attached;
// it releases Mu while it writes): on the caller's goroutine, without
// waiting, when no writer runs, no write is under way and nothing is
// queued; what the transport does not take goes ahead of what was queued
// meanwhile, for a writer it starts. Otherwise p is queued (copied) for
// the running writer. False, with nothing written or queued, if the
// output is halted or over High (the caller leaves p to a reader, which
// WaitBelowHigh holds). An event loop answers a parked connection's
// keep-alive with it. It returns how much of p the transport took at once.
func (o *Output) WriteAround(p []byte, direct func(p []byte) (int, error)) (int, bool) {
	if o.halted || o.Closed || o.Level() >= High {
		return 0, false
	}
	if o.running || o.writing || len(o.Buf) > 0 || o.pending() {
		o.Buf = append(o.Buf, p...)
		o.kick()
		return 0, true
	}
	o.writing = true
	o.Mu.Unlock()
	n, _ := direct(p) // an error is the writer's to meet
	o.Mu.Lock()
	o.writing = false
	if rest := p[n:]; len(rest) > 0 {
		// Ahead of what was queued meanwhile (rare: allocates).
		o.Buf = append(append(make([]byte, 0, len(rest)+len(o.Buf)), rest...), o.Buf...)
	}
	o.drained.Broadcast()
	if o.halted {
		o.hooks.Stopped()
	} else {
		o.kick()
	}
	return n, true
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

// Stop lets the writer write what is queued and return.
func (o *Output) Stop() {
	o.Mu.Lock()
	o.Closed = true
	o.wake.Signal()
	o.drained.Broadcast()
	o.Mu.Unlock()
}

// Halt ends an on-demand output (Mu held, a state attached): no writer
// starts again, a running one returns after its write, and Stopped is
// called once none is under way (now, if none is). What is queued stays
// for the protocol to take back.
func (o *Output) Halt() {
	if o.halted {
		return
	}
	o.halted, o.Closed = true, true
	o.drained.Broadcast()
	if !o.running && !o.writing {
		o.hooks.Stopped()
	}
}

// WaitBelowHigh holds the caller (a connection's reader) while the buffer
// is over High, so that a client that sends without reading what it is
// answered cannot grow it without bound.
func (o *Output) WaitBelowHigh() {
	o.Mu.Lock()
	for o.OutputState != nil && o.Level() >= High && !o.Closed {
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
