package stream

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
)

// Config holds the stream listeners' settings. Zero fields take their
// defaults.
type Config struct {
	// FrameMax is the largest frame after Open (and what Tune proposes):
	// 1 MiB, RabbitMQ's default.
	FrameMax uint32
	// InitialFrameMax bounds every frame read before Open succeeds (peer
	// properties, SASL with its credentials, an OAuth 2 token among
	// them): 8 KiB, RabbitMQ's stream.initial_frame_max.
	InitialFrameMax uint32
	// Heartbeat is what Tune proposes (60s); 0 proposes none.
	Heartbeat time.Duration
	// HandshakeTimeout bounds the time from accept to Open (10s).
	HandshakeTimeout time.Duration
	// AdvertisedHost and AdvertisedPort are what Metadata and Open answer
	// as this node's address, for plain and TLS connections
	// (AdvertisedTLSPort). Empty or 0: the address the connection reached
	// (its local address), which the client can reach by definition.
	AdvertisedHost    string
	AdvertisedPort    int
	AdvertisedTLSPort int
	// CertLogin, when set, offers SASL EXTERNAL on TLS connections whose
	// client certificate was verified: the user the certificate names.
	CertLogin *auth.CertLogin
	// Prefetch is how many messages a subscription holds between the
	// stream and the socket (2048): the core's credit, given back as the
	// chunks are written.
	Prefetch int
	// Version is the RabbitMQ version announced in peer properties
	// (clients unlock features by it): 3.13.0. rabbitmq-stream-go-client
	// v1.8.3 unlocks single active consumer from 3.11 and the super
	// stream create and delete commands from 3.13, nothing else.
	Version string
	// Product names the server in peer properties ("Trident").
	Product string
}

func (c *Config) defaults() {
	if c.FrameMax == 0 {
		c.FrameMax = 1 << 20
	}
	if c.InitialFrameMax == 0 {
		c.InitialFrameMax = 8 << 10
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 2048
	}
	if c.Version == "" {
		c.Version = "3.13.0"
	}
	if c.Product == "" {
		c.Product = "Trident"
	}
}

// Server accepts stream protocol connections.
type Server struct {
	cfg   Config
	b     *exchange.Broker
	users *auth.Users
	log   *slog.Logger

	conns *frontend.Set[*conn]
	seq   atomic.Uint64

	// Publishers by stream, so that a delete tells the connections that
	// publish to it (MetadataUpdate).
	mu   sync.Mutex
	pubs map[string]map[*conn]int // vhost\x00stream → connection → publishers
}

// NewServer creates a stream protocol server over the core and the users.
func NewServer(cfg Config, b *exchange.Broker, users *auth.Users, log *slog.Logger) *Server {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, b: b, users: users, log: log.With("proto", "stream"),
		conns: frontend.NewSet[*conn](ErrServerClosed), pubs: map[string]map[*conn]int{}}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("stream: server closed")

// Serve accepts connections on ln (plain or TLS) until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.conns.Serve(ln, func(nc net.Conn) *conn {
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		return newConn(s, nc)
	})
}

// Shutdown stops accepting, sends every connection a Close and waits for
// them to end, or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.conns.Shutdown(ctx, func(c *conn) {
		c.forceClose("broker forced connection closure with reason 'shutdown'")
	})
}

// ConnInfo describes a connection for management.
type ConnInfo struct {
	Name        string
	User        string
	VHost       string
	Peer        string
	Local       string
	ConnectedAt time.Time
	Heartbeat   time.Duration
	Client      map[string]any
	// Bytes read and written, messages published and delivered.
	RecvOct, SendOct, Published, Delivered uint64
}

// Connections lists the open connections, sorted by name.
func (s *Server) Connections() []ConnInfo {
	return frontend.List(s.conns, (*conn).info, func(i ConnInfo) string { return i.Name })
}

// CloseConnection closes the named connection with a Close carrying
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

func streamKey(vhost, stream string) string { return vhost + "\x00" + stream }

// addPublisher and dropPublisher keep the publishers index.
func (s *Server) addPublisher(c *conn, vhost, stream string) {
	s.mu.Lock()
	k := streamKey(vhost, stream)
	if s.pubs[k] == nil {
		s.pubs[k] = map[*conn]int{}
	}
	s.pubs[k][c]++
	s.mu.Unlock()
}

func (s *Server) dropPublisher(c *conn, vhost, stream string) {
	s.mu.Lock()
	k := streamKey(vhost, stream)
	if m := s.pubs[k]; m != nil {
		if m[c]--; m[c] <= 0 {
			delete(m, c)
		}
		if len(m) == 0 {
			delete(s.pubs, k)
		}
	}
	s.mu.Unlock()
}

// streamGone tells the connections that publish to the stream that it is
// no longer available.
func (s *Server) streamGone(vhost, stream string) {
	s.mu.Lock()
	var cs []*conn
	for c := range s.pubs[streamKey(vhost, stream)] {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.metadataUpdate(stream)
	}
}
