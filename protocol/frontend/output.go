package frontend

import (
	"sync"

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

	wake    sync.Cond // the writer waits for output
	drained sync.Cond // WaitBelowHigh waits for the writer
	spare   []byte
}

// Init readies o for use.
func (o *Output) Init() {
	o.wake.L = &o.Mu
	o.drained.L = &o.Mu
}

// Signal wakes the writer for what was appended (Mu held).
func (o *Output) Signal() { o.wake.Signal() }

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
		for len(o.Buf) == 0 && !o.Closed && (o.Pending == nil || !o.Pending()) {
			o.wake.Wait()
		}
		if o.Prepare != nil {
			o.Prepare()
		}
		if len(o.Buf) == 0 {
			o.Mu.Unlock()
			return nil
		}
		buf := o.Buf
		ends = append(ends[:0], o.Ends...)
		o.Buf, o.spare = o.spare[:0], nil
		o.Ends = o.Ends[:0]
		o.Mu.Unlock()

		err := write(buf, ends)

		// One lock per round: the writer keeps Mu from here to its next
		// take (the protocol's appends contend with it less).
		o.Mu.Lock()
		if cap(buf) <= High {
			o.spare = buf[:0]
		}
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
