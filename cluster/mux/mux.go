package mux

import (
	"crypto/hmac"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// HandshakeTimeout bounds reading a header (acceptor) and reading the
// status (dialer, together with the dial's own timeout).
const HandshakeTimeout = 5 * time.Second

// Errors.
var (
	// ErrClosed is returned by Dial and Listener after Close, and by a
	// stream listener's Accept once it or the mux is closed.
	ErrClosed = errors.New("mux: closed")
	// ErrBlocked is returned by Dial to an address blocked by SetBlocked.
	ErrBlocked = errors.New("mux: address blocked (fault injection)")
	// ErrStreamInUse is returned by Listener for a name already listened on.
	ErrStreamInUse = errors.New("mux: stream already has a listener")
	// ErrNoCookie is returned by Listen for an empty cookie: there is no
	// mux without authentication.
	ErrNoCookie = errors.New("mux: empty cookie")
)

// Mux is one node's mux listener and dialer. Its methods are safe for
// concurrent use.
//
// Lock order: Mux.mu, then streamListener.mu (never the other way).
type Mux struct {
	ln        net.Listener
	advertise string
	cookie    []byte
	log       *slog.Logger
	handshake atomic.Int64                // time.Duration; a variable for tests
	tlsConfig func() (*tls.Config, error) // nil: plain TCP (WithTLS)

	mu      sync.Mutex
	closed  bool
	streams map[string]*streamListener
	blocked map[string]bool
	conns   map[*conn]struct{} // every stream connection, both directions

	done chan struct{} // closed when the accept loop returns

	refusedMu sync.Mutex           // never held with mu
	refused   map[string]time.Time // direction and peer → last WARN (refusals.go)
}

// Listen binds bind (host:port; port 0 picks one) and starts accepting.
// advertise is how the other nodes reach this one: "" means the bound
// address (which must then not be a wildcard), a host without port means
// that host with the bound port. cookie is the cluster's shared secret,
// 1..255 bytes (ErrNoCookie when empty). log may be nil.
func Listen(bind, advertise, cookie string, log *slog.Logger, opts ...Option) (*Mux, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cookie == "" {
		return nil, ErrNoCookie
	}
	if len(cookie) > 255 {
		return nil, fmt.Errorf("mux: cookie longer than 255 bytes")
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("mux: listen %s: %w", bind, err)
	}
	adv, err := advertiseAddr(advertise, ln.Addr().(*net.TCPAddr))
	if err != nil {
		ln.Close()
		return nil, err
	}
	m := &Mux{ln: ln, advertise: adv, cookie: []byte(cookie), log: log,
		streams: map[string]*streamListener{}, blocked: map[string]bool{}, conns: map[*conn]struct{}{},
		done: make(chan struct{}), refused: map[string]time.Time{}}
	m.handshake.Store(int64(HandshakeTimeout))
	for _, o := range opts {
		o(m)
	}
	go m.acceptLoop()
	return m, nil
}

// advertiseAddr applies Listen's rule for the advertised address.
func advertiseAddr(advertise string, bound *net.TCPAddr) (string, error) {
	port := fmt.Sprint(bound.Port)
	if advertise == "" {
		if bound.IP == nil || bound.IP.IsUnspecified() {
			return "", fmt.Errorf("mux: bound to %s: an advertise address is needed", bound)
		}
		return net.JoinHostPort(bound.IP.String(), port), nil
	}
	if h, p, err := net.SplitHostPort(advertise); err == nil {
		if h == "" || p == "0" {
			return "", fmt.Errorf("mux: advertise address %q: needs a host and a port", advertise)
		}
		return advertise, nil
	}
	return net.JoinHostPort(advertise, port), nil
}

// Addr returns the advertised address, host:port.
func (m *Mux) Addr() string { return m.advertise }

// BoundAddr returns the address the listener is bound to.
func (m *Mux) BoundAddr() net.Addr { return m.ln.Addr() }

// Close stops accepting, closes every stream listener and every stream
// connection. It is idempotent.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	streams := m.streams
	m.streams = map[string]*streamListener{}
	conns := m.conns
	m.conns = map[*conn]struct{}{}
	m.mu.Unlock()
	err := m.ln.Close()
	<-m.done
	for _, l := range streams {
		l.shut()
	}
	for c := range conns {
		c.closeLocal()
	}
	return err
}

func (m *Mux) acceptLoop() {
	defer close(m.done)
	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary (EMFILE...): back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.log.Warn("mux: accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		go m.handshakeIn(c)
	}
}

// readHeader reads exactly one header from r.
func readHeader(r io.Reader) (Header, error) {
	buf := make([]byte, 0, MaxHeaderLen)
	for {
		h, n, err := DecodeHeader(buf)
		if !errors.Is(err, ErrShortHeader) {
			return h, err
		}
		if _, err := io.ReadFull(r, buf[len(buf):n]); err != nil {
			return Header{}, err
		}
		buf = buf[:n]
	}
}

// handshakeIn reads an accepted connection's header, answers it and hands
// the connection to its stream.
func (m *Mux) handshakeIn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Duration(m.handshake.Load())))
	raw := c
	c, err := m.serverTLS(c)
	if err != nil {
		m.log.Warn("mux: refused connection: TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		raw.Close()
		return
	}
	h, err := readHeader(c)
	refuse := func(s Status, msg string, args ...any) {
		args = append(args, "remote", c.RemoteAddr().String(), "status", s.String())
		if s == StatusBadCookie {
			m.warnRefused(inKey(c.RemoteAddr(), h.Addr), "mux: refused connection from a node that did not prove the cluster cookie: it is not let into the cluster (give every node the same cluster.cookie or cookie file)", args...)
		} else {
			m.log.Debug("mux: refused connection: "+msg, args...)
		}
		_, _ = c.Write([]byte{byte(s)})
		c.Close()
	}
	if err == nil && len(h.Nonce) != NonceLen {
		err = fmt.Errorf("%w: nonce of %d bytes", ErrBadHeader, len(h.Nonce))
	}
	if err != nil {
		if errors.Is(err, ErrBadMagic) || errors.Is(err, ErrBadVersion) || errors.Is(err, ErrBadHeader) {
			refuse(StatusBadHeader, "bad header", "err", err)
		} else {
			m.log.Debug("mux: no header", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
		}
		return
	}
	// Challenge: our nonce and our proof; then the dialer's proof.
	ns, err := newNonce()
	if err != nil {
		m.log.Warn("mux: refused connection", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	ch := make([]byte, 0, challengeLen)
	ch = append(ch, byte(StatusChallenge))
	ch = append(ch, ns...)
	ch = append(ch, proof(m.cookie, roleAcceptor, h.Stream, m.advertise, h.Addr, []byte(h.Nonce), ns)...)
	got := make([]byte, ProofLen)
	if _, err := c.Write(ch); err == nil {
		_, err = io.ReadFull(c, got)
	}
	if err != nil {
		m.log.Debug("mux: handshake", "remote", c.RemoteAddr().String(), "peer", h.Addr, "err", err)
		c.Close()
		return
	}
	if !hmac.Equal(got, proof(m.cookie, roleDialer, h.Stream, m.advertise, h.Addr, []byte(h.Nonce), ns)) {
		refuse(StatusBadCookie, "bad cookie", "stream", h.Stream, "peer", h.Addr)
		return
	}
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		c.Close()
		return
	case m.blocked[h.Addr]:
		m.mu.Unlock()
		refuse(StatusBlocked, "blocked", "peer", h.Addr)
		return
	}
	l := m.streams[h.Stream]
	if l == nil {
		m.mu.Unlock()
		refuse(StatusUnknownStream, "unknown stream", "stream", h.Stream, "peer", h.Addr)
		return
	}
	tc := m.track(c, h.Addr)
	m.mu.Unlock()
	if _, err := c.Write([]byte{byte(StatusOK)}); err != nil {
		tc.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	l.deliver(tc)
}

// track records c as a stream connection with peer. m.mu is held.
func (m *Mux) track(c net.Conn, peer string) *conn {
	tc := &conn{Conn: c, m: m, peer: peer}
	m.conns[tc] = struct{}{}
	return tc
}

func (m *Mux) untrack(c *conn) {
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
}

// Dial opens a connection to stream on the mux advertised at addr. timeout
// bounds the TCP dial and the handshake together (0: HandshakeTimeout).
// A refusal is a *RefusedError; a peer that does not prove the cookie
// (another cookie, or not the node advertised at addr) gives an error
// wrapping ErrPeerNotAuthenticated.
func (m *Mux) Dial(addr, stream string, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = HandshakeTimeout
	}
	nc, err := newNonce()
	if err != nil {
		return nil, err
	}
	hdr, err := AppendHeader(nil, Header{Stream: stream, Nonce: string(nc), Addr: m.advertise})
	if err != nil {
		return nil, err
	}
	if err := m.dialable(addr); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	raw := c
	if c, err = m.clientTLS(c, deadline); err != nil {
		raw.Close()
		return nil, fmt.Errorf("mux: dial %s: %w", addr, err)
	}
	_ = c.SetDeadline(deadline)
	if err := m.authenticate(c, addr, stream, hdr, nc); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	m.mu.Lock()
	if m.closed || m.blocked[addr] { // blocked or closed while dialing
		m.mu.Unlock()
		c.Close()
		if m.closed {
			return nil, ErrClosed
		}
		return nil, ErrBlocked
	}
	tc := m.track(c, addr)
	m.mu.Unlock()
	return tc, nil
}

// authenticate runs the dialer's side of the handshake on c: header,
// the acceptor's challenge checked, our proof, the final status.
func (m *Mux) authenticate(c net.Conn, addr, stream string, hdr, nc []byte) error {
	ch := make([]byte, challengeLen)
	if _, err := c.Write(hdr); err != nil {
		return fmt.Errorf("mux: handshake with %s: %w", addr, err)
	}
	if _, err := io.ReadFull(c, ch[:1]); err != nil {
		return fmt.Errorf("mux: handshake with %s: %w", addr, err)
	}
	if Status(ch[0]) != StatusChallenge {
		return &RefusedError{Addr: addr, Stream: stream, Status: Status(ch[0])}
	}
	if _, err := io.ReadFull(c, ch[1:]); err != nil {
		return fmt.Errorf("mux: handshake with %s: %w", addr, err)
	}
	ns, theirs := ch[1:1+NonceLen], ch[1+NonceLen:]
	if !hmac.Equal(theirs, proof(m.cookie, roleAcceptor, stream, addr, m.advertise, nc, ns)) {
		// Tell it (a proof that fails, so that it logs the refusal too),
		// never what ours would have been.
		_, _ = c.Write(make([]byte, ProofLen))
		m.warnRefused("out "+addr, "mux: the node dialled did not prove the cluster cookie (another cluster cookie, or not the node advertised at that address): no connection made",
			"addr", addr, "stream", stream)
		return fmt.Errorf("%w: %s (stream %q)", ErrPeerNotAuthenticated, addr, stream)
	}
	var st [1]byte
	_, err := c.Write(proof(m.cookie, roleDialer, stream, addr, m.advertise, nc, ns))
	if err == nil {
		_, err = io.ReadFull(c, st[:])
	}
	if err != nil {
		return fmt.Errorf("mux: handshake with %s: %w", addr, err)
	}
	if Status(st[0]) != StatusOK {
		return &RefusedError{Addr: addr, Stream: stream, Status: Status(st[0])}
	}
	return nil
}

func (m *Mux) dialable(addr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.blocked[addr] {
		return ErrBlocked
	}
	return nil
}

// SetBlocked replaces the set of blocked advertised addresses (fault
// injection): from now on dials to them fail with ErrBlocked, their
// connections are refused with StatusBlocked, and every existing stream
// connection with them is closed before SetBlocked returns. An empty list
// heals every partition.
func (m *Mux) SetBlocked(addrs []string) {
	m.mu.Lock()
	m.blocked = make(map[string]bool, len(addrs))
	for _, a := range addrs {
		m.blocked[a] = true
	}
	var drop []*conn
	for c := range m.conns {
		if m.blocked[c.peer] {
			drop = append(drop, c)
			delete(m.conns, c)
		}
	}
	m.mu.Unlock()
	for _, c := range drop {
		c.closeLocal()
	}
	if len(addrs) > 0 || len(drop) > 0 {
		m.log.Info("mux: fault injection", "blocked", addrs, "closed_conns", len(drop))
	}
}

// Blocked returns the addresses blocked by SetBlocked.
func (m *Mux) Blocked() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.blocked))
	for a := range m.blocked {
		out = append(out, a)
	}
	return out
}

// conn is a stream connection the mux tracks (for SetBlocked and Close).
type conn struct {
	net.Conn
	m      *Mux
	peer   string // the peer's advertised address
	once   sync.Once
	closed atomic.Bool // closed on this side (Close, Mux.Close, SetBlocked)
}

// Read reads from the connection. Once this side closed it, a failed read
// is io.EOF, the end of the stream, rather than the "use of closed
// network connection" of a read that was waiting: a stream's reader
// (Raft's transport logs any other error as a failed decode) sees the
// connection end as it does when the peer closes it.
func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.closed.Load() {
		err = io.EOF
	}
	return n, err
}

// closeLocal closes the transport (the mux already forgot c).
func (c *conn) closeLocal() {
	c.closed.Store(true)
	_ = c.Conn.Close()
}

func (c *conn) Close() error {
	c.closed.Store(true)
	c.once.Do(func() { c.m.untrack(c) })
	return c.Conn.Close()
}

// Peer returns the advertised mux address of the other end.
func (c *conn) Peer() string { return c.peer }

// PeerAddr returns the advertised mux address of the node at the other end
// of a connection from Dial or from a stream listener, and "" for any
// other net.Conn.
func PeerAddr(c net.Conn) string {
	if tc, ok := c.(*conn); ok {
		return tc.peer
	}
	return ""
}
