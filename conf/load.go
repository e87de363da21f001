package conf

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
)

// EnvConfig names the environment variable holding the config file path
// (the --config flag wins over it).
const EnvConfig = "TRIDENT_CONFIG"

// field describes one leaf of Config: its YAML key, environment variable,
// flag name and where it lives.
type field struct {
	key   string // YAML key, dotted
	env   string
	flag  string
	usage string
	ptr   func(*Config) any // *string, *int, *time.Duration, *[]string, *map[string]string, *bool or *[]Bridge
}

// fields lists every leaf of Config, the sections' tables in one place
// (no registration from init functions). Env and flag names derive from
// the key: amqp.frame_max → TRIDENT_AMQP_FRAME_MAX, --amqp-frame-max.
var fields = slices.Concat(coreFields, clusterFields, clusterDiscoveryFields,
	clusterSecurityFields, oauth2Fields, securityFields, streamFields, tlsFields, tracingFields)

// coreFields are the leaves of the sections without a file of their own.
var coreFields = []field{
	f("data_dir", "directory of the store's files", func(c *Config) any { return &c.DataDir }),
	f("log.level", "log level: debug, info, warn, error", func(c *Config) any { return &c.Log.Level }),
	f("log.format", "log format: text or json", func(c *Config) any { return &c.Log.Format }),
	f("amqp.listen", "AMQP 0-9-1 listen address (empty disables)", func(c *Config) any { return &c.AMQP.Listen }),
	f("amqp.frame_max", "largest AMQP frame in bytes", func(c *Config) any { return &c.AMQP.FrameMax }),
	f("amqp.initial_frame_max", "largest AMQP frame before connection.tune-ok (start-ok with its credentials, e.g. an OAuth 2 token)", func(c *Config) any { return &c.AMQP.InitialFrameMax }),
	f("amqp.channel_max", "largest AMQP channel number (0: 65535)", func(c *Config) any { return &c.AMQP.ChannelMax }),
	f("amqp.heartbeat", "AMQP heartbeat proposed to clients (0 disables)", func(c *Config) any { return &c.AMQP.Heartbeat }),
	f("amqp.max_message_size", "largest message body in bytes", func(c *Config) any { return &c.AMQP.MaxMessageSize }),
	f("amqp.handshake_timeout", "time allowed from accept to connection.open", func(c *Config) any { return &c.AMQP.HandshakeTimeout }),
	f("consumer_timeout", "close an AMQP channel (a STOMP connection) whose delivery stays unacknowledged this long (0 disables)", func(c *Config) any { return &c.ConsumerTimeout }),
	f("amqp.product", "product name in AMQP server properties", func(c *Config) any { return &c.AMQP.Product }),
	f("mqtt.listen", "MQTT listen address (empty disables)", func(c *Config) any { return &c.MQTT.Listen }),
	f("mqtt.ws_listen", "MQTT over WebSocket listen address (empty disables)", func(c *Config) any { return &c.MQTT.WSListen }),
	f("mqtt.exchange", "topic exchange used by MQTT", func(c *Config) any { return &c.MQTT.Exchange }),
	f("mqtt.allow_anonymous", "MQTT clients without credentials connect as mqtt.default_user", func(c *Config) any { return &c.MQTT.AllowAnonymous }),
	f("mqtt.default_user", "user of anonymous MQTT clients (required with mqtt.allow_anonymous; never default_user)", func(c *Config) any { return &c.MQTT.DefaultUser }),
	f("mqtt.default_pass", "password of mqtt.default_user", func(c *Config) any { return &c.MQTT.DefaultPass }),
	f("mqtt.server_keep_alive", "longest keep-alive of MQTT 5 clients, sent in CONNACK to those asking for more or none (0: off)", func(c *Config) any { return &c.MQTT.ServerKeepAlive }),
	f("mqtt.min_keep_alive", "shortest keep-alive: MQTT 5 clients asking for less or none are told it in CONNACK, 3.1.1 ones refused (0: off)", func(c *Config) any { return &c.MQTT.MinKeepAlive }),
	f("mqtt.max_inflight", "unacknowledged QoS 1/2 messages per MQTT client, each way (Receive Maximum; 0: 1024)", func(c *Config) any { return &c.MQTT.MaxInflight }),
	f("mqtt.max_packet_size", "largest MQTT packet in bytes once connected (0: 16 MiB)", func(c *Config) any { return &c.MQTT.MaxPacketSize }),
	f("mqtt.max_queued_qos0", "QoS 0 messages a clean MQTT session queues for a slow subscriber before dropping new ones (0: no limit)", func(c *Config) any { return &c.MQTT.MaxQueuedQoS0 }),
	f("mqtt.max_subscriptions_per_client", "topic filters one MQTT session may hold; more get SUBACK 0x97 / 0x80 (0: no limit)", func(c *Config) any { return &c.MQTT.MaxSubscriptionsPerClient }),
	f("mqtt.max_packet_size_unauthenticated", "largest MQTT CONNECT packet in bytes, read before authentication", func(c *Config) any { return &c.MQTT.MaxPacketSizeUnauthenticated }),
	f("mqtt.bridges", "MQTT bridges to other brokers: a YAML or JSON list of Mosquitto-style connections (bridge.go)", func(c *Config) any { return &c.MQTT.Bridges }),
	f("mqtt.deny_subscribe", "MQTT topic filters no client may subscribe to (comma-separated)", func(c *Config) any { return &c.MQTT.DenySubscribe }),
	f("mqtt.durable_queue_type", "queue type of new persistent MQTT sessions: classic or quorum (replicated)", func(c *Config) any { return &c.MQTT.DurableQueueType }),
	f("mqtt.sys_interval", "how often the $SYS/broker/... topics are published to MQTT subscribers (0 disables)", func(c *Config) any { return &c.MQTT.SysInterval }),
	f("event_exchange.vhost", "vhost of the amq.rabbitmq.event exchange (\"none\": no event exchange)", func(c *Config) any { return &c.EventExchange.VHost }),
	f("stomp.listen", "STOMP listen address (empty disables)", func(c *Config) any { return &c.STOMP.Listen }),
	f("stomp.ws_listen", "STOMP over WebSocket listen address (empty disables)", func(c *Config) any { return &c.STOMP.WSListen }),
	f("stomp.max_headers", "most header lines in a STOMP frame", func(c *Config) any { return &c.STOMP.MaxHeaders }),
	f("stomp.max_header_length", "longest STOMP header line in bytes", func(c *Config) any { return &c.STOMP.MaxHeaderLength }),
	f("stomp.max_frame_size_unauthenticated", "largest STOMP frame (CONNECT, headers and body) before login, in bytes", func(c *Config) any { return &c.STOMP.MaxFrameSizeUnauthenticated }),
	f("stomp.allow_anonymous", "STOMP clients without a login header connect as stomp.default_user", func(c *Config) any { return &c.STOMP.AllowAnonymous }),
	f("stomp.default_user", "user of anonymous STOMP clients (needed by stomp.allow_anonymous)", func(c *Config) any { return &c.STOMP.DefaultUser }),
	f("stomp.default_pass", "password of stomp.default_user", func(c *Config) any { return &c.STOMP.DefaultPass }),
	f("http.allowed_origins", "browser origins WebSocket listeners accept besides their own host (comma-separated host[:port] or scheme://host[:port] patterns; * any)", func(c *Config) any { return &c.HTTP.AllowedOrigins }),
	f("http.listen", "management HTTP API and UI listen address (empty disables)", func(c *Config) any { return &c.HTTP.Listen }),
	f("http.stats_interval", "how often message rates are sampled", func(c *Config) any { return &c.HTTP.StatsInterval }),
	f("http.max_definitions_body", "largest definitions import body in bytes (other API bodies: 1 MiB)", func(c *Config) any { return &c.HTTP.MaxDefinitionsBody }),
	f("prometheus.listen", "Prometheus /metrics listen address (empty disables)", func(c *Config) any { return &c.Prometheus.Listen }),
	f("default_vhost", "virtual host created on start", func(c *Config) any { return &c.DefaultVHost }),
	f("default_user", "user created when none exists (empty: none)", func(c *Config) any { return &c.DefaultUser }),
	f("default_pass", "password of default_user", func(c *Config) any { return &c.DefaultPass }),
	f("loopback_users", "comma-separated users allowed only from loopback", func(c *Config) any { return &c.LoopbackUsers }),
	f("definitions", "definitions.json file to import at boot (RabbitMQ's format)", func(c *Config) any { return &c.Definitions }),
	f("memory_high_watermark_percent", "memory alarm above this % of RAM (0 disables)", func(c *Config) any { return &c.MemoryHighWatermarkPercent }),
	f("memory_high_watermark_bytes", "memory alarm above this many bytes (overrides the %)", func(c *Config) any { return &c.MemoryHighWatermarkBytes }),
	f("queues.window_messages", "messages a classic queue keeps in memory at its head; the rest is on disk", func(c *Config) any { return &c.Queues.WindowMessages }),
	f("queues.window_bytes", "body bytes a classic queue keeps in memory at its head", func(c *Config) any { return &c.Queues.WindowBytes }),
	f("queues.memory_budget", "bytes of messages (bodies and their overhead) all queues together keep in memory; past it they page out", func(c *Config) any { return &c.Queues.MemoryBudget }),
	f("queues.memory_paging_percent", "past this % of the memory alarm limit queues page out at once (0 disables)", func(c *Config) any { return &c.Queues.MemoryPagingPercent }),
	f("disk_free_limit", "disk alarm below this many free bytes in data_dir (0 disables)", func(c *Config) any { return &c.DiskFreeLimit }),
	f("disk_free_check_interval", "how often free disk space is measured", func(c *Config) any { return &c.DiskFreeCheckInterval }),
	f("limits.max_connections_per_user", "most open connections per user, all protocols (0: no limit)", func(c *Config) any { return &c.Limits.MaxConnectionsPerUser }),
	f("limits.max_connections_per_vhost", "most open connections per vhost, all protocols (0: no limit)", func(c *Config) any { return &c.Limits.MaxConnectionsPerVHost }),
	f("limits.max_queues_per_vhost", "most queues per vhost (0: no limit)", func(c *Config) any { return &c.Limits.MaxQueuesPerVHost }),
	f("limits.publish_rate_per_user", "messages/s one user may publish; slows the reader (0: no limit)", func(c *Config) any { return &c.Limits.PublishRatePerUser }),
	f("limits.publish_rate_per_vhost", "messages/s published to one vhost; slows the reader (0: no limit)", func(c *Config) any { return &c.Limits.PublishRatePerVHost }),
}

func f(key, usage string, ptr func(*Config) any) field {
	up := strings.ToUpper(strings.NewReplacer(".", "_").Replace(key))
	fl := strings.NewReplacer(".", "-", "_", "-").Replace(key)
	return field{key: key, env: "TRIDENT_" + up, flag: fl, usage: usage, ptr: ptr}
}

// set parses s into the field of c. Lists are comma-separated; an empty
// string is an empty list.
func (fd field) set(c *Config, s string) error {
	switch p := fd.ptr(c).(type) {
	case *string:
		*p = s
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		*p = n
	case *time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 60s or 1m30s", s)
		}
		*p = d
	case *[]string:
		*p = splitList(s)
	case *map[string]string:
		m := map[string]string{}
		for _, e := range splitList(s) {
			k, v, ok := strings.Cut(e, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return fmt.Errorf("%q is not a list of key=value", s)
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		*p = m
	case *float64:
		x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		*p = x
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", s)
		}
		*p = b
	case *[]Bridge:
		return parseBridges(p, s)
	default:
		panic("conf: unsupported field type for " + fd.key)
	}
	return nil
}

func splitList(s string) []string {
	out := []string{}
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Load builds the configuration from, in increasing precedence: Default(),
// the YAML file named by --config (or $TRIDENT_CONFIG), environment
// variables (TRIDENT_DATA_DIR, TRIDENT_AMQP_LISTEN, ...: see Usage) and the
// flags in args (args excludes the program name). It then calls Validate.
//
// env is os.Getenv in production; an empty value counts as unset, so use the
// flag or the file to disable a listener. With -h or --help Load returns an
// error that wraps flag.ErrHelp; print Usage then.
func Load(args []string, env func(string) string) (Config, error) {
	if env == nil {
		env = func(string) string { return "" }
	}
	cfg := Default()

	type setting struct {
		fd  field
		val string
	}
	var flagged []setting
	var configFile string
	fs := flag.NewFlagSet("trident", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&configFile, "config", "", "")
	for _, fd := range fields {
		fs.Func(fd.flag, fd.usage, func(s string) error {
			var probe Config // check the value now so the error names the flag
			if err := fd.set(&probe, s); err != nil {
				return err
			}
			flagged = append(flagged, setting{fd, s})
			return nil
		})
	}
	for alias, key := range flagAliases { // e.g. --join for --cluster-join
		for _, fd := range fields {
			if fd.key == key {
				fs.Func(alias, fd.usage, func(s string) error {
					var probe Config
					if err := fd.set(&probe, s); err != nil {
						return err
					}
					flagged = append(flagged, setting{fd, s})
					return nil
				})
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, fmt.Errorf("conf: %w", err)
		}
		return Config{}, fmt.Errorf("conf: %v", err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("conf: unexpected argument %q", fs.Arg(0))
	}

	if configFile == "" {
		configFile = env(EnvConfig)
	}
	if configFile != "" {
		if err := loadFile(&cfg, configFile); err != nil {
			return Config{}, err
		}
	}
	for _, fd := range fields {
		if v := env(fd.env); v != "" {
			if err := fd.set(&cfg, v); err != nil {
				return Config{}, fmt.Errorf("conf: %s: %v", fd.env, err)
			}
		}
	}
	for _, s := range flagged {
		_ = s.fd.set(&cfg, s.val) // checked while parsing
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// loadFile decodes the YAML file at path over cfg. Unknown keys are errors,
// so a typo does not silently leave a default in place; they and values
// of the wrong type are reported by key path (checkKeys).
func loadFile(cfg *Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("conf: config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("conf: config file %s: %v", path, err)
	}
	if err := checkKeys(&doc); err != nil { // names the key path (keys.go)
		return fmt.Errorf("conf: config file %s:\n%v", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("conf: config file %s: %v", path, err)
	}
	return nil
}

// Usage writes the flags, environment variables and YAML keys with their
// defaults to w.
func Usage(w io.Writer) {
	d := Default()
	fmt.Fprintf(w, "Usage: trident [flags]\n\n")
	fmt.Fprintf(w, "Settings come from defaults, then the YAML file (--config FILE or $%s),\n", EnvConfig)
	fmt.Fprintf(w, "then environment variables, then flags. An empty listen address disables a listener.\n\n")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "FLAG\tENV\tYAML\tDEFAULT\tDESCRIPTION\n")
	fmt.Fprintf(tw, "--config\t%s\t\t\tYAML config file\n", EnvConfig)
	for _, fd := range fields {
		fmt.Fprintf(tw, "--%s\t%s\t%s\t%s\t%s\n", fd.flag, fd.env, fd.key, formatValue(fd.ptr(&d)), fd.usage)
	}
	tw.Flush()
}

func formatValue(p any) string {
	switch p := p.(type) {
	case *string:
		return strconv.Quote(*p)
	case *int:
		return strconv.Itoa(*p)
	case *time.Duration:
		return p.String()
	case *[]string:
		return strconv.Quote(strings.Join(*p, ","))
	case *map[string]string:
		kv := make([]string, 0, len(*p))
		for k, v := range *p {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		return strconv.Quote(strings.Join(kv, ","))
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *bool:
		return strconv.FormatBool(*p)
	case *[]Bridge:
		return fmt.Sprintf("(%d)", len(*p))
	}
	return ""
}
