package test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

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
	sink := &logSink{}
	return startBrokerLog(t, slog.New(&captureHandler{sink: sink}), mutate...), sink
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

// logUser creates user "dev" (password "pw") with the permissions given
// on vhost "/".
func logUser(t *testing.T, b *broker, configure, write, read string) {
	t.Helper()
	us := b.n.Users()
	if err := us.PutUser("dev", "pw", nil); err != nil {
		t.Fatal(err)
	}
	if err := us.SetPermissions("dev", "/", configure, write, read); err != nil {
		t.Fatal(err)
	}
}

// TestLogMQTTSubscribeDenied: an MQTT connection's life and a denied
// SUBSCRIBE are logged with the user, vhost, client id, the topic and the
// permission; the denial is in the audit log too.
func TestLogMQTTSubscribeDenied(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.json")
	b, logs := startLoggedBroker(t, func(c *conf.Config) {
		c.MQTT.Listen = "127.0.0.1:0"
		c.Audit.File = file
	})
	logUser(t, b, ".*", ".*", ".*")
	if err := b.n.Users().SetTopicPermissions("dev", "/", "amq.topic", ".*", `^open\.`); err != nil {
		t.Fatal(err)
	}
	c := dial3(t, "tcp://"+b.n.MQTTAddr().String(), "sensor-7", true, func(o *mqtt3.ClientOptions) {
		o.SetUsername("dev").SetPassword("pw")
	})
	tok := c.Subscribe("secret/#", 1, nil)
	if !tok.WaitTimeout(5 * time.Second) {
		t.Fatal("no SUBACK")
	}
	if st, ok := tok.(*mqtt3.SubscribeToken); !ok || st.Result()["secret/#"] != 0x80 {
		t.Fatalf("subscribe to secret/# not refused: %v", tok.Error())
	}
	who := map[string]string{"proto": "mqtt", "user": "dev", "vhost": "/", "client_id": "sensor-7"}
	d := logs.waitLog(t, "authorization denied", who)
	if d.level != slog.LevelWarn || d.attrs["op"] != "subscribe" || d.attrs["topic"] != "secret/#" || d.attrs["perm"] != "read" ||
		d.attrs["kind"] != "topic" || d.attrs["resource"] != "amq.topic" || d.attrs["routing_key"] != "secret.#" {
		t.Errorf("denial record: %v", d)
	}
	waitFor(t, func() bool {
		return findAudit(readAudit(t, file), "authorization.denied", map[string]any{"user": "dev", "kind": "topic", "routing_key": "secret.#"}) != nil
	})
	c.Disconnect(50)
	closed := logs.waitLog(t, "connection closed", who)
	if closed.attrs["reason"] != "client disconnected" || closed.attrs["duration"] == "" || closed.attrs["peer"] == "" {
		t.Errorf("closed record: %v", closed)
	}
	if n, m := len(logs.find("connection accepted", map[string]string{"proto": "mqtt", "client_id": "sensor-7"})),
		len(logs.find("connection authenticated", who)); n != 1 || m != 1 {
		t.Errorf("%d accepted and %d authenticated records, want 1 each:\n%s", n, m, logs.dump())
	}
}

// TestLogSTOMPSendDenied: a STOMP connection's life and a denied SEND
// are logged with the user, vhost, destination, the resource and the
// permission; the denial is in the audit log too.
func TestLogSTOMPSendDenied(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.json")
	b, logs := startLoggedBroker(t, func(c *conf.Config) {
		c.STOMP.Listen = "127.0.0.1:0"
		c.Audit.File = file
	})
	logUser(t, b, ".*", "^orders$", ".*") // may write the queue, not the default exchange
	nc, err := net.Dial("tcp", b.n.STOMPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := stomp.Connect(nc, stomp.ConnOpt.Host("/"), stomp.ConnOpt.Login("dev", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	peer := nc.LocalAddr().String()
	if err := c.Send("/queue/orders", "text/plain", []byte("x"), stomp.SendOpt.Receipt); err == nil {
		t.Fatal("SEND without write on amq.default accepted")
	}
	who := map[string]string{"proto": "stomp", "user": "dev", "vhost": "/", "peer": peer}
	d := logs.waitLog(t, "authorization denied", who)
	if d.level != slog.LevelWarn || d.attrs["op"] != "SEND" || d.attrs["destination"] != "/queue/orders" ||
		d.attrs["perm"] != "write" || d.attrs["kind"] != "exchange" || d.attrs["resource"] != "amq.default" {
		t.Errorf("denial record: %v", d)
	}
	if rs := logs.find("STOMP error frame sent", map[string]string{"peer": peer}); len(rs) != 0 {
		t.Errorf("the denial is logged twice: %v", rs)
	}
	waitFor(t, func() bool {
		return findAudit(readAudit(t, file), "authorization.denied", map[string]any{"user": "dev", "kind": "exchange", "name": "amq.default"}) != nil
	})
	closed := logs.waitLog(t, "connection closed", who)
	if !strings.HasPrefix(closed.attrs["reason"], "error frame sent") || closed.attrs["duration"] == "" {
		t.Errorf("closed record: %v", closed)
	}
	if n, m := len(logs.find("connection accepted", map[string]string{"proto": "stomp", "peer": peer, "host": "/"})),
		len(logs.find("connection authenticated", map[string]string{"proto": "stomp", "peer": peer, "login": "dev"})); n != 1 || m != 1 {
		t.Errorf("%d accepted and %d authenticated records, want 1 each:\n%s", n, m, logs.dump())
	}
}

// TestLogLoginFailedOnceMQTTSTOMP: a refused MQTT or STOMP login is one
// record too (auth's), not one more from the front end.
func TestLogLoginFailedOnceMQTTSTOMP(t *testing.T) {
	b, logs := startLoggedBroker(t, func(c *conf.Config) {
		c.MQTT.Listen, c.STOMP.Listen = "127.0.0.1:0", "127.0.0.1:0"
	})
	logUser(t, b, ".*", ".*", ".*")
	if _, err := tryDial3("tcp://"+b.n.MQTTAddr().String(), "bad-login", true, func(o *mqtt3.ClientOptions) {
		o.SetUsername("dev").SetPassword("wrong")
	}); err == nil {
		t.Fatal("MQTT login with a wrong password accepted")
	}
	nc, err := net.Dial("tcp", b.n.STOMPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := stomp.Connect(nc, stomp.ConnOpt.Host("/"), stomp.ConnOpt.Login("dev", "wrong")); err == nil {
		t.Fatal("STOMP login with a wrong password accepted")
	}
	waitFor(t, func() bool { return len(logs.find("authentication failed", map[string]string{"user": "dev"})) == 2 })
	// Let both connections end: a later MQTT connection's whole life.
	c := dial3(t, "tcp://"+b.n.MQTTAddr().String(), "later", true, func(o *mqtt3.ClientOptions) {
		o.SetUsername("dev").SetPassword("pw")
	})
	c.Disconnect(50)
	logs.waitLog(t, "connection closed", map[string]string{"client_id": "later"})
	for _, msg := range []string{"connection refused", "STOMP error frame sent", "connection closed", "connection error"} {
		for _, r := range logs.find(msg, map[string]string{"user": "dev"}) {
			if r.attrs["client_id"] != "later" {
				t.Errorf("a refused login logged again: %v", r)
			}
		}
	}
}
