package forward

import (
	"net"
	"sync"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
)

// writer gathers encoded frames and writes them out on one goroutine:
// whatever is queued while a write(2) is in progress leaves in the next
// one (group commit for the socket). Both ends of a connection use one.
//
// A client's sends (block true) wait while writerMax bytes are queued; a
// server's never wait, since they come from core callbacks that run under
// core locks (confirms, deliveries): what they may queue is bounded by
// the credit and the prefetch the server grants, and over reports when
// deliveries should pause (see sconn).
type writer struct {
	nc net.Conn
	// before, if set, runs on the writer goroutine before it takes the
	// queued bytes (without mu: it may send); after, once they are
	// written.
	before, after func()

	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte // waiting to be written
	spare  []byte // the previous buffer, reused
	err    error  // the first write error
	closed bool
	kicked bool
	done   chan struct{} // the goroutine has stopped
}

const (
	// writerMax bounds a client's queued bytes; Deliver pauses a
	// server's consumer above it.
	writerMax = 4 << 20
	// closeFlushTimeout bounds how long close waits for queued bytes.
	closeFlushTimeout = time.Second
)

func newWriter(nc net.Conn, before, after func()) *writer {
	w := &writer{nc: nc, before: before, after: after, done: make(chan struct{})}
	w.cond.L = &w.mu
	go w.run()
	return w
}

// send encodes f into the queue. It fails if f cannot be encoded (the
// queue is unchanged) or the writer failed or was closed. over reports
// that the queue holds writerMax bytes or more.
func (w *writer) send(f frame.Frame, block bool) (over bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for block && w.err == nil && !w.closed && len(w.buf) >= writerMax {
		w.cond.Wait()
	}
	if w.err != nil {
		return false, w.err
	}
	if w.closed {
		return false, net.ErrClosed
	}
	b, err := frame.Append(w.buf, f)
	if err != nil {
		return false, err
	}
	w.buf = b
	w.cond.Broadcast()
	return len(w.buf) >= writerMax, nil
}

// sendRaw queues frames already encoded.
func (w *writer) sendRaw(p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && !w.closed && len(w.buf) >= writerMax {
		w.cond.Wait()
	}
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return net.ErrClosed
	}
	w.buf = append(w.buf, p...)
	w.cond.Broadcast()
	return nil
}

// queued is how many bytes wait.
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.buf)
}

// kick makes the goroutine run before (and write what it sends) even if
// nothing is queued.
func (w *writer) kick() {
	w.mu.Lock()
	w.kicked = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

func (w *writer) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		for len(w.buf) == 0 && !w.kicked && w.err == nil && !w.closed {
			w.cond.Wait()
		}
		w.kicked = false
		if w.err != nil || (w.closed && len(w.buf) == 0) {
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if w.before != nil {
			w.before()
		}
		w.mu.Lock()
		out := w.buf
		w.buf = w.spare[:0]
		w.mu.Unlock()
		var err error
		if len(out) > 0 {
			_, err = w.nc.Write(out)
		}
		w.mu.Lock()
		w.spare = out[:0]
		if err != nil && w.err == nil {
			w.err = err
		}
		w.cond.Broadcast()
		w.mu.Unlock()
		if err != nil {
			return
		}
		if w.after != nil {
			w.after()
		}
	}
}

// close writes what is queued (for at most closeFlushTimeout) and closes
// the connection.
func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
	select {
	case <-w.done:
	case <-time.After(closeFlushTimeout):
	}
	_ = w.nc.Close()
	w.mu.Lock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
	w.cond.Broadcast()
	w.mu.Unlock()
}

// abort closes the connection at once, dropping what is queued.
func (w *writer) abort() {
	w.mu.Lock()
	w.closed = true
	if w.err == nil {
		w.err = net.ErrClosed
	}
	w.buf = nil
	w.cond.Broadcast()
	w.mu.Unlock()
	_ = w.nc.Close()
}
