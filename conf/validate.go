package conf

import (
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"
)

// Validate checks every field and returns all problems found, joined, each
// naming the field by its YAML key, e.g.
//
//	conf: amqp.listen "x": missing port
func (c *Config) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("conf: %s: %s", key, fmt.Sprintf(format, args...)))
	}

	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	if _, ok := parseLevel(c.Log.Level); !ok {
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		bad("log.format", "%q is not one of text, json", c.Log.Format)
	}

	a := c.AMQP
	if a.FrameMax < MinFrameMax || a.FrameMax > 1<<32-1 {
		bad("amqp.frame_max", "%d is out of range [%d, %d]", a.FrameMax, MinFrameMax, uint32(1<<32-1))
	}
	if a.InitialFrameMax < MinFrameMax || a.InitialFrameMax > a.FrameMax {
		bad("amqp.initial_frame_max", "%d is out of range [%d, amqp.frame_max %d]", a.InitialFrameMax, MinFrameMax, a.FrameMax)
	}
	if a.ChannelMax < 0 || a.ChannelMax > 65535 {
		bad("amqp.channel_max", "%d is out of range [0, 65535]", a.ChannelMax)
	}
	switch {
	case a.Heartbeat < 0 || a.Heartbeat > maxHeartbeat:
		bad("amqp.heartbeat", "%s is out of range [0s, %s]", a.Heartbeat, maxHeartbeat)
	case a.Heartbeat%time.Second != 0:
		bad("amqp.heartbeat", "%s is not a whole number of seconds", a.Heartbeat)
	}
	if a.MaxMessageSize <= 0 || a.MaxMessageSize > MaxMessageSizeCap {
		bad("amqp.max_message_size", "%d is out of range [1, %d]", a.MaxMessageSize, MaxMessageSizeCap)
	}
	if a.HandshakeTimeout <= 0 {
		bad("amqp.handshake_timeout", "%s must be positive", a.HandshakeTimeout)
	}
	if c.MQTT.Exchange == "" && (c.MQTT.Listen != "" || c.MQTT.WSListen != "") {
		bad("mqtt.exchange", "must not be empty while MQTT is enabled")
	}
	if k := c.MQTT.ServerKeepAlive; k < 0 || k > 65535*time.Second || k%time.Second != 0 {
		bad("mqtt.server_keep_alive", "%s is not a whole number of seconds in [0, 65535]", k)
	}
	if c.ConsumerTimeout < 0 {
		bad("consumer_timeout", "%s must not be negative (0 disables it)", c.ConsumerTimeout)
	}
	if c.DefaultVHost == "" {
		bad("default_vhost", "must not be empty")
	}
	if c.DefaultUser != "" && c.DefaultPass == "" {
		bad("default_pass", "must not be empty when default_user %q is set", c.DefaultUser)
	}
	if c.STOMP.MaxHeaders < 1 {
		bad("stomp.max_headers", "%d must be at least 1", c.STOMP.MaxHeaders)
	}
	if c.STOMP.MaxHeaderLength < 256 {
		bad("stomp.max_header_length", "%d must be at least 256", c.STOMP.MaxHeaderLength)
	}
	if n := c.STOMP.MaxFrameSizeUnauthenticated; n < 1024 || n > 1<<20 {
		bad("stomp.max_frame_size_unauthenticated", "%d is out of range [1024, %d]", n, 1<<20)
	}
	if c.MQTT.AllowAnonymous && (c.MQTT.DefaultUser == "" || c.MQTT.DefaultPass == "") {
		bad("mqtt.allow_anonymous", "needs mqtt.default_user and mqtt.default_pass (the top-level default_user is never used for anonymous logins)")
	} else if c.MQTT.AllowAnonymous && c.MQTT.DefaultUser == c.DefaultUser {
		bad("mqtt.default_user", "%q is the bootstrap user (default_user): anonymous MQTT clients need a user of their own", c.DefaultUser)
	}
	if c.STOMP.AllowAnonymous && (c.STOMP.DefaultUser == "" || c.STOMP.DefaultPass == "") {
		bad("stomp.allow_anonymous", "needs stomp.default_user and stomp.default_pass (the top-level default_user is never used for anonymous logins)")
	} else if c.STOMP.AllowAnonymous && c.STOMP.DefaultUser == c.DefaultUser {
		bad("stomp.default_user", "%q is the bootstrap user (default_user): anonymous STOMP clients need a user of their own", c.DefaultUser)
	}
	for i, o := range c.HTTP.AllowedOrigins {
		if _, err := path.Match(o, ""); o == "" || err != nil {
			bad(fmt.Sprintf("http.allowed_origins[%d]", i), "%q is not a host pattern", o)
		}
	}
	if p := c.MemoryHighWatermarkPercent; p < 0 || p > 100 {
		bad("memory_high_watermark_percent", "%d must be between 0 and 100", p)
	}
	if c.MemoryHighWatermarkBytes < 0 {
		bad("memory_high_watermark_bytes", "%d must not be negative", c.MemoryHighWatermarkBytes)
	}
	if c.DiskFreeLimit < 0 {
		bad("disk_free_limit", "%d must not be negative", c.DiskFreeLimit)
	}
	if c.DiskFreeLimit > 0 && c.DiskFreeCheckInterval <= 0 {
		bad("disk_free_check_interval", "%s must be positive", c.DiskFreeCheckInterval)
	}
	for _, l := range []struct {
		key string
		v   int
	}{
		{"limits.max_connections_per_user", c.Limits.MaxConnectionsPerUser},
		{"limits.max_connections_per_vhost", c.Limits.MaxConnectionsPerVHost},
		{"limits.max_queues_per_vhost", c.Limits.MaxQueuesPerVHost},
		{"limits.publish_rate_per_user", c.Limits.PublishRatePerUser},
		{"limits.publish_rate_per_vhost", c.Limits.PublishRatePerVHost},
	} {
		if l.v < 0 {
			bad(l.key, "%d must not be negative (0 means no limit)", l.v)
		}
	}
	switch c.MQTT.DurableQueueType {
	case "", "classic", "quorum": // "": classic
	default:
		bad("mqtt.durable_queue_type", "%q is neither classic nor quorum", c.MQTT.DurableQueueType)
	}
	if c.MQTT.SysInterval < 0 {
		bad("mqtt.sys_interval", "%s must not be negative (0 disables $SYS)", c.MQTT.SysInterval)
	}
	if k := c.MQTT.MinKeepAlive; k < 0 || k > 65535*time.Second || k%time.Second != 0 {
		bad("mqtt.min_keep_alive", "%s is not a whole number of seconds up to 65535s", k)
	} else if m := c.MQTT.ServerKeepAlive; k > 0 && m > 0 && k > m {
		bad("mqtt.min_keep_alive", "%s is above mqtt.server_keep_alive (%s)", k, m)
	}
	if n := c.MQTT.MaxInflight; n < 0 || n > 65535 {
		bad("mqtt.max_inflight", "%d is not in [1, 65535] (0: the default, 1024)", n)
	}
	if n := c.MQTT.MaxPacketSize; n != 0 && (n < 64 || n > 268435455) {
		bad("mqtt.max_packet_size", "%d is not in [64, 268435455] (0: the default, 16 MiB)", n)
	}
	if c.MQTT.MaxQueuedQoS0 < 0 {
		bad("mqtt.max_queued_qos0", "%d must not be negative", c.MQTT.MaxQueuedQoS0)
	}
	if c.MQTT.MaxSubscriptionsPerClient < 0 {
		bad("mqtt.max_subscriptions_per_client", "%d must not be negative (0 means no limit)", c.MQTT.MaxSubscriptionsPerClient)
	}
	if n := c.MQTT.MaxPacketSizeUnauthenticated; n != 0 && (n < 64 || n > 16<<20) {
		bad("mqtt.max_packet_size_unauthenticated", "%d is not in [64, 16777216] (0: the default, 16384)", n)
	}
	if c.Queues.WindowMessages < 1 {
		bad("queues.window_messages", "%d must be at least 1", c.Queues.WindowMessages)
	}
	if c.Queues.WindowBytes < 1 {
		bad("queues.window_bytes", "%d must be at least 1", c.Queues.WindowBytes)
	}
	if c.Queues.MemoryBudget < 1 {
		bad("queues.memory_budget", "%d must be at least 1", c.Queues.MemoryBudget)
	}
	if c.Queues.MemoryPagingPercent < 0 || c.Queues.MemoryPagingPercent > 100 {
		bad("queues.memory_paging_percent", "%d must be between 0 and 100", c.Queues.MemoryPagingPercent)
	}
	if c.HTTP.MaxDefinitionsBody < 1<<20 {
		bad("http.max_definitions_body", "%d must be at least 1048576 (1 MiB)", c.HTTP.MaxDefinitionsBody)
	}
	for i, u := range c.LoopbackUsers {
		if u == "" {
			bad(fmt.Sprintf("loopback_users[%d]", i), "must not be empty")
		}
	}

	c.validateBridges(bad)
	c.validateSecurity(bad)
	c.validateOAuth2(bad)
	c.validateTracing(bad)
	c.validateStream(bad)
	errs = append(errs, c.validateTLS()...)
	errs = append(errs, c.validateCluster()...)
	errs = append(errs, c.validateListeners()...)
	return errors.Join(errs...)
}

// listeners returns every listener by YAML key, enabled or not, in a fixed order.
func (c *Config) listeners() []struct{ key, addr string } {
	return []struct{ key, addr string }{
		{"amqp.listen", c.AMQP.Listen},
		{"mqtt.listen", c.MQTT.Listen},
		{"mqtt.ws_listen", c.MQTT.WSListen},
		{"stomp.listen", c.STOMP.Listen},
		{"stomp.ws_listen", c.STOMP.WSListen},
		{"http.listen", c.HTTP.Listen},
		{"prometheus.listen", c.Prometheus.Listen},
	}
}

// validateListeners checks each enabled listen address and that no two
// listeners would bind the same port on overlapping hosts.
func (c *Config) validateListeners() []error {
	var errs []error
	type bound struct{ key, host, port string }
	var seen []bound
	for _, l := range append(c.listeners(), c.tlsListeners()...) {
		if l.addr == "" {
			continue // disabled
		}
		host, port, err := splitListen(l.addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("conf: %s %q: %s", l.key, l.addr, err))
			continue
		}
		if port == "0" {
			continue // ephemeral, never conflicts
		}
		for _, s := range seen {
			if s.port == port && (s.host == host || isWildcard(s.host) || isWildcard(host)) {
				errs = append(errs, fmt.Errorf("conf: %s %q: port %s is also used by %s", l.key, l.addr, port, s.key))
				break
			}
		}
		seen = append(seen, bound{l.key, host, port})
	}
	return errs
}

// splitListen parses "host:port" with a numeric port (host may be empty).
func splitListen(addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "", "", errors.New(strings.TrimSuffix(ae.Err, " in address"))
		}
		return "", "", err
	}
	if port == "" {
		return "", "", errors.New("missing port")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", "", fmt.Errorf("port %q is not a number in [0, 65535]", port)
	}
	return host, strconv.FormatUint(n, 10), nil
}

func isWildcard(host string) bool {
	return host == "" || host == "0.0.0.0" || host == "::"
}
