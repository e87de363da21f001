// Package conf holds Trident's configuration: a plain Config struct with
// defaults that match RabbitMQ's, loaded from a YAML file, environment
// variables and command-line flags (in that order of increasing precedence)
// and checked by Validate.
//
// Every leaf field has a YAML key (snake_case, nested as in the struct), an
// environment variable and a flag; Usage prints the full table. An empty
// listen address disables that listener.
package conf

import (
	"log/slog"
	"time"
)

// Config is the whole server configuration. The zero value is not useful;
// start from Default().
type Config struct {
	// DataDir is where the store keeps its files.
	DataDir string `yaml:"data_dir"`

	Log   Log   `yaml:"log"`
	AMQP  AMQP  `yaml:"amqp"`
	MQTT  MQTT  `yaml:"mqtt"`
	STOMP STOMP `yaml:"stomp"`
	// Stream: RabbitMQ's stream protocol (stream.go).
	Stream     Stream     `yaml:"stream"`
	HTTP       HTTP       `yaml:"http"`
	Prometheus Prometheus `yaml:"prometheus"`
	// EventExchange places the amq.rabbitmq.event exchange, as RabbitMQ's
	// rabbitmq_event_exchange plugin.
	EventExchange EventExchange `yaml:"event_exchange"`
	// TLS holds the certificate, key and client verification shared by
	// every TLS listener (see tls.go).
	TLS TLS `yaml:"tls"`

	// ConsumerTimeout is how long a delivery may stay unacknowledged before
	// its AMQP channel is closed with 406 PRECONDITION_FAILED (a STOMP
	// connection gets an ERROR and is closed) and the delivery requeued
	// (MQTT has no such timeout, as in RabbitMQ): RabbitMQ's consumer_timeout, 30 minutes by
	// default. A queue's x-consumer-timeout argument or a policy's
	// consumer-timeout key (ms; the lower wins) overrides it. 0 disables.
	ConsumerTimeout time.Duration `yaml:"consumer_timeout"`

	// DefaultVHost is created on start if missing; the default user gets
	// full permissions on it when the user is created.
	DefaultVHost string `yaml:"default_vhost"`
	// DefaultUser and DefaultPass are created (tag administrator) when the
	// store holds no user at all. An empty DefaultUser creates none.
	DefaultUser string `yaml:"default_user"`
	DefaultPass string `yaml:"default_pass"`
	// LoopbackUsers may only connect from a loopback address (RabbitMQ's
	// loopback_users). Empty allows every user from anywhere.
	LoopbackUsers []string `yaml:"loopback_users"`
	// Definitions is a definitions.json file (RabbitMQ's format) imported
	// at boot; empty imports nothing.
	Definitions string `yaml:"definitions"`

	// MemoryHighWatermarkPercent raises the memory alarm (publishers are
	// blocked, consumers keep draining) when the broker uses more than this
	// percentage of the machine's memory: RabbitMQ's
	// vm_memory_high_watermark.relative = 0.4 is 40. 0 disables the alarm.
	MemoryHighWatermarkPercent int `yaml:"memory_high_watermark_percent"`
	// MemoryHighWatermarkBytes, if set, is an absolute limit that replaces
	// the percentage (RabbitMQ's vm_memory_high_watermark.absolute).
	MemoryHighWatermarkBytes int `yaml:"memory_high_watermark_bytes"`
	// DiskFreeLimit raises the disk alarm (publishers are blocked) while
	// the file system holding DataDir has fewer free bytes than this:
	// RabbitMQ's disk_free_limit.absolute, 50 MB by default. 0 disables.
	DiskFreeLimit int `yaml:"disk_free_limit"`
	// DiskFreeCheckInterval is how often free disk space is measured.
	DiskFreeCheckInterval time.Duration `yaml:"disk_free_check_interval"`

	Limits Limits `yaml:"limits"`

	// Queues bounds what a classic queue keeps in memory; the rest of its
	// backlog is in the store.
	Queues Queues `yaml:"queues"`

	// Audit, Auth and Encryption: see security.go.
	Audit      Audit      `yaml:"audit"`
	Auth       Auth       `yaml:"auth"`
	Encryption Encryption `yaml:"encryption"`
	// OAuth2: JWT access tokens as credentials (oauth2.go).
	OAuth2 OAuth2 `yaml:"oauth2"`

	// Cluster: gossip membership with other nodes (cluster.go).
	Cluster Cluster `yaml:"cluster"`

	// Tracing: OpenTelemetry spans over OTLP (tracing.go).
	Tracing Tracing `yaml:"tracing"`
}

// Queues bounds the memory of classic queues. A queue keeps at most a
// window of messages in memory at its head (per priority level), plus a
// small buffer of the newest; the rest of its backlog is read from the
// store as consumers reach it. Queue arguments x-max-in-memory-length,
// x-max-in-memory-bytes and x-queue-mode (lazy), and the policy keys of
// the same names, lower a queue's window.
type Queues struct {
	// WindowMessages and WindowBytes are the default window: at most this
	// many messages and body bytes in memory at a queue's head.
	WindowMessages int `yaml:"window_messages"`
	WindowBytes    int `yaml:"window_bytes"`
	// MemoryBudget bounds the messages all queues together keep in memory
	// (bytes of bodies and of each message's overhead): past it they page
	// out as under memory pressure.
	MemoryBudget int `yaml:"memory_budget"`
	// MemoryPagingPercent: past this share of the memory alarm's limit,
	// queues keep no new message in memory and a queue without consumers
	// pages out what it holds (RabbitMQ's
	// vm_memory_high_watermark_paging_ratio, 0.5 = 50). 0 disables.
	MemoryPagingPercent int `yaml:"memory_paging_percent"`
}

// Limits bounds what clients may use, across every protocol. A zero
// value means no limit, RabbitMQ's default for each of them (its vhost
// limits max-connections and max-queues, its user limit max-connections).
type Limits struct {
	// MaxConnectionsPerUser bounds one user's open connections.
	MaxConnectionsPerUser int `yaml:"max_connections_per_user"`
	// MaxConnectionsPerVHost bounds the open connections to one vhost.
	MaxConnectionsPerVHost int `yaml:"max_connections_per_vhost"`
	// MaxQueuesPerVHost bounds the queues of one vhost.
	MaxQueuesPerVHost int `yaml:"max_queues_per_vhost"`
	// PublishRatePerUser bounds the messages per second one user
	// publishes (all its connections together; burst one second's worth).
	// Publishers over the rate are slowed by not reading their sockets;
	// nothing is dropped.
	PublishRatePerUser int `yaml:"publish_rate_per_user"`
	// PublishRatePerVHost bounds the messages per second published to a
	// vhost, likewise.
	PublishRatePerVHost int `yaml:"publish_rate_per_vhost"`
}

// Log configures the server's slog logger.
type Log struct {
	// Level is one of debug, info, warn (or warning), error.
	Level string `yaml:"level"`
	// Format is text or json.
	Format string `yaml:"format"`
}

// AMQP configures the AMQP 0-9-1 listener. Durations are Go durations in
// YAML, env and flags ("60s", "1m30s").
type AMQP struct {
	Listen string `yaml:"listen"`
	// TLSListen is the AMQPS listener, started only when tls.cert_file is set.
	TLSListen string `yaml:"tls_listen"`
	// FrameMax is the largest frame the server proposes in connection.tune
	// (bytes, at least 4096).
	FrameMax int `yaml:"frame_max"`
	// InitialFrameMax bounds the frames of the handshake, before
	// connection.tune-ok (RabbitMQ's initial_frame_max): connection.start-ok
	// with its credentials must fit. Raise it for OAuth 2 tokens longer
	// than about 4000 bytes sent as the PLAIN password.
	InitialFrameMax int `yaml:"initial_frame_max"`
	// ChannelMax is the largest channel number the server proposes
	// (0 means no limit other than 65535).
	ChannelMax int `yaml:"channel_max"`
	// Heartbeat is the heartbeat interval the server proposes, in whole
	// seconds; 0 disables heartbeats.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// MaxMessageSize is the largest message body accepted (bytes, at most
	// 512 MiB as in RabbitMQ). It is RabbitMQ's max_message_size and
	// applies to MQTT and STOMP publishes too.
	MaxMessageSize int `yaml:"max_message_size"`
	// HandshakeTimeout bounds the time from TCP accept to connection.open;
	// MQTT's CONNECT and STOMP's CONNECT get the same time.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// Product is the "product" server property sent in connection.start.
	// Some clients and test suites enable features only when it reads
	// "RabbitMQ"; set it so for them.
	Product string `yaml:"product"`
}

// MQTT configures the MQTT listeners.
type MQTT struct {
	Listen string `yaml:"listen"`
	// WSListen serves MQTT over WebSocket at path /ws.
	WSListen string `yaml:"ws_listen"`
	// TLSListen (MQTTS) and WSSListen (MQTT over secure WebSocket, /ws)
	// are started only when tls.cert_file is set.
	TLSListen string `yaml:"tls_listen"`
	WSSListen string `yaml:"wss_listen"`
	// CertLogin lets a client with a verified certificate and no username
	// or password log in as the user the certificate names
	// (RabbitMQ's mqtt.ssl_cert_login).
	CertLogin bool `yaml:"cert_login"`
	// Exchange is the topic exchange MQTT publishes to and binds from.
	Exchange string `yaml:"exchange"`
	// AllowAnonymous lets a client that sends no credentials (and no
	// certificate login applies) connect as DefaultUser, as RabbitMQ's
	// mqtt.allow_anonymous. It is off by default — anonymous access only
	// if configured — where RabbitMQ's default is on. When off such a
	// CONNECT is refused: MQTT 5 0x86, 3.1.1 return code 4 (bad user name
	// or password), as RabbitMQ answers it.
	AllowAnonymous bool `yaml:"allow_anonymous"`
	// DefaultUser and DefaultPass are the credentials an anonymous client
	// logs in with (RabbitMQ's mqtt.default_user/default_pass): required
	// with AllowAnonymous, and never the top-level default_user (the
	// bootstrap administrator). The user's loopback restriction still
	// applies.
	DefaultUser string `yaml:"default_user"`
	DefaultPass string `yaml:"default_pass"`
	// ServerKeepAlive, when set, is the longest keep-alive an MQTT 5
	// client may use (whole seconds up to 65535), as Mosquitto's
	// max_keepalive: a client whose CONNECT asks for none or a longer one
	// gets it in CONNACK (Server Keep Alive) and is held to it
	// [MQTT-3.2.2-21]; a shorter one is kept. MQTT 3.1.1 clients keep
	// their own. 0: never sent.
	ServerKeepAlive time.Duration `yaml:"server_keep_alive"`
	// MinKeepAlive, when set, is the shortest keep-alive a client may use
	// (whole seconds up to 65535; at most server_keep_alive when both are
	// set), so that a dead device is noticed within 1.5 times it: an MQTT
	// 5 client asking for none or a shorter one gets it in CONNACK
	// (Server Keep Alive) and is held to it; an MQTT 3.1.1 client, which
	// cannot be told, is refused (CONNACK return code 3, server
	// unavailable). 0: no minimum.
	MinKeepAlive time.Duration `yaml:"min_keep_alive"`
	// MaxInflight bounds the QoS 1 and 2 messages sent to one client and
	// not yet acknowledged, and the inbound ones a client may have
	// unacknowledged (the Receive Maximum in an MQTT 5 CONNACK; more get
	// DISCONNECT 0x93). An MQTT 5 client's own Receive Maximum, when
	// smaller, is honoured. 1 to 65535; 0: the default, 1024.
	MaxInflight int `yaml:"max_inflight"`
	// MaxPacketSize bounds any packet once a client is connected (the
	// Maximum Packet Size in an MQTT 5 CONNACK; a larger packet gets
	// DISCONNECT 0x95, or the connection closed for 3.1.1). 0: the
	// default, 16 MiB.
	MaxPacketSize int `yaml:"max_packet_size"`
	// DenySubscribe lists MQTT topic filters (with + and #) that no
	// client may subscribe to, whoever it logs in as (the anonymous user
	// too): a SUBSCRIBE whose filter lies within one of them is refused
	// in its SUBACK (0x80 in 3.1.1, 0x87 Not authorized in 5). Like
	// RabbitMQ's topic permissions it judges the filter, not each
	// message: "#" is not within "secret/#" and is granted.
	DenySubscribe []string `yaml:"deny_subscribe"`
	// MaxQueuedQoS0 bounds a clean session's backlog of QoS 0 messages:
	// one arriving while its queue already holds this many undelivered
	// messages is dropped, as Mosquitto's max_queued_messages and
	// RabbitMQ's mqtt.mailbox_soft_limit drop QoS 0 messages to a slow
	// subscriber (QoS 1 and 2 messages are never dropped). 0: no limit
	// (the backlog is paged to disk like any queue's).
	MaxQueuedQoS0 int `yaml:"max_queued_qos0"`
	// SysInterval is how often the $SYS/broker/... topics are published
	// (retained) to MQTT subscribers, as Mosquitto's sys_interval
	// (default 10s); 0 disables them.
	SysInterval time.Duration `yaml:"sys_interval"`
	// MaxSubscriptionsPerClient bounds the topic filters one MQTT
	// session holds: a SUBSCRIBE filter past it is refused in its SUBACK
	// (0x97 Quota exceeded in 5, 0x80 in 3.1.1); re-subscribing a filter
	// the session has does not count again. 0: no limit.
	MaxSubscriptionsPerClient int `yaml:"max_subscriptions_per_client"`
	// MaxPacketSizeUnauthenticated bounds the CONNECT packet, read before
	// the client is authenticated: one announcing a larger remaining
	// length is refused from its fixed header, before its body is read
	// (MQTT 5 CONNACK 0x95 Packet too large, else the connection is
	// closed). RabbitMQ's mqtt.max_packet_size_unauthenticated is 64 KiB;
	// 16 KiB still holds a JWT password and a will. 0: 16 KiB.
	MaxPacketSizeUnauthenticated int `yaml:"max_packet_size_unauthenticated"`
	// Bridges are MQTT bridges to other brokers, as Mosquitto's
	// connection blocks (bridge.go).
	Bridges []Bridge `yaml:"bridges"`
	// DurableQueueType is the type of the queue a persistent session
	// (clean session 0, or a session expiry interval above 0) gets when
	// it is created: "classic" (the default, as RabbitMQ's) or "quorum",
	// a replicated queue whose QoS 1 messages survive the loss of the
	// node the client was on (RabbitMQ's mqtt.durable_queue_type). Clean
	// sessions keep classic queues; a session's existing queue keeps its
	// type. "" is classic.
	DurableQueueType string `yaml:"durable_queue_type"`
}

// STOMP configures the STOMP listeners.
type STOMP struct {
	Listen string `yaml:"listen"`
	// WSListen serves STOMP over WebSocket at path /ws.
	WSListen string `yaml:"ws_listen"`
	// TLSListen (STOMP over TLS) and WSSListen (Web-STOMP over secure
	// WebSocket, /ws) are started only when tls.cert_file is set.
	TLSListen string `yaml:"tls_listen"`
	WSSListen string `yaml:"wss_listen"`
	// CertLogin lets a client with a verified certificate and no login
	// header log in as the user the certificate names
	// (RabbitMQ's stomp.ssl_cert_login).
	CertLogin bool `yaml:"cert_login"`
	// MaxHeaders and MaxHeaderLength bound a frame's header lines (count,
	// and bytes per line); bodies are bounded by amqp.max_message_size.
	MaxHeaders      int `yaml:"max_headers"`
	MaxHeaderLength int `yaml:"max_header_length"`
	// MaxFrameSizeUnauthenticated bounds what a connection may send
	// before it has logged in: the whole CONNECT frame, headers and body
	// (AMQP's initial_frame_max plays this part for AMQP). A connection
	// that sends more gets an ERROR frame and is closed.
	MaxFrameSizeUnauthenticated int `yaml:"max_frame_size_unauthenticated"`
	// AllowAnonymous lets a CONNECT without a login header (and without a
	// certificate login or an OAuth 2 token) log in as DefaultUser, as
	// RabbitMQ's stomp.default_user does. Off by default: such a CONNECT
	// gets an ERROR frame ("Bad CONNECT") and is closed. It never falls
	// back to the top-level default_user; the user's loopback restriction
	// (loopback_users) still applies.
	AllowAnonymous bool   `yaml:"allow_anonymous"`
	DefaultUser    string `yaml:"default_user"`
	DefaultPass    string `yaml:"default_pass"`
}

// HTTP configures the management API and UI listener.
type HTTP struct {
	Listen string `yaml:"listen"`
	// TLSListen serves the API and UI over HTTPS when tls.cert_file is set.
	TLSListen string `yaml:"tls_listen"`
	// StatsInterval is how often message counters are sampled for the
	// API's rates (RabbitMQ's collect_statistics_interval).
	StatsInterval time.Duration `yaml:"stats_interval"`
	// OAuth*: the UI's OAuth 2 login (RabbitMQ's management.oauth_*), see
	// oauth2.go.
	OAuthEnabled      bool   `yaml:"oauth_enabled"`
	OAuthClientID     string `yaml:"oauth_client_id"`
	OAuthClientSecret string `yaml:"oauth_client_secret"`
	OAuthProviderURL  string `yaml:"oauth_provider_url"`
	OAuthScopes       string `yaml:"oauth_scopes"`
	// AllowedOrigins lists the browser origins every WebSocket listener
	// (Web-STOMP, Web-MQTT) accepts an upgrade from, besides its own
	// host: a request whose Origin header names another host gets 403.
	// Requests without an Origin header (clients that are not browsers)
	// are always accepted. An entry is a host[:port] pattern, or
	// scheme://host[:port] to match the scheme too, with path.Match
	// wildcards ("*.example.com"); "*" accepts any origin. Empty: the
	// Origin's host:port must equal the request's Host.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// MaxDefinitionsBody bounds a definitions import's body (POST
	// /api/definitions[/vhost]), in bytes; every other API body is
	// limited to 1 MiB. Imports run one at a time.
	MaxDefinitionsBody int `yaml:"max_definitions_body"`
}

// Prometheus configures the /metrics listener.
type Prometheus struct {
	Listen string `yaml:"listen"`
	// TLSListen serves /metrics over HTTPS when tls.cert_file is set.
	TLSListen string `yaml:"tls_listen"`
}

// Limits enforced by Validate.
const (
	MinFrameMax       = 4096      // AMQP 0-9-1 frame-min-size
	MaxMessageSizeCap = 512 << 20 // RabbitMQ's hard cap on max_message_size
	maxHeartbeat      = 65535 * time.Second
)

// Default returns the configuration a new user expects: RabbitMQ's ports and
// limits, data in ./data, guest/guest allowed only from loopback.
func Default() Config {
	return Config{
		DataDir: "./data",
		Log:     Log{Level: "info", Format: "text"},
		AMQP: AMQP{
			Listen:           ":5672",
			TLSListen:        ":5671",
			FrameMax:         131072,
			InitialFrameMax:  4096,
			ChannelMax:       2047,
			Heartbeat:        60 * time.Second,
			MaxMessageSize:   134217728,
			HandshakeTimeout: 10 * time.Second,
			Product:          "Trident",
		},
		MQTT: MQTT{Listen: ":1883", WSListen: ":15675", TLSListen: ":8883", WSSListen: ":15676", Exchange: "amq.topic", MaxQueuedQoS0: 2048, SysInterval: 10 * time.Second,
			MaxSubscriptionsPerClient: 1000, MaxPacketSizeUnauthenticated: 16 << 10, DurableQueueType: "classic"},
		STOMP: STOMP{Listen: ":61613", WSListen: ":15674", TLSListen: ":61614", WSSListen: ":15673",
			MaxHeaders: 1000, MaxHeaderLength: 64 << 10, MaxFrameSizeUnauthenticated: 8 << 10},
		Stream:          DefaultStream(),
		HTTP:            HTTP{Listen: ":15672", TLSListen: ":15671", StatsInterval: 5 * time.Second, MaxDefinitionsBody: 64 << 20},
		Prometheus:      Prometheus{Listen: ":15692", TLSListen: ":15691"},
		EventExchange:   EventExchange{VHost: "/"},
		TLS:             DefaultTLS(),
		ConsumerTimeout: 30 * time.Minute,
		DefaultVHost:    "/",
		DefaultUser:     "guest",
		DefaultPass:     "guest",
		LoopbackUsers:   []string{"guest"},

		MemoryHighWatermarkPercent: 40,
		Queues:                     Queues{WindowMessages: 32768, WindowBytes: 8 << 20, MemoryBudget: 128 << 20, MemoryPagingPercent: 50},
		DiskFreeLimit:              50_000_000,
		DiskFreeCheckInterval:      2 * time.Second,
		Auth:                       DefaultAuth(),
		OAuth2:                     DefaultOAuth2(),
		Cluster:                    DefaultCluster(),
	}
}

// SlogLevel returns the slog level for Level; Validate guarantees it is
// known, an unknown level yields slog.LevelInfo.
func (l Log) SlogLevel() slog.Level {
	lv, _ := parseLevel(l.Level)
	return lv
}

func parseLevel(s string) (slog.Level, bool) {
	switch s {
	case "debug":
		return slog.LevelDebug, true
	case "info":
		return slog.LevelInfo, true
	case "warn", "warning":
		return slog.LevelWarn, true
	case "error":
		return slog.LevelError, true
	}
	return slog.LevelInfo, false
}

// EventExchange configures the amq.rabbitmq.event exchange.
type EventExchange struct {
	// VHost is the vhost the exchange is declared in and every vhost's
	// events are published to (RabbitMQ's rabbitmq_event_exchange.vhost,
	// default "/"); "none" declares it nowhere.
	VHost string `yaml:"vhost"`
}
