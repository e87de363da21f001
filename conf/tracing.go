package conf

import (
	"net/url"
	"strings"
)

// Tracing configures OpenTelemetry tracing of messages (W3C traceparent
// headers through AMQP, MQTT 5 and STOMP), exported over OTLP. It is on
// when Enabled is true or an endpoint is set, here or in the standard
// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// variables (the other OTEL_* exporter variables apply too); off, it
// costs nothing per message.
type Tracing struct {
	// Enabled turns tracing on (with an empty Endpoint: the OTEL_*
	// variables, else the exporter's default, localhost).
	Enabled bool `yaml:"enabled"`
	// Endpoint is the collector's base URL: http://host:4318 for
	// OTLP/HTTP, http://host:4317 for gRPC, https:// for TLS.
	Endpoint string `yaml:"endpoint"`
	// Protocol is grpc or http/protobuf; empty: OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf.
	Protocol string `yaml:"protocol"`
	// SampleRatio is the share of messages without a traceparent that
	// start a trace (0 to 1). Messages with one follow its sampled flag
	// (parent-based sampling).
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name of the spans (default trident;
	// OTEL_SERVICE_NAME overrides it).
	ServiceName string `yaml:"service_name"`
}

var tracingFields = []field{
	f("tracing.enabled", "export OpenTelemetry spans of traced messages over OTLP (also on with tracing.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)", func(c *Config) any { return &c.Tracing.Enabled }),
	f("tracing.endpoint", "OTLP collector base URL, e.g. http://localhost:4318 (empty: OTEL_EXPORTER_OTLP_ENDPOINT)", func(c *Config) any { return &c.Tracing.Endpoint }),
	f("tracing.protocol", "OTLP protocol: grpc or http/protobuf (empty: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)", func(c *Config) any { return &c.Tracing.Protocol }),
	f("tracing.sample_ratio", "share of messages without a traceparent that start a trace, 0 to 1 (messages with one follow its sampled flag)", func(c *Config) any { return &c.Tracing.SampleRatio }),
	f("tracing.service_name", "service.name of the broker's spans (empty: trident)", func(c *Config) any { return &c.Tracing.ServiceName }),
}

func (c *Config) validateTracing(bad func(key string, format string, args ...any)) {
	t := c.Tracing
	switch t.Protocol {
	case "", "grpc", "http/protobuf":
	default:
		bad("tracing.protocol", "%q must be grpc or http/protobuf", t.Protocol)
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		bad("tracing.sample_ratio", "%v must be between 0 and 1", t.SampleRatio)
	}
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(u.Host, " ") {
			bad("tracing.endpoint", "%q must be an http:// or https:// URL", t.Endpoint)
		}
	}
}
