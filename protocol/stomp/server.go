package stomp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
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
	// MaxFrameSizeUnauthenticated bounds every frame read before a
	// successful login (the CONNECT frame: command, headers and body),
	// on TCP and WebSocket alike; a connection that sends more gets an
	// ERROR frame and is closed. Default 8 KiB.
	MaxFrameSizeUnauthenticated int
	// AllowAnonymous lets a CONNECT without a login header (and no
	// certificate login or token) log in as DefaultUser/DefaultPass, as
	// RabbitMQ's stomp.default_user does. Off: such a CONNECT gets an
	// ERROR frame. The user's loopback restriction applies as to any
	// login.
	AllowAnonymous bool
	DefaultUser    string
	DefaultPass    string
	// AllowedOrigins are the origin patterns a WebSocket upgrade is
	// accepted from besides the request's own host (see
	// websocket.AcceptOptions.OriginPatterns; "*" any). A request without
	// an Origin header is accepted.
	AllowedOrigins []string
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
	// Tracer records OpenTelemetry spans of traced messages (package
	// tracing); nil is tracing off.
	Tracer *tracing.Tracer
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
	if c.MaxFrameSizeUnauthenticated <= 0 {
		c.MaxFrameSizeUnauthenticated = 8 << 10
	}
}

func (c *Config) limits() frame.Limits {
	return frame.Limits{MaxFrameSize: c.MaxFrameSize, MaxHeaders: c.MaxHeaders,
		MaxHeaderLength: c.MaxHeaderLength, MaxBodySize: c.MaxBodySize}.WithDefaults()
}

// preAuthLimits bound the frames read before login: the whole frame
// within MaxFrameSizeUnauthenticated, so that a peer that has not
// authenticated cannot make the reader buffer more.
func (c *Config) preAuthLimits() frame.Limits {
	l := c.limits()
	n := c.MaxFrameSizeUnauthenticated
	l.MaxFrameSize = min(l.MaxFrameSize, n)
	l.MaxBodySize = min(l.MaxBodySize, n)
	l.MaxHeaderLength = min(l.MaxHeaderLength, n)
	return l
}

// Server accepts STOMP connections over TCP (Serve) and WebSocket
// (ServeHTTP, mounted at /ws by the node).
type Server struct {
	cfg    Config
	lim    frame.Limits // after login
	preLim frame.Limits // before login
	b      *exchange.Broker
	users  *auth.Users
	log    *slog.Logger

	conns *frontend.Set[*conn]
	seq   atomic.Uint64
}

// NewServer creates a STOMP server over the core and the user database.
func NewServer(cfg Config, b *exchange.Broker, users *auth.Users, log *slog.Logger) *Server {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, lim: cfg.limits(), preLim: cfg.preAuthLimits(), b: b, users: users, log: log.With("proto", "stomp"), conns: frontend.NewSet[*conn](ErrServerClosed)}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("stomp: server closed")

// Serve accepts TCP connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.conns.Serve(ln, func(nc net.Conn) *conn {
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		return newConn(s, &tcpTransport{nc: nc})
	})
}

// Subprotocols are the WebSocket subprotocols offered, preferred first.
var Subprotocols = []string{"v12.stomp", "v11.stomp", "v10.stomp"}

// ServeHTTP upgrades a request to a WebSocket carrying STOMP frames, in
// text or binary messages. A browser's request (one with an Origin header)
// is refused with 403 unless its origin is the request's own host or
// matches AllowedOrigins: a page on another site cannot use the visitor's
// network position (loopback, an intranet) to reach the broker.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.conns.Closing() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	// The frame reader bounds what it buffers (before login to
	// MaxFrameSizeUnauthenticated); a WebSocket message is streamed into
	// it, never held whole, so its limit only needs to be the frame's.
	o := frontend.WebSocket{Subprotocols: Subprotocols, AllowedOrigins: s.cfg.AllowedOrigins,
		ReadLimit: int64(s.lim.MaxFrameSize) + 1024}
	err := frontend.ServeWebSocket(s.conns, w, r, o, func(ws *websocket.Conn) *conn {
		return newConn(s, newWSTransport(ws, r))
	})
	if err != nil {
		s.log.Debug("websocket upgrade failed", "err", err)
	}
}

// Shutdown stops accepting, sends every connection an ERROR frame and
// closes it, and waits for them to finish or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.conns.Shutdown(ctx, func(c *conn) {
		c.forceClose("broker forced connection closure with reason 'shutdown'")
	})
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
	return frontend.List(s.conns, (*conn).info, func(i ConnInfo) string { return i.Name })
}

// CloseConnection closes the named connection with an ERROR frame carrying
// reason. It reports whether the connection was found.
func (s *Server) CloseConnection(name, reason string) bool {
	found, ok := s.conns.Find(func(c *conn) string { return c.name }, name)
	if !ok {
		return false
	}
	if reason == "" {
		reason = "Closed via management plugin"
	}
	found.forceClose(reason)
	return true
}
