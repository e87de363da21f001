package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/trident-broker/trident/exchange"
)

// The W3C Trace Context header names, as they appear in a message's
// headers (AMQP headers, MQTT 5 user properties, STOMP headers).
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// The OTLP protocols Start accepts (OTEL_EXPORTER_OTLP_PROTOCOL's values).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// ErrProtocol is returned by Start for an OTLP protocol it does not speak.
var ErrProtocol = errors.New("tracing: unknown OTLP protocol (want grpc or http/protobuf)")

// Config says whether and where spans are exported.
type Config struct {
	// Enabled turns tracing on. Tracing is also on when Endpoint, or one
	// of OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// is set, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
	Enabled bool
	// Endpoint is the collector's base URL (http://host:4318 for
	// OTLP/HTTP, http://host:4317 for gRPC; https for TLS). Empty: the
	// OTEL_EXPORTER_OTLP_* variables, else the exporter's default
	// (localhost).
	Endpoint string
	// Protocol is grpc or http/protobuf. Empty:
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf.
	Protocol string
	// SampleRatio is the share of messages without a traceparent that
	// start a trace of their own (0: none, 1: all). Messages with one
	// follow its sampled flag.
	SampleRatio float64
	// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME
	// or OTEL_RESOURCE_ATTRIBUTES say otherwise; empty: "trident".
	ServiceName string
	// InstanceID, if set, is the resource's service.instance.id (the
	// node's name).
	InstanceID string
}

// On reports whether c, with the process's environment, turns tracing on.
func (c Config) On() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return c.Enabled || c.Endpoint != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Tracer records the broker's spans. A nil *Tracer is tracing off.
type Tracer struct {
	tp    *sdktrace.TracerProvider
	t     oteltrace.Tracer
	roots bool // messages without a traceparent may start a trace
}

// Start returns the tracer cfg asks for, exporting over OTLP, or nil when
// tracing is off. The exporter connects lazily: an unreachable collector
// costs dropped spans (logged by the SDK), never a blocked publish.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Tracer, error) {
	if !cfg.On() {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	proto := cfg.Protocol
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if proto == "" {
			proto = os.Getenv(v)
		}
	}
	if proto == "" {
		proto = ProtocolHTTP
	}
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case ProtocolHTTP:
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			u, err := tracesURL(cfg.Endpoint)
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("%w: %q", ErrProtocol, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "trident"
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if cfg.InstanceID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(cfg.InstanceID))
	}
	// Later options win: the environment overrides our defaults.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		log.Warn("tracing: resource", "err", err) // partial resource: still usable
	}
	// The SDK reports failed exports through the process's OpenTelemetry
	// error handler; send them to our log rather than to stderr.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export", "err", err) }))
	ratio := min(max(cfg.SampleRatio, 0), 1)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	log.Info("tracing on", "protocol", proto, "endpoint", cfg.Endpoint, "sample_ratio", ratio)
	return &Tracer{tp: tp, t: tp.Tracer(scope), roots: ratio > 0}, nil
}

// scope is the instrumentation scope of the broker's spans.
const scope = "github.com/trident-broker/trident/protocol/frontend/tracing"

// tracesURL is the OTLP/HTTP traces URL for a collector's base URL:
// /v1/traces is added when the URL has no path.
func tracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: endpoint %q is not an http:// or https:// URL", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Shutdown exports what is buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Protocol names the protocol a span's message came in or went out by
// (network.protocol.name and .version).
type Protocol struct{ Name, Version string }

// The protocols of the front ends.
var (
	AMQP091 = Protocol{"amqp", "0.9.1"}
	MQTT31  = Protocol{"mqtt", "3.1"}
	MQTT311 = Protocol{"mqtt", "3.1.1"}
	MQTT5   = Protocol{"mqtt", "5"}
)

// Span is a publish span in progress; its zero value does nothing.
type Span struct{ s oteltrace.Span }

// Publish starts the publish span of m, which the front end is about to
// hand to the core, as a child of the context m's headers carry, and puts
// the span's own context in m's headers in its place. m must not be
// shared yet. The caller ends the span once the core has routed m.
func (t *Tracer) Publish(m *exchange.Message, p Protocol) Span {
	if t == nil {
		return Span{}
	}
	ctx := context.Background()
	if _, ok := m.Props.Headers[HeaderTraceparent]; ok {
		sc := extract(m.Props.Headers)
		if !sc.IsValid() && !t.roots {
			return Span{}
		}
		if sc.IsValid() && !sc.IsSampled() {
			return Span{} // parent based: the publisher chose not to sample
		}
		ctx = oteltrace.ContextWithRemoteSpanContext(ctx, sc)
	} else if !t.roots {
		return Span{}
	}
	name := "publish"
	if m.Exchange != "" {
		name += " " + m.Exchange
	}
	ctx, s := t.t.Start(ctx, name, oteltrace.WithSpanKind(oteltrace.SpanKindServer),
		oteltrace.WithAttributes(messageAttrs(m, p, "publish", m.Exchange)...),
		oteltrace.WithAttributes(semconv.MessagingOperationTypeSend))
	if !s.SpanContext().IsSampled() {
		s.End()
		return Span{}
	}
	h := maps.Clone(m.Props.Headers)
	if h == nil {
		h = exchange.Table{}
	}
	propagation.TraceContext{}.Inject(ctx, carrier(h))
	m.Props.Headers = h
	return Span{s: s}
}

// End ends the publish span: routed is how many queues took the message
// (-1: not known yet, as for a message held by a transaction), err what
// the core refused it with.
func (sp Span) End(routed int, err error) {
	if sp.s == nil {
		return
	}
	if routed >= 0 {
		sp.s.SetAttributes(attribute.Int("trident.routed_queues", routed))
	}
	if err != nil {
		sp.s.SetStatus(codes.Error, err.Error())
		sp.s.SetAttributes(semconv.ErrorTypeOther)
	}
	sp.s.End()
}

// Deliver records the deliver span of d, the delivery of a message to a
// consumer of protocol p: a child of the span m's traceparent names (the
// publish span) with a link to it. It does nothing for a message without
// a sampled traceparent. It runs with the queue's lock held and does not
// block.
func (t *Tracer) Deliver(d exchange.Delivery, p Protocol) {
	if t == nil {
		return
	}
	m := d.Msg
	if _, ok := m.Props.Headers[HeaderTraceparent]; !ok {
		return
	}
	sc := extract(m.Props.Headers)
	if !sc.IsValid() || !sc.IsSampled() {
		return
	}
	q := ""
	if d.Queue != nil {
		q = d.Queue.Name()
	}
	ctx := oteltrace.ContextWithRemoteSpanContext(context.Background(), sc)
	_, s := t.t.Start(ctx, "deliver "+q, oteltrace.WithSpanKind(oteltrace.SpanKindProducer),
		oteltrace.WithLinks(oteltrace.Link{SpanContext: sc}),
		oteltrace.WithAttributes(messageAttrs(m, p, "deliver", q)...),
		oteltrace.WithAttributes(semconv.MessagingOperationTypeReceive,
			attribute.String("trident.exchange", m.Exchange), attribute.Bool("trident.redelivered", d.Redelivered)))
	s.End()
}

// messageAttrs are the messaging attributes both spans carry.
func messageAttrs(m *exchange.Message, p Protocol, op, dest string) []attribute.KeyValue {
	a := []attribute.KeyValue{
		semconv.MessagingSystemKey.String("trident"),
		semconv.MessagingOperationName(op),
		semconv.MessagingDestinationName(dest),
		semconv.MessagingMessageBodySize(len(m.Body)),
		semconv.NetworkProtocolName(p.Name),
		semconv.NetworkProtocolVersion(p.Version),
	}
	if m.RoutingKey != "" {
		a = append(a, semconv.MessagingRabbitMQDestinationRoutingKey(m.RoutingKey))
	}
	if m.Props.MessageID != "" {
		a = append(a, semconv.MessagingMessageID(m.Props.MessageID))
	}
	if m.Props.CorrelationID != "" {
		a = append(a, semconv.MessagingMessageConversationID(m.Props.CorrelationID))
	}
	return a
}

// extract reads the span context of h's traceparent and tracestate.
func extract(h exchange.Table) oteltrace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), carrier(h))
	return oteltrace.SpanContextFromContext(ctx)
}

// carrier is a message's headers as a propagation.TextMapCarrier. AMQP
// headers may hold the value as a long string or as bytes.
type carrier exchange.Table

func (c carrier) Get(k string) string {
	switch v := c[k].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

func (c carrier) Set(k, v string) { c[k] = v }

func (c carrier) Keys() []string {
	return []string{HeaderTraceparent, HeaderTracestate}
}

// MQTT is the protocol of an MQTT connection of protocol level v (3, 4 or 5).
func MQTT(v byte) Protocol {
	switch v {
	case 5:
		return MQTT5
	case 3:
		return MQTT31
	}
	return MQTT311
}
