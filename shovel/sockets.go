package shovel

import (
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// A shovel's own connection is never "from loopback": its URI's user logs
// in as any remote client would, so a loopback-only user (loopback_users,
// guest by default) is refused even when the URI's host is 127.0.0.1.
// Sockets makes that hold for this node's listeners: it records the local
// address of every TCP connection the shovels open, and Listener wraps an
// AMQP listener so that a connection from one of them reports a peer
// address that is not loopback (ShovelPeer), which is what authentication
// looks at. In-process connections ("amqp://" URIs) have no loopback
// address either (Config.Local).

// Sockets is the set of the shovels' open TCP sockets, by local address.
type Sockets struct {
	mu sync.Mutex
	m  map[string]int
}

// NewSockets returns an empty set.
func NewSockets() *Sockets { return &Sockets{m: map[string]int{}} }

func (s *Sockets) add(a string) {
	s.mu.Lock()
	s.m[a]++
	s.mu.Unlock()
}

func (s *Sockets) remove(a string) {
	s.mu.Lock()
	if s.m[a]--; s.m[a] <= 0 {
		delete(s.m, a)
	}
	s.mu.Unlock()
}

// has reports whether a is the local address of a shovel's socket.
func (s *Sockets) has(a net.Addr) bool {
	if s == nil || a == nil {
		return false
	}
	k := a.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k] > 0
}

// dial opens a TCP connection for a shovel and records it until it is
// closed. As amqp091-go's DefaultDial, the deadline bounds the connect and
// the AMQP handshake (the client clears it once open).
func (s *Sockets) dial(timeout time.Duration) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
			c.Close()
			return nil, err
		}
		if s == nil {
			return c, nil
		}
		local := c.LocalAddr().String()
		s.add(local)
		return &ownConn{Conn: c, done: func() { s.remove(local) }}, nil
	}
}

// ownConn is a shovel's socket; closing it forgets it.
type ownConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *ownConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// ShovelPeer is the peer address of a connection a shovel of this node
// opened: its String is "shovel:" and the socket's address, which does not
// parse as an IP address, so that it is never taken for loopback.
type ShovelPeer struct{ Addr net.Addr }

func (ShovelPeer) Network() string  { return "shovel" }
func (p ShovelPeer) String() string { return "shovel:" + p.Addr.String() }

// Listener wraps ln so that the connections the shovels opened report a
// ShovelPeer as their remote address. Only connections from a loopback
// address are wrapped (another address is not loopback anyway); the
// wrapper keeps the connection's own methods (SyscallConn of a TCP
// connection, ConnectionState of a TLS one).
func (s *Sockets) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, s: s} }

type listener struct {
	net.Listener
	s *Sockets
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || !isLoopback(c.RemoteAddr()) {
		return c, err
	}
	p := peer{s: l.s}
	switch t := c.(type) {
	case *net.TCPConn:
		return &tcpConn{TCPConn: t, peer: p}, nil
	case *tls.Conn:
		return &tlsConn{Conn: t, peer: p}, nil
	}
	return &anyConn{Conn: c, peer: p}, nil
}

func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// peer decides a wrapped connection's remote address when asked (a
// shovel records its socket once connected, before its first byte).
type peer struct{ s *Sockets }

func (p peer) of(remote net.Addr) net.Addr {
	if p.s.has(remote) {
		return ShovelPeer{Addr: remote}
	}
	return remote
}

type tcpConn struct {
	*net.TCPConn
	peer peer
}

func (c *tcpConn) RemoteAddr() net.Addr { return c.peer.of(c.TCPConn.RemoteAddr()) }

type tlsConn struct {
	*tls.Conn
	peer peer
}

func (c *tlsConn) RemoteAddr() net.Addr { return c.peer.of(c.Conn.RemoteAddr()) }

type anyConn struct {
	net.Conn
	peer peer
}

func (c *anyConn) RemoteAddr() net.Addr { return c.peer.of(c.Conn.RemoteAddr()) }
