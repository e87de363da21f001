package mux

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Listener registers stream and returns its listener: Accept returns the
// stream's incoming connections; Close unregisters the name (connections
// already accepted stay open). A name has at most one listener at a time
// (ErrStreamInUse).
func (m *Mux) Listener(stream string) (net.Listener, error) {
	return m.listen(stream)
}

func (m *Mux) listen(stream string) (*streamListener, error) {
	if stream == "" || len(stream) > 255 {
		return nil, ErrBadHeader
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.streams[stream] != nil {
		return nil, ErrStreamInUse
	}
	l := &streamListener{m: m, name: stream, ch: make(chan net.Conn), closed: make(chan struct{})}
	m.streams[stream] = l
	return l, nil
}

// StreamLayer registers stream and returns a raft.StreamLayer over it, for
// raft.NewNetworkTransportWithConfig: Accept and Close as Listener, Dial to
// another node's mux by its advertised address (a raft.ServerAddress), and
// Addr the advertised address.
func (m *Mux) StreamLayer(stream string) (raft.StreamLayer, error) {
	l, err := m.listen(stream)
	if err != nil {
		return nil, err
	}
	return &streamLayer{l}, nil
}

// streamListener is one stream's net.Listener.
type streamListener struct {
	m      *Mux
	name   string
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

// deliver hands c to Accept, or closes it if the listener closes first.
func (l *streamListener) deliver(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.closed:
		c.Close()
	}
}

func (l *streamListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, ErrClosed
	}
}

// Close unregisters the stream.
func (l *streamListener) Close() error {
	l.m.mu.Lock()
	if l.m.streams[l.name] == l {
		delete(l.m.streams, l.name)
	}
	l.m.mu.Unlock()
	l.shut()
	return nil
}

func (l *streamListener) shut() { l.once.Do(func() { close(l.closed) }) }

// Addr is the mux's advertised address.
func (l *streamListener) Addr() net.Addr { return Addr(l.m.advertise) }

// Addr is an advertised mux address as a net.Addr.
type Addr string

// Network returns "tcp".
func (Addr) Network() string { return "tcp" }

func (a Addr) String() string { return string(a) }

type streamLayer struct{ *streamListener }

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.m.Dial(string(address), s.name, timeout)
}
