package test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/cmd/trident/node"
	"github.com/trident-broker/trident/conf"
)

// The operator's log (issue 39): connections accepted, authenticated and
// closed on every protocol, channel and connection errors with their
// code, authorization denials, each failed login once. The node logs into
// a capturing slog handler; clients are the real ones.

// logRec is one captured record, its attributes (the logger's and the
// record's) as strings.
type logRec struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r logRec) String() string { return fmt.Sprintf("%s %q %v", r.level, r.msg, r.attrs) }

type logSink struct {
	mu   sync.Mutex
	recs []logRec
}

// find returns the records with message msg whose attributes include want.
func (s *logSink) find(msg string, want map[string]string) []logRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logRec
next:
	for _, r := range s.recs {
		if r.msg != msg {
			continue
		}
		for k, v := range want {
			if r.attrs[k] != v {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

func (s *logSink) dump() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, r := range s.recs {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// waitLog waits for at least one record matching msg and want.
func (s *logSink) waitLog(t *testing.T, msg string, want map[string]string) logRec {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if rs := s.find(msg, want); len(rs) > 0 {
			return rs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q record with %v in:\n%s", msg, want, s.dump())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// captureHandler is a slog.Handler recording into a logSink, at INFO and up.
type captureHandler struct {
	sink  *logSink
	attrs []slog.Attr
}

func (h *captureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.sink.mu.Lock()
	h.sink.recs = append(h.sink.recs, rec)
	h.sink.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{sink: h.sink, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

// startLoggedBroker is startBroker with the node's log captured.
func startLoggedBroker(t *testing.T, mutate ...func(*conf.Config)) (*broker, *logSink) {
	t.Helper()
	cfg := conf.Default()
	cfg.DataDir = t.TempDir()
	cfg.AMQP.Listen = "127.0.0.1:0"
	cfg.MQTT.Listen, cfg.MQTT.WSListen = "", ""
	cfg.STOMP.Listen, cfg.STOMP.WSListen = "", ""
	cfg.HTTP.Listen, cfg.Prometheus.Listen = "", ""
	for _, m := range mutate {
		m(&cfg)
	}
	sink := &logSink{}
	n, err := node.Start(cfg, slog.New(&captureHandler{sink: sink}))
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	b := &broker{t: t, cfg: cfg, n: n, Addr: n.AMQPAddr().String()}
	b.URL = fmt.Sprintf("amqp://guest:guest@%s/", b.Addr)
	t.Cleanup(b.stop)
	return b, sink
}

// TestLogAMQPConnectionLifecycle: an AMQP connection opened and closed is
// one "connection accepted", one "connection authenticated" and one
// "connection closed" record, with the user, vhost, protocol, peer
// address, client-provided name, and on close the reason and duration.
func TestLogAMQPConnectionLifecycle(t *testing.T) {
	b, logs := startLoggedBroker(t)
	c, err := amqp.DialConfig(b.URL, amqp.Config{Properties: amqp.Table{"connection_name": "orders-service"}})
	if err != nil {
		t.Fatal(err)
	}
	peer := c.LocalAddr().String()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed := logs.waitLog(t, "connection closed", map[string]string{"peer": peer})
	acc := logs.find("connection accepted", map[string]string{"peer": peer, "proto": "amqp"})
	who := map[string]string{"peer": peer, "proto": "amqp", "user": "guest", "vhost": "/", "client": "orders-service"}
	authn := logs.find("connection authenticated", who)
	if len(acc) != 1 || len(authn) != 1 || len(logs.find("connection closed", map[string]string{"peer": peer})) != 1 {
		t.Fatalf("want one accepted, authenticated and closed record for %s:\n%s", peer, logs.dump())
	}
	for k, v := range who {
		if closed.attrs[k] != v {
			t.Errorf("closed record %s=%q, want %q: %v", k, closed.attrs[k], v, closed)
		}
	}
	if closed.level != slog.LevelInfo || authn[0].level != slog.LevelInfo || acc[0].level != slog.LevelInfo {
		t.Errorf("lifecycle records not at INFO:\n%s", logs.dump())
	}
	if closed.attrs["reason"] != "client closed" || closed.attrs["duration"] == "" {
		t.Errorf("closed record without reason or duration: %v", closed)
	}
	// A connection the broker closes says so, with the code.
	c2 := dial(t, b.URL)
	peer2 := c2.LocalAddr().String()
	b.stop()
	r := logs.waitLog(t, "connection closed", map[string]string{"peer": peer2})
	if r.attrs["reason"] != "closed by the broker" || r.attrs["code"] != "320" || !strings.Contains(r.attrs["text"], "shutdown") {
		t.Errorf("shutdown close record: %v", r)
	}
}

// TestLogAMQPChannelError: a channel error is logged at WARN with its
// reply code, text, the method and the connection's user.
func TestLogAMQPChannelError(t *testing.T) {
	b, logs := startLoggedBroker(t)
	c, ch := channel(t, b.URL)
	peer := c.LocalAddr().String()
	if _, err := ch.QueueDeclarePassive("no-such-queue", false, false, false, false, nil); amqpCode(err) != 404 {
		t.Fatalf("passive declare: %v", err)
	}
	r := logs.waitLog(t, "channel error", map[string]string{"peer": peer})
	if r.level != slog.LevelWarn || r.attrs["code"] != "404" || r.attrs["method"] != "queue.declare" ||
		r.attrs["user"] != "guest" || r.attrs["vhost"] != "/" || !strings.Contains(r.attrs["text"], "no-such-queue") {
		t.Errorf("channel error record: %v", r)
	}
}

// TestLogAMQPLoginFailedOnce: a refused AMQP login is one record.
func TestLogAMQPLoginFailedOnce(t *testing.T) {
	b, logs := startLoggedBroker(t)
	if _, err := amqp.Dial(fmt.Sprintf("amqp://guest:wrong@%s/", b.Addr)); err == nil {
		t.Fatal("login with a wrong password accepted")
	}
	logs.waitLog(t, "authentication failed", map[string]string{"user": "guest"})
	// The connection's own end comes after the client has gone: wait
	// for a later connection's whole life, then count.
	c := dial(t, b.URL)
	peer := c.LocalAddr().String()
	c.Close()
	logs.waitLog(t, "connection closed", map[string]string{"peer": peer})
	var about []logRec
	logs.mu.Lock()
	for _, r := range logs.recs {
		switch r.msg {
		case "authentication failed", "connection refused", "connection error", "connection closed":
		default:
			continue
		}
		if r.attrs["peer"] != peer {
			about = append(about, r)
		}
	}
	logs.mu.Unlock()
	if len(about) != 1 || about[0].msg != "authentication failed" || about[0].level != slog.LevelWarn {
		t.Errorf("want one WARN authentication failed record, got %v\nall:\n%s", about, logs.dump())
	}
}
