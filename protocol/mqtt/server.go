package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// Config holds the MQTT front end's settings.
type Config struct {
	// Exchange is the topic exchange publishes go to and subscriptions
	// bind from ("amq.topic").
	Exchange string
	// DefaultVHost is used when the username names no vhost ("vhost:user").
	DefaultVHost string
	// AllowAnonymous lets a client without a username in as AnonUser
	// (RabbitMQ's mqtt.allow_anonymous with mqtt.default_user/default_pass);
	// the user's loopback restriction still applies.
	AllowAnonymous     bool
	AnonUser, AnonPass string
	// MaxPacketSize is the largest packet accepted once connected
	// (default 16 MiB).
	MaxPacketSize int
	// MaxConnectSize bounds the CONNECT packet, which is read before the
	// client is authenticated (default 16 KiB): a larger one is refused
	// from its fixed header, before its body is read (connectlimit.go).
	MaxConnectSize int
	// MaxSubscriptions bounds the topic filters a session holds (SUBACK
	// 0x97 Quota exceeded / 0x80 past it); 0: no limit.
	MaxSubscriptions int
	// MaxMessageSize bounds a PUBLISH payload (RabbitMQ's
	// max_message_size); 0 leaves only MaxPacketSize.
	MaxMessageSize int
	// ConnectTimeout bounds the time from accept to CONNECT (default 10s).
	ConnectTimeout time.Duration
	// ReceiveMaximum bounds the unacknowledged deliveries to a client
	// (MQTT 5 clients may ask for fewer; default 1024).
	ReceiveMaximum uint16
	// TopicAliasMaximum is the number of inbound topic aliases offered to
	// MQTT 5 clients (default 64).
	TopicAliasMaximum uint16
	// ServerKeepAlive, when non-zero, is the longest keep-alive of MQTT 5
	// clients (seconds): one asking for none or longer gets it in CONNACK
	// and is held to it [MQTT-3.2.2-21].
	ServerKeepAlive uint16
	// MinKeepAlive, when non-zero, is the shortest keep-alive (seconds):
	// an MQTT 5 client asking for none or shorter gets it in CONNACK
	// (Server Keep Alive) and is held to it; an MQTT 3.1.1 one is refused
	// (return code 3, server unavailable).
	MinKeepAlive uint16
	// DenySubscribe are topic filters no client may subscribe within
	// (wire.Within), whatever its permissions.
	DenySubscribe []string
	// MaxQueuedQoS0 > 0 bounds a clean session's undelivered backlog for
	// QoS 0 messages (exchange.ConsumeOpts.DropTransientAbove): past it,
	// new ones are dropped. 0: no limit.
	MaxQueuedQoS0 int
	// NodeName is this node's name when it is part of a cluster whose
	// metadata group replicates the front end's records (written through
	// Replicator) and calls ApplyMeta (cluster.go); "" when standalone.
	NodeName string
	// Replicator, in a cluster, writes the front end's records (retained
	// messages, persistent sessions, the session barrier): records every
	// node holds (cluster/meta.Replicator). nil (standalone): they go to
	// the MetaStore.
	Replicator Replicator
	// CertLogin, when set, logs a client that sends neither username nor
	// password in as the user its verified TLS certificate names
	// (RabbitMQ's mqtt.ssl_cert_login); nil disables it.
	CertLogin *auth.CertLogin
	// AllowedOrigins are the origin patterns a WebSocket upgrade is
	// accepted from besides the request's own host (see
	// websocket.AcceptOptions.OriginPatterns; "*" any): a browser's
	// request from another origin gets 403. A request without an Origin
	// header (not a browser) is accepted.
	AllowedOrigins []string
	// Tracer records OpenTelemetry spans of traced messages (package
	// tracing); nil is tracing off.
	Tracer *tracing.Tracer
	// SysInterval is how often the $SYS/broker/... topics are sent
	// (sys.go); 0 disables them.
	SysInterval time.Duration
	// Version is the broker's version, in $SYS/broker/version.
	Version string
	// DurableQueueType is the type of a persistent session's queue when
	// the session creates it: "quorum" declares a quorum queue
	// (x-queue-type), anything else a classic one (RabbitMQ's
	// mqtt.durable_queue_type). An existing queue keeps its type.
	DurableQueueType string
	// LiveNodes, in a cluster, lists the nodes this node sees alive
	// (itself included): a session whose node is not among them expires
	// on the first live node in name order that runs MQTT (orphan.go).
	// nil: every node is taken to be alive and sessions expire only on
	// their own node.
	LiveNodes func() []LiveNode
}

// LiveNode is a node of the cluster seen alive, and whether it runs the
// MQTT front end.
type LiveNode struct {
	Name string
	MQTT bool
}

func (c *Config) defaults() {
	if c.Exchange == "" {
		c.Exchange = "amq.topic"
	}
	if c.DefaultVHost == "" {
		c.DefaultVHost = "/"
	}
	if c.MaxPacketSize <= 0 {
		c.MaxPacketSize = 16 << 20
	}
	if c.MaxConnectSize <= 0 {
		c.MaxConnectSize = 16 << 10
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.ReceiveMaximum == 0 {
		c.ReceiveMaximum = 1024
	}
	if c.TopicAliasMaximum == 0 {
		c.TopicAliasMaximum = 64
	}
}

// MetaStore is the durable metadata storage the front end keeps retained
// messages and persistent sessions in; the broker's store implements it.
// Writes are durable when they return.
type MetaStore interface {
	PutMeta(key string, val []byte) error
	DeleteMeta(key string) error
	LoadMeta(prefix string, fn func(key string, val []byte) error) error
}

// Replicator writes records cluster-wide and returns once they are
// committed and applied on this node: keys[i] gets vals[i], or is
// deleted when vals[i] is nil.
type Replicator interface {
	ReplicateMeta(keys []string, vals [][]byte) error
}

// recordWriter writes the front end's records: the MetaStore standalone,
// replicated (the Replicator) in a cluster.
type recordWriter interface {
	PutMeta(key string, val []byte) error
	DeleteMeta(key string) error
}

// replicated is the recordWriter of a cluster.
type replicated struct{ r Replicator }

func (w replicated) PutMeta(key string, val []byte) error {
	if val == nil {
		val = []byte{} // nil is a delete
	}
	return w.r.ReplicateMeta([]string{key}, [][]byte{val})
}

func (w replicated) DeleteMeta(key string) error {
	return w.r.ReplicateMeta([]string{key}, [][]byte{nil})
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("mqtt: server closed")

// Server accepts MQTT connections over TCP and WebSocket.
type Server struct {
	giveBack giveBackState // giveback.go
	kept     keptOutputs   // streaming connections' output states (writer.go)
	run      runners       // the readers' and writers' goroutines (runners.go)
	pollOnce sync.Once
	poll     *poller // the event loop of idle connections (park.go), nil if none
	// parkedReaders counts the readers taken for parked connections
	// (readOn, handOver), loopPings the PINGREQs the event loop answered
	// itself (pingfast_linux.go): what tests see of the event loop.
	parkedReaders, loopPings atomic.Uint64
	// loopAcks counts the PUBACKs the event loop settled (pingfast_linux.go).
	loopAcks atomic.Uint64
	// parkAfter and streamWindow are park.go's constants, which tests
	// change before the server serves.
	parkAfter, streamWindow time.Duration

	cfg   Config
	b     *exchange.Broker
	users *auth.Users
	st    MetaStore
	// shared writes the front end's records: every write of a retained
	// message or a session record goes through it (replicated in a
	// cluster), never through st.
	shared recordWriter
	log    *slog.Logger

	conns *frontend.Set[*conn]

	mu       sync.Mutex
	sessions map[string]*session // vhost + "\x00" + client id
	shutdown bool                // no session is taken any more
	seq      atomic.Uint64

	retained *retainedStore
	sys      *sysState // $SYS topics (sys.go)
	orphans  *orphans  // sessions of other nodes (orphan.go)
}

// NewServer creates an MQTT server over the core, the user database and
// the store, and loads persistent sessions and retained messages from st.
func NewServer(cfg Config, b *exchange.Broker, users *auth.Users, st MetaStore, log *slog.Logger) (*Server, error) {
	cfg.defaults()
	for _, f := range cfg.DenySubscribe {
		if !wire.ValidFilter(f) {
			return nil, fmt.Errorf("mqtt: deny_subscribe: %q is not a topic filter", f)
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, b: b, users: users, st: st, log: log.With("proto", "mqtt"),
		conns: frontend.NewSet[*conn](ErrServerClosed), sessions: map[string]*session{}, orphans: newOrphans(),
		parkAfter: parkAfter, streamWindow: streamWindow, shared: st}
	s.run.setBase(maxRunners())
	if cfg.Replicator != nil {
		s.shared = replicated{cfg.Replicator}
	}
	var err error
	if s.retained, err = loadRetained(st); err != nil {
		return nil, err
	}
	if err := s.loadSessions(); err != nil {
		return nil, err
	}
	s.startSys()
	s.startOrphans()
	return s, nil
}

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.conns.Serve(ln, func(nc net.Conn) *conn { return newConn(s, nc, "tcp") })
}

// WebSocketHandler serves MQTT over WebSocket (subprotocol "mqtt", binary
// frames) at any path it is mounted on; the node mounts it at /ws.
func (s *Server) WebSocketHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := frontend.WebSocket{Subprotocols: []string{"mqtt", "mqttv3.1"}, AllowedOrigins: s.cfg.AllowedOrigins,
			ReadLimit: int64(s.cfg.MaxPacketSize) + 8}
		_ = frontend.ServeWebSocket(s.conns, w, r, o, func(ws *websocket.Conn) *conn {
			nc := withTLSState(websocket.NetConn(context.Background(), ws, websocket.MessageBinary), r.TLS)
			return newConn(s, nc, "websocket")
		})
	})
}

// Shutdown stops accepting, closes every connection (MQTT 5 clients get
// DISCONNECT 0x8B server shutting down) and waits for them or for ctx.
// Persistent sessions stay in the store.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	sessions := make([]*session, 0, len(s.sessions))
	for _, se := range s.sessions {
		sessions = append(sessions, se)
	}
	s.mu.Unlock()
	s.stopSys()
	s.stopOrphans()
	err := s.conns.Shutdown(ctx, func(c *conn) { c.serverDisconnect(codeServerShuttingDown) })
	s.pollOnce.Do(func() {}) // none starts any more
	if s.poll != nil {
		s.poll.close()
	}
	for _, se := range sessions {
		se.stopTimers()
	}
	return err
}

// DisconnectAll closes every connection as Shutdown does (MQTT 5
// clients get DISCONNECT 0x8B server shutting down) without waiting and
// without stopping the listeners: a drained node (maintenance mode)
// suspends those itself. It returns how many connections it closed.
func (s *Server) DisconnectAll() int {
	conns := s.conns.Snapshot()
	for _, c := range conns {
		c.serverDisconnect(codeServerShuttingDown)
	}
	return len(conns)
}

// ConnInfo describes a connection for management.
type ConnInfo struct {
	Name        string
	ClientID    string
	User        string
	VHost       string
	Peer        string
	Local       string
	Transport   string // "tcp" or "websocket"
	Version     byte   // 3, 4 or 5
	ConnectedAt time.Time
	Keepalive   time.Duration
	CleanStart  bool
	// Counters.
	RecvPublish, SentPublish uint64
	RecvBytes, SentBytes     uint64
	Subscriptions            int
	Inflight                 int
}

// Connections lists the open (connected) connections, sorted by name.
func (s *Server) Connections() []ConnInfo {
	return frontend.List(s.conns, (*conn).info, func(i ConnInfo) string { return i.Name })
}

// CloseConnection closes the named connection (MQTT 5: DISCONNECT 0x98
// administrative action). It reports whether it was found.
func (s *Server) CloseConnection(name, _ string) bool {
	found, ok := s.conns.Find(func(c *conn) string { return c.connName() }, name)
	if !ok {
		return false
	}
	found.serverDisconnect(codeAdministrativeAction)
	return true
}

// poller is the server's event loop, started by the first connection
// that parks; nil where there is none (not Linux, or it failed to start:
// connections then keep their reader goroutines).
func (s *Server) poller() *poller {
	s.pollOnce.Do(func() {
		p, err := newPoller()
		if err != nil {
			s.log.Warn("mqtt: no event loop; every connection keeps a goroutine", "err", err)
			return
		}
		s.poll = p
	})
	return s.poll
}
