package frontend

import (
	"net"
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
// writer goroutine (Run) takes the whole buffer at a time and writes it,
// so that frames queued together go out in one write. Use Init first.
type Output struct {
	Mu     sync.Mutex
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

	wake    sync.Cond // the writer waits for output
	drained sync.Cond // WaitBelowHigh waits for the writer
	spare   []byte
	writing bool // a write is under way, the writer's or WriteNow's (Mu)
	// deferred is the publisher's batch whose Flush wakes the writer for
	// what was appended last (see exchange.Batch), or nil (Mu).
	deferred *exchange.Batch
}

// DeferMax is how much output a publisher's batch may hold back: as much
// as one read of a publisher's brings in small messages, so that a batch's
// deliveries to a consumer go out in one write.
const DeferMax = 64 << 10

// Init readies o for use.
func (o *Output) Init() {
	o.wake.L = &o.Mu
	o.drained.L = &o.Mu
}

// Signal wakes the writer for what was appended (Mu held).
func (o *Output) Signal() { o.wake.Signal() }

// SignalIn is Signal for a delivery that batch (nil: none) made: within
// a publisher's batch the writer is woken by the batch's Flush instead,
// once, at its end, while what the batch holds back stays under DeferMax
// (a consumer with a prefetch window must see its deliveries, and ack
// them, while the batch goes on). Mu held.
func (o *Output) SignalIn(batch *exchange.Batch) {
	if batch == nil || len(o.Buf) >= DeferMax || (o.deferred != batch && !batch.Defer(o)) {
		o.wake.Signal()
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
	o.deferred = nil
	if o.DirectMax > 0 && len(o.Buf) > o.DirectMax {
		o.wake.Signal()
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
		if len(o.Buf) < Low && len(o.Paused) > 0 {
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
	if o.Direct == nil || o.writing || o.Closed || len(o.Paused) > 0 || len(o.Ends) > 0 {
		o.wake.Signal()
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
	if len(o.Buf) > 0 || o.Closed || o.Pending != nil && o.Pending() {
		o.wake.Signal()
	}
	o.drained.Broadcast()
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

// WaitBelowHigh holds the caller (a connection's reader) while the buffer
// is over High, so that a client that sends without reading what it is
// answered cannot grow it without bound.
func (o *Output) WaitBelowHigh() {
	o.Mu.Lock()
	for len(o.Buf) >= High && !o.Closed {
		o.drained.Wait()
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
