package drain

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// Gate is the set of client listeners that maintenance mode suspends.
// Its zero value is not usable: call NewGate.
type Gate struct {
	mu        sync.Mutex
	lns       []*Listener
	suspended bool
}

// NewGate returns an open gate with no listeners.
func NewGate() *Gate { return &Gate{} }

// Listen opens a TCP listener on addr that the gate suspends and resumes.
// If the gate is suspended the listener is bound (its address is known)
// and closed again at once.
func (g *Gate) Listen(addr string) (*Listener, error) {
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{addr: inner.Addr(), inner: inner, resumed: make(chan struct{}), closed: make(chan struct{})}
	close(l.resumed)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lns = append(g.lns, l)
	if g.suspended {
		l.suspend()
	}
	return l, nil
}

// Suspend closes every listener's socket; their Accept calls wait.
func (g *Gate) Suspend() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.suspended = true
	for _, l := range g.lns {
		l.suspend()
	}
}

// Resume binds every suspended listener again on its address. It returns
// the listeners it could not bind (another process took the port); those
// stay suspended, and a later Resume tries them again.
func (g *Gate) Resume() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for _, l := range g.lns {
		if err := l.resume(); err != nil {
			errs = append(errs, fmt.Errorf("drain: listen again on %s: %w", l.addr, err))
		}
	}
	if len(errs) == 0 {
		g.suspended = false
	}
	return errors.Join(errs...)
}

// Suspended reports whether the gate is suspended.
func (g *Gate) Suspended() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.suspended
}

// Listener is a net.Listener that can be suspended (its socket closed)
// and resumed (bound again on the same address).
type Listener struct {
	addr net.Addr

	mu      sync.Mutex
	inner   net.Listener  // nil while suspended or closed
	resumed chan struct{} // closed while not suspended
	closed  chan struct{} // closed by Close
	isClose bool
}

// Accept waits for a connection; while suspended it waits to be resumed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		inner, resumed := l.inner, l.resumed
		l.mu.Unlock()
		if inner == nil {
			select {
			case <-resumed:
				continue
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
		c, err := inner.Accept()
		if err == nil {
			return c, nil
		}
		l.mu.Lock()
		swapped := l.inner != inner && !l.isClose
		l.mu.Unlock()
		if swapped {
			if c != nil {
				c.Close()
			}
			continue // suspended (or suspended and resumed) meanwhile
		}
		return nil, err
	}
}

// Close closes the listener for good; Accept returns net.ErrClosed.
func (l *Listener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClose {
		return nil
	}
	l.isClose = true
	close(l.closed)
	if l.inner != nil {
		err := l.inner.Close()
		l.inner = nil
		return err
	}
	return nil
}

// Addr is the address the listener was first bound to, kept across
// Suspend and Resume.
func (l *Listener) Addr() net.Addr { return l.addr }

func (l *Listener) suspend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClose || l.inner == nil {
		return
	}
	_ = l.inner.Close()
	l.inner = nil
	l.resumed = make(chan struct{})
}

func (l *Listener) resume() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClose || l.inner != nil {
		return nil
	}
	inner, err := net.Listen("tcp", l.addr.String())
	if err != nil {
		return err
	}
	l.inner = inner
	close(l.resumed)
	return nil
}
