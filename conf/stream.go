package conf

import (
	"net"
	"strings"
	"time"
)

// Stream configures the listeners of RabbitMQ's stream protocol (the
// rabbitmq_stream plugin's settings), served over the same streams as
// AMQP's x-queue-type stream.
type Stream struct {
	// Listen is the plain listener (5552); empty disables it.
	Listen string `yaml:"listen"`
	// TLSListen is the TLS listener (5551), opened when tls is
	// configured; empty disables it.
	TLSListen string `yaml:"tls_listen"`
	// AdvertisedHost and AdvertisedPort (AdvertisedTLSPort on TLS) are
	// the address the metadata and open answers give clients, which
	// reconnect to it for every producer and consumer: set them when
	// clients reach the node through another name or port (NAT, a load
	// balancer, a container's published port). Empty or 0: the address
	// the client's connection reached.
	AdvertisedHost    string `yaml:"advertised_host"`
	AdvertisedPort    int    `yaml:"advertised_port"`
	AdvertisedTLSPort int    `yaml:"advertised_tls_port"`
	// FrameMax is the largest frame after open, proposed in tune.
	FrameMax int `yaml:"frame_max"`
	// InitialFrameMax bounds every frame before open (peer properties,
	// SASL and its credentials, an OAuth 2 token among them).
	InitialFrameMax int `yaml:"initial_frame_max"`
	// Heartbeat is proposed in tune; 0 proposes none.
	Heartbeat time.Duration `yaml:"heartbeat"`
}

// DefaultStream is RabbitMQ's stream plugin's defaults.
func DefaultStream() Stream {
	return Stream{Listen: ":5552", TLSListen: ":5551", FrameMax: 1 << 20, InitialFrameMax: 8 << 10, Heartbeat: 60 * time.Second}
}

var streamFields = []field{
	f("stream.listen", "RabbitMQ stream protocol listen address (empty disables)", func(c *Config) any { return &c.Stream.Listen }),
	f("stream.tls_listen", "RabbitMQ stream protocol over TLS listen address, with tls configured (empty disables)", func(c *Config) any { return &c.Stream.TLSListen }),
	f("stream.advertised_host", "host the stream protocol's metadata and open answers give clients (empty: the address the client reached)", func(c *Config) any { return &c.Stream.AdvertisedHost }),
	f("stream.advertised_port", "port the stream protocol's metadata and open answers give clients on plain connections (0: the port the client reached)", func(c *Config) any { return &c.Stream.AdvertisedPort }),
	f("stream.advertised_tls_port", "port the stream protocol's metadata and open answers give clients on TLS connections (0: the port the client reached)", func(c *Config) any { return &c.Stream.AdvertisedTLSPort }),
	f("stream.frame_max", "largest stream protocol frame in bytes after open (proposed in tune)", func(c *Config) any { return &c.Stream.FrameMax }),
	f("stream.initial_frame_max", "largest stream protocol frame in bytes before open (SASL with its credentials, e.g. an OAuth 2 token)", func(c *Config) any { return &c.Stream.InitialFrameMax }),
	f("stream.heartbeat", "stream protocol heartbeat proposed in tune (0: none)", func(c *Config) any { return &c.Stream.Heartbeat }),
}

func (c *Config) validateStream(bad func(key string, format string, args ...any)) {
	s := c.Stream
	if s.FrameMax < 8192 || s.FrameMax > 1<<30 {
		bad("stream.frame_max", "%d must be between 8192 and 1073741824", s.FrameMax)
	}
	if s.InitialFrameMax < 1024 || s.InitialFrameMax > s.FrameMax {
		bad("stream.initial_frame_max", "%d must be between 1024 and stream.frame_max", s.InitialFrameMax)
	}
	if s.Heartbeat < 0 || (s.Heartbeat > 0 && s.Heartbeat < time.Second) {
		bad("stream.heartbeat", "%v must be 0 or at least 1s", s.Heartbeat)
	}
	for _, p := range []struct {
		key string
		n   int
	}{{"stream.advertised_port", s.AdvertisedPort}, {"stream.advertised_tls_port", s.AdvertisedTLSPort}} {
		if p.n < 0 || p.n > 65535 {
			bad(p.key, "%d is not a port", p.n)
		}
	}
	if h := s.AdvertisedHost; h != "" && (strings.ContainsAny(h, " /:") && net.ParseIP(h) == nil) {
		bad("stream.advertised_host", "%q must be a host name or an IP address", h)
	}
}
