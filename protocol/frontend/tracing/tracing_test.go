package tracing

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/trident-broker/trident/exchange"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// recording returns a tracer whose spans go to a recorder, sampling
// roots at ratio.
func recording(ratio float64) (*Tracer, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	return &Tracer{tp: tp, t: tp.Tracer(scope), roots: ratio > 0}, rec
}

// Off is free: a nil tracer neither allocates nor touches the message.
func TestOffAllocatesNothing(t *testing.T) {
	var tr *Tracer
	m := &exchange.Message{Exchange: "x", Props: exchange.Properties{Headers: exchange.Table{HeaderTraceparent: parent}}}
	d := exchange.Delivery{Msg: m}
	if n := testing.AllocsPerRun(100, func() {
		tr.Publish(m, AMQP091).End(1, nil)
		tr.Deliver(d, MQTT5)
	}); n != 0 {
		t.Fatalf("tracing off: %v allocations per message", n)
	}
	if m.Props.Headers[HeaderTraceparent] != parent {
		t.Fatalf("tracing off changed the traceparent: %v", m.Props.Headers)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// On, a message without a traceparent pays nothing unless roots are
// sampled.
func TestUntracedMessageAllocatesNothing(t *testing.T) {
	tr, rec := recording(0)
	m := &exchange.Message{Exchange: "x", Props: exchange.Properties{Headers: exchange.Table{"k": "v"}}}
	d := exchange.Delivery{Msg: m}
	if n := testing.AllocsPerRun(100, func() {
		tr.Publish(m, AMQP091).End(1, nil)
		tr.Deliver(d, AMQP091)
	}); n != 0 {
		t.Fatalf("untraced message: %v allocations", n)
	}
	if len(rec.Ended()) != 0 {
		t.Fatalf("spans for an untraced message: %v", rec.Ended())
	}
}

func TestPublishReplacesTraceparentInACopy(t *testing.T) {
	tr, rec := recording(0)
	orig := exchange.Table{HeaderTraceparent: []byte(parent), "k": "v"} // AMQP may send bytes
	m := &exchange.Message{Exchange: "amq.topic", RoutingKey: "a.b", Props: exchange.Properties{Headers: orig, MessageID: "id"}}
	sp := tr.Publish(m, AMQP091)
	sp.End(0, errors.New("refused"))
	if string(orig[HeaderTraceparent].([]byte)) != parent {
		t.Fatal("the publisher's headers table was changed in place")
	}
	got, _ := m.Props.Headers[HeaderTraceparent].(string)
	spans := rec.Ended()
	if len(spans) != 1 || m.Props.Headers["k"] != "v" {
		t.Fatalf("spans %v, headers %v", spans, m.Props.Headers)
	}
	s := spans[0]
	want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
	if got != want || s.Parent().SpanID().String() != "00f067aa0ba902b7" || s.SpanKind() != oteltrace.SpanKindServer || s.Status().Description != "refused" {
		t.Fatalf("traceparent %q, want %q; parent %v kind %v status %v", got, want, s.Parent().SpanID(), s.SpanKind(), s.Status())
	}

	// A root sampled by the ratio gets a traceparent of its own.
	tr, rec = recording(1)
	m = &exchange.Message{Exchange: "x"}
	tr.Publish(m, Protocol{"stomp", "1.2"}).End(1, nil)
	tr.Deliver(exchange.Delivery{Msg: m}, MQTT311)
	if spans := rec.Ended(); len(spans) != 2 || m.Props.Headers[HeaderTraceparent] == nil ||
		spans[1].Parent().SpanID() != spans[0].SpanContext().SpanID() || len(spans[1].Links()) != 1 {
		t.Fatalf("root: spans %v headers %v", spans, m.Props.Headers)
	}
}

func TestOn(t *testing.T) {
	for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(v, "")
	}
	if (Config{}).On() || !(Config{Enabled: true}).On() || !(Config{Endpoint: "http://c:4318"}).On() {
		t.Fatal("config alone")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")
	if !(Config{}).On() {
		t.Fatal("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT does not turn tracing on")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if (Config{Enabled: true}).On() {
		t.Fatal("OTEL_TRACES_EXPORTER=none does not turn tracing off")
	}
	if tr, err := Start(context.Background(), Config{Enabled: true}, nil); tr != nil || err != nil {
		t.Fatalf("Start while off: %v %v", tr, err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	if _, err := Start(context.Background(), Config{Enabled: true, Protocol: "http/json"}, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("unknown protocol: %v", err)
	}
	for _, p := range []string{ProtocolGRPC, ProtocolHTTP} {
		tr, err := Start(context.Background(), Config{Endpoint: "http://127.0.0.1:1", Protocol: p}, nil)
		if err != nil || tr == nil {
			t.Fatalf("%s: %v", p, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing to export; do not wait for the dead endpoint
		_ = tr.Shutdown(ctx)
	}
}

func TestTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://c:4318":        "http://c:4318/v1/traces",
		"https://c/":           "https://c/v1/traces",
		"http://c:4318/custom": "http://c:4318/custom",
	} {
		if got, err := tracesURL(in); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", in, got, err, want)
		}
	}
	if _, err := tracesURL("c:4318"); err == nil {
		t.Error("a URL without scheme was accepted")
	}
}
