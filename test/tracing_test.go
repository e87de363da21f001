package test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/trident-broker/trident/conf"
)

// otlpReceiver is a collector's OTLP/HTTP traces endpoint, in process:
// it decodes every export request and keeps the spans.
type otlpReceiver struct {
	URL string

	mu       sync.Mutex
	requests int
	spans    []*tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a POST of application/x-protobuf to /v1/traces", http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var ex coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &ex)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&ex)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// add keeps the spans of one export request.
func (r *otlpReceiver) add(ex *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range ex.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
}

// grpcReceiver is the collector's OTLP/gRPC trace service over r.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	r *otlpReceiver
}

func (g grpcReceiver) Export(_ context.Context, ex *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.r.add(ex)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startOTLPGRPCReceiver is startOTLPReceiver speaking OTLP/gRPC.
func startOTLPGRPCReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcReceiver{r: r})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return r
}

// trace returns the spans of trace id seen so far.
func (r *otlpReceiver) trace(id []byte) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if bytes.Equal(s.TraceId, id) {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until trace id has n spans.
func (r *otlpReceiver) waitSpans(t *testing.T, id []byte, n int) []*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := r.trace(id)
		if len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %x: %d spans exported, want %d", id, len(s), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// spanAttrs returns s's attributes (strings, integers, booleans).
func spanAttrs(s *tracepb.Span) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = v.BoolValue
		}
	}
	return m
}

// traceparent parses a W3C traceparent into trace id and span id.
func traceparent(t *testing.T, v string) (trace, span []byte) {
	t.Helper()
	p := strings.Split(v, "-")
	if len(p) != 4 || p[0] != "00" || len(p[1]) != 32 || len(p[2]) != 16 {
		t.Fatalf("traceparent %q is malformed", v)
	}
	trace, _ = hex.DecodeString(p[1])
	span, _ = hex.DecodeString(p[2])
	return trace, span
}

// tracedBroker starts a broker with AMQP, MQTT and STOMP whose spans go
// out in batches every 100 ms.
func tracedBroker(t *testing.T, mutate ...func(*conf.Config)) *broker {
	t.Helper()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	return startBroker(t, append([]func(*conf.Config){func(c *conf.Config) {
		c.MQTT.Listen, c.STOMP.Listen = "127.0.0.1:0", "127.0.0.1:0"
		anonMQTT(c)
	}}, mutate...)...)
}

// tracedSubscribers subscribes an MQTT 5 client to trace/# and a STOMP
// client to /topic/trace.#, ready to receive.
func tracedSubscribers(t *testing.T, b *broker) (*client5, *stomp.Subscription) {
	t.Helper()
	m, _ := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "trace-sub", CleanStart: true})
	m.subscribe(t, paho.SubscribeOptions{Topic: "trace/#", QoS: 1})
	st := stDial(t, b, stomp.ConnOpt.AcceptVersion(stomp.V12))
	sub, err := st.Subscribe("/topic/trace.#", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	stSync(t, st)
	return m, sub
}

const (
	inTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	inSpan   = "00f067aa0ba902b7"
	inParent = "00-" + inTrace + "-" + inSpan + "-01"
	inState  = "vendor=opaque"
)

// TestTracingAMQPToMQTTAndSTOMP follows one trace from an AMQP publisher
// with a traceparent header through the broker to an MQTT 5 and a STOMP
// subscriber, and checks what the broker exported over OTLP/HTTP to an
// in-process receiver: a server span for the publish, a child of the
// publisher's span, and one producer span per delivery, children of and
// linked to the publish span, whose context the subscribers got.
func TestTracingAMQPToMQTTAndSTOMP(t *testing.T) {
	rcv := startOTLPReceiver(t)
	b := tracedBroker(t, func(c *conf.Config) {
		c.Tracing.Enabled, c.Tracing.Endpoint = true, rcv.URL
	})
	m, sub := tracedSubscribers(t, b)
	_, ch := channel(t, b.URL)
	if err := ch.PublishWithContext(context.Background(), "amq.topic", "trace.a", false, false, amqp.Publishing{
		Body: []byte("hello"), MessageId: "m-1", Headers: amqp.Table{"traceparent": inParent, "tracestate": inState, "k": "v"}}); err != nil {
		t.Fatal(err)
	}
	wantTrace, _ := hex.DecodeString(inTrace)
	wantParent, _ := hex.DecodeString(inSpan)

	mp := m.receive(t)
	mqttTP := mp.Properties.User.Get("traceparent")
	mTrace, mSpan := traceparent(t, mqttTP)
	if !bytes.Equal(mTrace, wantTrace) || bytes.Equal(mSpan, wantParent) {
		t.Fatalf("MQTT 5 subscriber got traceparent %q: want trace %s continued by the broker's span", mqttTP, inTrace)
	}
	if ts, k := mp.Properties.User.Get("tracestate"), mp.Properties.User.Get("k"); ts != inState || k != "v" {
		t.Fatalf("MQTT 5 subscriber: tracestate %q, k %q", ts, k)
	}
	sm := stRecv(t, sub)
	stTP := sm.Header.Get("traceparent")
	if stTP != mqttTP || sm.Header.Get("tracestate") != inState {
		t.Fatalf("STOMP subscriber got traceparent %q tracestate %q; MQTT got %q", stTP, sm.Header.Get("tracestate"), mqttTP)
	}

	spans := rcv.waitSpans(t, wantTrace, 3)
	var pub *tracepb.Span
	var delivers []*tracepb.Span
	for _, s := range spans {
		switch s.Kind {
		case tracepb.Span_SPAN_KIND_SERVER:
			pub = s
		case tracepb.Span_SPAN_KIND_PRODUCER:
			delivers = append(delivers, s)
		}
	}
	if pub == nil || len(delivers) != 2 || len(spans) != 3 {
		t.Fatalf("spans of the trace: %v", spans)
	}
	if !bytes.Equal(pub.ParentSpanId, wantParent) || !bytes.Equal(pub.SpanId, mSpan) || pub.Name != "publish amq.topic" || pub.TraceState != inState {
		t.Fatalf("publish span %q: parent %x (want %s), id %x (the subscribers got %x), tracestate %q",
			pub.Name, pub.ParentSpanId, inSpan, pub.SpanId, mSpan, pub.TraceState)
	}
	a := spanAttrs(pub)
	for k, v := range map[string]any{"messaging.system": "trident", "messaging.operation.name": "publish", "messaging.operation.type": "send",
		"messaging.destination.name": "amq.topic", "messaging.rabbitmq.destination.routing_key": "trace.a", "messaging.message.id": "m-1",
		"network.protocol.name": "amqp", "network.protocol.version": "0.9.1", "messaging.message.body.size": int64(5), "trident.routed_queues": int64(2)} {
		if a[k] != v {
			t.Errorf("publish span: %s = %v, want %v", k, a[k], v)
		}
	}
	protos := map[string]bool{}
	for _, d := range delivers {
		a := spanAttrs(d)
		if !bytes.Equal(d.ParentSpanId, pub.SpanId) || len(d.Links) != 1 || !bytes.Equal(d.Links[0].SpanId, pub.SpanId) ||
			!bytes.Equal(d.Links[0].TraceId, wantTrace) {
			t.Errorf("deliver span %q: parent %x, links %v; want child of and link to %x", d.Name, d.ParentSpanId, d.Links, pub.SpanId)
		}
		q, _ := a["messaging.destination.name"].(string)
		if d.Name != "deliver "+q || q == "" || a["messaging.operation.name"] != "deliver" || a["messaging.rabbitmq.destination.routing_key"] != "trace.a" ||
			a["messaging.message.id"] != "m-1" || a["trident.exchange"] != "amq.topic" {
			t.Errorf("deliver span %q: attributes %v", d.Name, a)
		}
		protos[a["network.protocol.name"].(string)+" "+a["network.protocol.version"].(string)] = true
	}
	if !protos["mqtt 5"] || !protos["stomp 1.2"] {
		t.Errorf("deliver spans by protocol: %v, want mqtt 5 and stomp 1.2", protos)
	}
}

// TestTracingFromEnvironment turns tracing on with the standard
// OTEL_EXPORTER_OTLP_ENDPOINT alone: STOMP and MQTT 5 publishers' traces
// reach an AMQP consumer, and a traceparent that is not sampled passes
// through unchanged with no span.
func TestTracingFromEnvironment(t *testing.T) {
	rcv := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	b := tracedBroker(t)
	_, ch := channel(t, b.URL)
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	if err := ch.QueueBind(q.Name, "env.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := stDial(t, b, stomp.ConnOpt.AcceptVersion(stomp.V12))
	m, _ := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "trace-pub", CleanStart: true})
	for _, tc := range []struct {
		proto, trace string
		publish      func(tp string)
	}{
		{"stomp", "0af7651916cd43dd8448eb211c80319c", func(tp string) {
			if err := st.Send("/topic/env.s", "text/plain", []byte("s"), stomp.SendOpt.Header("traceparent", tp)); err != nil {
				t.Fatal(err)
			}
		}},
		{"mqtt", "1af7651916cd43dd8448eb211c80319c", func(tp string) {
			m.publish(t, &paho.Publish{Topic: "env/m", QoS: 1, Payload: []byte("m"),
				Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "traceparent", Value: tp}}}})
		}},
	} {
		tc.publish("00-" + tc.trace + "-" + inSpan + "-01")
		d := receive(t, ds)
		tp, _ := d.Headers["traceparent"].(string)
		gotTrace, gotSpan := traceparent(t, tp)
		wantTrace, _ := hex.DecodeString(tc.trace)
		if !bytes.Equal(gotTrace, wantTrace) {
			t.Fatalf("%s: AMQP consumer got traceparent %q, want trace %s", tc.proto, tp, tc.trace)
		}
		var pub *tracepb.Span
		for _, s := range rcv.waitSpans(t, wantTrace, 2) {
			if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				pub = s
			}
		}
		if pub == nil || !bytes.Equal(pub.SpanId, gotSpan) || spanAttrs(pub)["network.protocol.name"] != tc.proto {
			t.Fatalf("%s: publish span %v; the consumer got span %x", tc.proto, pub, gotSpan)
		}
	}
	// Not sampled: passed on as it came, no span.
	const unsampledTrace = "2af7651916cd43dd8448eb211c80319c"
	unsampled := "00-" + unsampledTrace + "-" + inSpan + "-00"
	if err := st.Send("/topic/env.u", "text/plain", []byte("u"), stomp.SendOpt.Header("traceparent", unsampled)); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, ds); d.Headers["traceparent"] != unsampled {
		t.Fatalf("unsampled traceparent became %v", d.Headers["traceparent"])
	}
	b.stop() // flushes what the broker buffered
	id, _ := hex.DecodeString(unsampledTrace)
	if s := rcv.trace(id); len(s) != 0 {
		t.Fatalf("spans of an unsampled trace were exported: %v", s)
	}
}

// TestTracingOff checks that with tracing off (no tracing.* key, and the
// OTEL endpoint variable overruled by OTEL_SDK_DISABLED) nothing is
// exported and the W3C headers reach every subscriber as they were sent.
func TestTracingOff(t *testing.T) {
	rcv := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_SDK_DISABLED", "true")
	b := tracedBroker(t)
	m, sub := tracedSubscribers(t, b)
	_, ch := channel(t, b.URL)
	if err := ch.PublishWithContext(context.Background(), "amq.topic", "trace.off", false, false, amqp.Publishing{
		Body: []byte("x"), Headers: amqp.Table{"traceparent": inParent, "tracestate": inState}}); err != nil {
		t.Fatal(err)
	}
	mp := m.receive(t)
	if tp, ts := mp.Properties.User.Get("traceparent"), mp.Properties.User.Get("tracestate"); tp != inParent || ts != inState {
		t.Fatalf("MQTT 5 subscriber got traceparent %q tracestate %q", tp, ts)
	}
	sm := stRecv(t, sub)
	if tp, ts := sm.Header.Get("traceparent"), sm.Header.Get("tracestate"); tp != inParent || ts != inState {
		t.Fatalf("STOMP subscriber got traceparent %q tracestate %q", tp, ts)
	}
	b.stop()
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.requests != 0 || len(rcv.spans) != 0 {
		t.Fatalf("tracing off exported %d requests, %d spans", rcv.requests, len(rcv.spans))
	}
}

// TestTracingOverGRPC exports to an OTLP/gRPC receiver (tracing.protocol
// grpc): an AMQP publish with a traceparent and its delivery to an AMQP
// consumer.
func TestTracingOverGRPC(t *testing.T) {
	rcv := startOTLPGRPCReceiver(t)
	b := tracedBroker(t, func(c *conf.Config) {
		c.Tracing.Endpoint, c.Tracing.Protocol = rcv.URL, "grpc"
	})
	_, ch := channel(t, b.URL)
	q, _ := ch.QueueDeclare("traced", false, true, false, false, nil)
	ds, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{
		Body: []byte("g"), Headers: amqp.Table{"traceparent": inParent}}); err != nil {
		t.Fatal(err)
	}
	tp, _ := receive(t, ds).Headers["traceparent"].(string)
	_, gotSpan := traceparent(t, tp)
	wantTrace, _ := hex.DecodeString(inTrace)
	byKind := map[tracepb.Span_SpanKind]*tracepb.Span{}
	for _, s := range rcv.waitSpans(t, wantTrace, 2) {
		byKind[s.Kind] = s
	}
	pub, del := byKind[tracepb.Span_SPAN_KIND_SERVER], byKind[tracepb.Span_SPAN_KIND_PRODUCER]
	if pub == nil || del == nil || pub.Name != "publish" || !bytes.Equal(pub.SpanId, gotSpan) ||
		del.Name != "deliver traced" || !bytes.Equal(del.ParentSpanId, pub.SpanId) {
		t.Fatalf("spans over gRPC: publish %v deliver %v; consumer got span %x", pub, del, gotSpan)
	}
}
