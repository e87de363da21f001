package stomp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/connreg"
	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// Config holds the STOMP listeners' settings and limits. Zero fields take
// their defaults.
type Config struct {
	// Frame limits (see frame.Limits). MaxBodySize defaults to 128 MiB.
	MaxFrameSize    int
	MaxHeaders      int
	MaxHeaderLength int
	MaxBodySize     int
	// HandshakeTimeout bounds the time from accept to CONNECT (10s).
	HandshakeTimeout time.Duration
	// DefaultUser and DefaultPass log in a CONNECT without a login header,
	// as RabbitMQ's stomp.default_user does (guest/guest). An empty
	// DefaultUser makes login mandatory.
	DefaultUser string
	DefaultPass string
	// DefaultVHost is used when CONNECT has no host header ("/").
	DefaultVHost string
	// MinHeartbeat is the shortest heart-beat interval granted (100ms).
	MinHeartbeat time.Duration
	// Product names the server in CONNECTED ("Trident").
	Product string
	// CertLogin, when set, logs a CONNECT without a login header in as the
	// user the connection's verified TLS certificate names (RabbitMQ's
	// stomp.ssl_cert_login), before DefaultUser; nil disables it.
	CertLogin *auth.CertLogin
	// ConsumerTimeout is how long a delivery of a client or
	// client-individual subscription may stay unacknowledged before the
	// connection gets an ERROR and is closed, its deliveries requeued
	// (RabbitMQ's consumer_timeout, which its STOMP adapter inherits from
	// the AMQP channel under it); a queue's x-consumer-timeout or policy
	// consumer-timeout wins. 0: none but the queues'.
	ConsumerTimeout time.Duration
}

func (c *Config) defaults() {
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.DefaultVHost == "" {
		c.DefaultVHost = "/"
	}
	if c.MinHeartbeat == 0 {
		c.MinHeartbeat = 100 * time.Millisecond
	}
	if c.Product == "" {
		c.Product = "Trident"
	}
}

func (c *Config) limits() frame.Limits {
	return frame.Limits{MaxFrameSize: c.MaxFrameSize, MaxHeaders: c.MaxHeaders,
		MaxHeaderLength: c.MaxHeaderLength, MaxBodySize: c.MaxBodySize}.WithDefaults()
}

// Server accepts STOMP connections over TCP (Serve) and WebSocket
// (ServeHTTP, mounted at /ws by the node).
type Server struct {
	cfg   Config
	lim   frame.Limits
	b     *exchange.Broker
	users *auth.Users
	log   *slog.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	lns      []net.Listener
	shutdown bool
	wg       sync.WaitGroup
	seq      atomic.Uint64
}

// NewServer creates a STOMP server over the core and the user database.
func NewServer(cfg Config, b *exchange.Broker, users *auth.Users, log *slog.Logger) *Server {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, lim: cfg.limits(), b: b, users: users, log: log.With("proto", "stomp"), conns: map[*conn]struct{}{}}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("stomp: server closed")

// Serve accepts TCP connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.shutdown
			s.mu.Unlock()
			if done {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		s.run(newConn(s, &tcpTransport{nc: nc}), nil)
	}
}

// Subprotocols are the WebSocket subprotocols offered, preferred first.
var Subprotocols = []string{"v12.stomp", "v11.stomp", "v10.stomp"}

// ServeHTTP upgrades a request to a WebSocket carrying STOMP frames, in
// text or binary messages. Like RabbitMQ's Web-STOMP it accepts any origin.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.shutdown
	s.mu.Unlock()
	if down {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       Subprotocols,
		InsecureSkipVerify: true,
	})
	if err != nil {
		s.log.Debug("websocket upgrade failed", "err", err)
		return
	}
	ws.SetReadLimit(int64(s.lim.MaxFrameSize) + 1024)
	t := newWSTransport(ws, r)
	done := make(chan struct{})
	s.run(newConn(s, t), done)
	<-done // the handler must not return while the connection is in use
}

// run registers c and serves it on its own goroutine; done, if not nil,
// is closed when it ends.
func (s *Server) run(c *conn, done chan struct{}) {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		c.t.Close()
		if done != nil {
			close(done)
		}
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		if done != nil {
			close(done)
		}
	}()
}

// Shutdown stops accepting, sends every connection an ERROR frame and
// closes it, and waits for them to finish or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	for _, ln := range s.lns {
		ln.Close()
	}
	conns := connreg.Snapshot(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.forceClose("broker forced connection closure with reason 'shutdown'")
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.t.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// ConnInfo describes a connection for management.
type ConnInfo struct {
	Name        string
	Protocol    string // "STOMP 1.2", "Web STOMP 1.2"
	User        string
	VHost       string
	Peer        string
	Local       string
	ConnectedAt time.Time
	Heartbeat   time.Duration
	Client      map[string]any
	// Counters for management: bytes read and written, SENDs routed,
	// MESSAGEs delivered.
	RecvOct, SendOct, Published, Delivered uint64
}

// Connections lists the open (logged-in) connections, sorted by name.
func (s *Server) Connections() []ConnInfo {
	return connreg.Sorted(s.snapshot(), (*conn).info, func(i ConnInfo) string { return i.Name })
}

// snapshot copies the set of connections.
func (s *Server) snapshot() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return connreg.Snapshot(s.conns)
}

// CloseConnection closes the named connection with an ERROR frame carrying
// reason. It reports whether the connection was found.
func (s *Server) CloseConnection(name, reason string) bool {
	found, ok := connreg.Named(s.snapshot(), func(c *conn) string { return c.name }, name)
	if !ok {
		return false
	}
	if reason == "" {
		reason = "Closed via management plugin"
	}
	found.forceClose(reason)
	return true
}
