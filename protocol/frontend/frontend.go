// Package frontend is what the three protocol front ends (AMQP, MQTT,
// STOMP) share about their connections: the accept loop with backoff, the
// set of open connections (listing, finding one by name), graceful
// shutdown, the WebSocket accept with its Origin check (websocket.go), the
// output buffer and its writer (output.go), and the consumer-timeout
// watchdog (watchdog.go). The protocol — handshake, frames, goodbyes —
// stays in each front end; admission (connection limits, alarms) is the
// core's (exchange.Limits).
package frontend

import (
	"context"
	"errors"
	"net"
	"sort"
	"sync"
	"time"
)

// A Conn is one client connection of a front end.
type Conn interface {
	comparable
	// Serve runs the connection until it ends.
	Serve()
	// Abort closes the transport at once, without a goodbye: a
	// connection refused during shutdown, or still open at its deadline.
	Abort()
}

// An AsyncConn is a Conn whose ServeAsync may return while the connection
// is still open (an idle connection then holds no goroutine: it waits for
// input in an event loop of its own); it calls ended with itself, once,
// when the connection has ended. Start uses ServeAsync rather than Serve.
// ended is the same function for every connection of a set started
// without a done channel: no closure a connection (an idle device's
// 48 bytes).
type AsyncConn interface {
	ServeAsync(ended func(any))
}

// Set is a front end's listeners and open connections. The zero value is
// not usable: use NewSet.
type Set[C Conn] struct {
	closedErr error

	mu      sync.Mutex
	conns   map[C]struct{}
	lns     []net.Listener
	closing bool
	wg      sync.WaitGroup
	// endAsync is s.endedAsync, made once: what ServeAsync calls.
	endAsync func(any)
}

// NewSet returns an empty set whose Serve returns closedErr after
// Shutdown (the front end's own ErrServerClosed).
func NewSet[C Conn](closedErr error) *Set[C] {
	s := &Set[C]{closedErr: closedErr, conns: map[C]struct{}{}}
	s.endAsync = s.endedAsync
	return s
}

// ended takes c, which has ended, out of the set and closes done if not
// nil.
func (s *Set[C]) ended(c C, done chan struct{}) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if done != nil {
		close(done)
	}
	s.wg.Done()
}

func (s *Set[C]) endedAsync(c any) { s.ended(c.(C), nil) }

// maxAcceptDelay caps the backoff after temporary accept errors (out of
// file descriptors): 5 ms doubling up to a second, as net/http does.
const maxAcceptDelay = time.Second

// Serve accepts connections on ln until Shutdown, wrapping each in a Conn
// with wrap and starting it. It returns the set's closed error after
// Shutdown, or the listener's error.
func (s *Set[C]) Serve(ln net.Listener, wrap func(net.Conn) C) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return s.closedErr
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.Closing() {
				return s.closedErr
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), maxAcceptDelay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.Start(wrap(nc), nil)
	}
}

// Start registers c and serves it on its own goroutine; done, if not nil,
// is closed when it has ended. During shutdown c is aborted instead and
// Start returns false (done is closed at once).
func (s *Set[C]) Start(c C, done chan struct{}) bool {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.Abort()
		if done != nil {
			close(done)
		}
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if ac, ok := any(c).(AsyncConn); ok {
		ended := s.endAsync
		if done != nil {
			ended = func(any) { s.ended(c, done) }
		}
		go ac.ServeAsync(ended)
		return true
	}
	go func() {
		c.Serve()
		s.ended(c, done)
	}()
	return true
}

// Closing reports whether Shutdown has begun.
func (s *Set[C]) Closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Shutdown stops accepting, says goodbye to every open connection with
// goodbye (the protocol's own: connection.close 320, an ERROR frame, an
// MQTT 5 DISCONNECT), and waits for them to end. At ctx's end it aborts
// those still open and returns ctx's error.
func (s *Set[C]) Shutdown(ctx context.Context, goodbye func(C)) error {
	s.mu.Lock()
	s.closing = true
	for _, ln := range s.lns {
		ln.Close()
	}
	conns := s.snapshotLocked()
	s.mu.Unlock()
	for _, c := range conns {
		goodbye(c)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.Abort()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// Snapshot copies the set of open connections.
func (s *Set[C]) Snapshot() []C {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Set[C]) snapshotLocked() []C {
	out := make([]C, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// Find returns the open connection called want (name is each one's).
func (s *Set[C]) Find(name func(C) string, want string) (C, bool) {
	for _, c := range s.Snapshot() {
		if name(c) == want {
			return c, true
		}
	}
	var zero C
	return zero, false
}

// List describes each open connection that info reports on (one still in
// its handshake reports nothing), sorted by name.
func List[C Conn, I any](s *Set[C], info func(C) (I, bool), name func(I) string) []I {
	conns := s.Snapshot()
	out := make([]I, 0, len(conns))
	for _, c := range conns {
		if i, ok := info(c); ok {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(a, b int) bool { return name(out[a]) < name(out[b]) })
	return out
}
