package forward

import (
	"net"
	"sync"
	"time"
)

// coalescingConn gathers writes. amqp091-go flushes its buffer after every
// method it sends, which is one write(2) per forwarded publish and per ack;
// here Write only appends to a buffer that one goroutine writes out, so
// whatever is written while a write(2) is in progress leaves in the next
// one (group commit for the socket). Errors of the background write are
// returned by the next Write; reads are untouched.
type coalescingConn struct {
	net.Conn

	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte // waiting to be written
	spare  []byte // the previous buffer, reused
	err    error  // the first write error
	closed bool
	done   chan struct{} // the writer has stopped
}

// coalesceMax bounds the bytes waiting; Write blocks beyond it.
const coalesceMax = 4 << 20

// closeFlushTimeout bounds how long Close waits for waiting bytes (the
// connection.close method, typically) to be written.
const closeFlushTimeout = time.Second

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c, done: make(chan struct{})}
	cc.cond.L = &cc.mu
	go cc.writer()
	return cc
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closed && len(c.buf) >= coalesceMax {
		c.cond.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.closed {
		return 0, net.ErrClosed
	}
	c.buf = append(c.buf, p...)
	c.cond.Broadcast()
	return len(p), nil
}

func (c *coalescingConn) writer() {
	defer close(c.done)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.buf) == 0 && c.err == nil && !c.closed {
			c.cond.Wait()
		}
		if c.err != nil || len(c.buf) == 0 {
			return // failed, or closed with nothing left
		}
		out := c.buf
		c.buf = c.spare[:0]
		c.mu.Unlock()
		_, err := c.Conn.Write(out)
		c.mu.Lock()
		c.spare = out[:0]
		if err != nil && c.err == nil {
			c.err = err
		}
		c.cond.Broadcast()
	}
}

// Close writes what is waiting (for at most closeFlushTimeout) and closes
// the connection.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	select {
	case <-c.done:
	case <-time.After(closeFlushTimeout):
	}
	err := c.Conn.Close()
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	return err
}
