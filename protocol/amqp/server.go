package amqp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
)

// Config holds the AMQP listener's limits.
type Config struct {
	FrameMax uint32 // largest frame offered in connection.tune
	// InitialFrameMax bounds the frames read before connection.tune-ok
	// (RabbitMQ's initial_frame_max; 4096 when zero): connection.start-ok
	// must fit, with its SASL response (an OAuth 2 token for PLAIN).
	InitialFrameMax  uint32
	ChannelMax       uint16        // most channels per connection
	Heartbeat        time.Duration // heartbeat offered in connection.tune; 0 disables
	MaxMessageSize   int           // largest message body accepted
	HandshakeTimeout time.Duration // time allowed from TCP accept to connection.open
	ClusterName      string
	Product          string // "product" server property; "Trident" by default
	// CertLogin, when set, offers SASL EXTERNAL on TLS connections whose
	// client certificate was verified, logging in as the user it names.
	CertLogin *auth.CertLogin
	// ConsumerTimeout is how long a delivery may stay unacknowledged
	// before its channel is closed with PRECONDITION_FAILED and the
	// delivery requeued (RabbitMQ's consumer_timeout), unless its queue
	// sets x-consumer-timeout or a policy consumer-timeout. 0 disables it.
	ConsumerTimeout time.Duration
	// Tracer records OpenTelemetry spans of traced messages (package
	// tracing); nil is tracing off.
	Tracer *tracing.Tracer
}

func (c *Config) defaults() {
	if c.FrameMax == 0 {
		c.FrameMax = 131072
	}
	if c.InitialFrameMax < wire.FrameMinSize {
		c.InitialFrameMax = wire.FrameMinSize
	}
	if c.ChannelMax == 0 {
		c.ChannelMax = 2047
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 128 << 20
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.Product == "" {
		c.Product = "Trident"
	}
	if c.ClusterName == "" {
		c.ClusterName = "trident"
	}
}

// Server accepts AMQP connections.
type Server struct {
	cfg   Config
	b     *exchange.Broker
	users *auth.Users
	log   *slog.Logger

	conns *frontend.Set[*conn]
	seq   atomic.Uint64
}

// NewServer creates an AMQP server over the core and the user database.
func NewServer(cfg Config, b *exchange.Broker, users *auth.Users, log *slog.Logger) *Server {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, b: b, users: users, log: log.With("proto", "amqp"), conns: frontend.NewSet[*conn](ErrServerClosed)}
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("amqp: server closed")

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.conns.Serve(ln, func(nc net.Conn) *conn { return newConn(s, nc) })
}

// Shutdown stops accepting, closes every connection with 320
// CONNECTION_FORCED and waits for them to finish or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.conns.Shutdown(ctx, func(c *conn) {
		c.forceClose("broker forced connection closure with reason 'shutdown'")
	})
}

// ConnInfo describes a connection for management.
type ConnInfo struct {
	Name             string
	User             string
	VHost            string
	Peer             string
	Local            string
	Channels         int
	ConnectedAt      time.Time
	ClientProperties map[string]any
	FrameMax         uint32
	ChannelMax       uint16
	Heartbeat        time.Duration
	RecvOct, SendOct uint64 // bytes read and written
	Published        uint64 // messages published on the connection
	Delivered        uint64 // messages delivered (consumers and basic.get)
	ChannelList      []ChanInfo
}

// ChanInfo describes one open channel for management.
type ChanInfo struct {
	Number              int
	Consumers           int
	Prefetch            int // basic.qos for new consumers
	GlobalPrefetch      int // basic.qos global
	Unacked             int
	Unconfirmed         int
	UncommittedMessages int
	UncommittedAcks     int
	Confirm             bool
	Transactional       bool
	// Message counters since the channel opened (RabbitMQ's
	// message_stats): messages published; publishes confirmed (basic.ack);
	// deliveries to consumers with and without acknowledgement;
	// basic.get with and without, and those that found nothing;
	// deliveries flagged redelivered; deliveries acknowledged.
	Published, Confirmed      uint64
	Delivered, DeliveredNoAck uint64
	Got, GotNoAck, GetEmpty   uint64
	Redelivered, Acked        uint64
}

// Connections lists open connections, sorted by name.
func (s *Server) Connections() []ConnInfo {
	return frontend.List(s.conns, (*conn).info, func(i ConnInfo) string { return i.Name })
}

// CloseConnection closes the named connection with 320 CONNECTION_FORCED and
// reason, as RabbitMQ's management API does. It reports whether it was found.
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
