package test

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	amqp10 "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// Tests of RabbitMQ's stream protocol (port 5552) with the real
// rabbitmq-stream-go-client.

// streamBroker starts a broker with the stream listener on a free port and
// returns it with the listener's address.
func streamBroker(t *testing.T, mutate ...func(*conf.Config)) (*broker, *net.TCPAddr) {
	t.Helper()
	b := startBroker(t, append([]func(*conf.Config){func(c *conf.Config) { c.Stream.Listen = "127.0.0.1:0" }}, mutate...)...)
	a := b.n.StreamAddr()
	if a == nil {
		t.Fatal("no stream listener")
	}
	return b, a.(*net.TCPAddr)
}

// streamEnv opens a client environment (closed at the test's end).
func streamEnv(t *testing.T, addr *net.TCPAddr, user, pass string) *stream.Environment {
	t.Helper()
	env, err := streamEnvErr(addr, user, pass)
	if err != nil {
		t.Fatalf("stream environment: %v", err)
	}
	t.Cleanup(func() { _ = env.Close() })
	return env
}

func streamEnvErr(addr *net.TCPAddr, user, pass string) (*stream.Environment, error) {
	return stream.NewEnvironment(stream.NewEnvironmentOptions().SetHost(addr.IP.String()).SetPort(addr.Port).
		SetUser(user).SetPassword(pass).SetRPCTimeout(20 * time.Second))
}

// publishConfirmed publishes n messages body-0 … body-(n-1) in batches and
// waits until every one is confirmed.
func spPublishConfirmed(t *testing.T, env *stream.Environment, name string, from, n int) {
	t.Helper()
	p, err := env.NewProducer(name, stream.NewProducerOptions())
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	defer p.Close()
	confirms := p.NotifyPublishConfirmation()
	done := make(chan error, 1)
	go func() {
		got := 0
		for got < n {
			select {
			case cs, ok := <-confirms:
				if !ok {
					done <- fmt.Errorf("confirm channel closed after %d", got)
					return
				}
				for _, c := range cs {
					if !c.IsConfirmed() {
						done <- fmt.Errorf("message %d not confirmed: %v", c.GetPublishingId(), c.GetError())
						return
					}
					got++
				}
			case <-time.After(60 * time.Second):
				done <- fmt.Errorf("%d of %d confirmed", got, n)
				return
			}
		}
		done <- nil
	}()
	batch := make([]message.StreamMessage, 0, 100)
	for i := from; i < from+n; i++ {
		batch = append(batch, amqp10.NewMessage([]byte("body-"+strconv.Itoa(i))))
		if len(batch) == cap(batch) || i == from+n-1 {
			if err := p.BatchSend(batch); err != nil {
				t.Fatalf("BatchSend: %v", err)
			}
			batch = batch[:0]
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// consumed collects what a consumer receives.
type spConsumed struct {
	mu      sync.Mutex
	offsets []int64
	bodies  []string
	msgs    []*amqp10.Message
}

func (c *spConsumed) handler(ctx stream.ConsumerContext, m *amqp10.Message) {
	c.mu.Lock()
	c.offsets = append(c.offsets, ctx.Consumer.GetOffset())
	c.bodies = append(c.bodies, string(m.GetData()))
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
}

func (c *spConsumed) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.bodies)
		c.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func spConsume(t *testing.T, env *stream.Environment, name string, off stream.OffsetSpecification) *spConsumed {
	t.Helper()
	c := &spConsumed{}
	cons, err := env.NewConsumer(name, c.handler, stream.NewConsumerOptions().SetOffset(off).SetCRCCheck(true))
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	t.Cleanup(func() { _ = cons.Close() })
	return c
}

// TestStreamProtocolPublishConsume: a stream created over the protocol
// takes 10,000 confirmed messages, which consumers read from first, from
// an offset and (only the new ones) from next; offsets are stored and
// queried; stats give the bounds.
func TestStreamProtocolPublishConsume(t *testing.T) {
	_, addr := streamBroker(t)
	env := streamEnv(t, addr, "guest", "guest")
	const name, n = "sp-events", 10000
	if err := env.DeclareStream(name, &stream.StreamOptions{MaxLengthBytes: stream.ByteCapacity{}.GB(1),
		MaxAge: time.Hour, MaxSegmentSizeBytes: stream.ByteCapacity{}.MB(4)}); err != nil {
		t.Fatalf("DeclareStream: %v", err)
	}
	// Declaring it again is "already exists", which the client accepts.
	if err := env.DeclareStream(name, nil); err != nil {
		t.Fatalf("DeclareStream again: %v", err)
	}
	spPublishConfirmed(t, env, name, 0, n)

	first := spConsume(t, env, name, stream.OffsetSpecification{}.First())
	first.wait(t, n)
	first.mu.Lock()
	for i := 0; i < n; i++ {
		if first.offsets[i] != int64(i) || first.bodies[i] != "body-"+strconv.Itoa(i) {
			first.mu.Unlock()
			t.Fatalf("message %d: offset %d body %q", i, first.offsets[i], first.bodies[i])
		}
	}
	first.mu.Unlock()

	at := spConsume(t, env, name, stream.OffsetSpecification{}.Offset(7500))
	at.wait(t, n-7500)
	at.mu.Lock()
	if at.offsets[0] != 7500 || at.bodies[0] != "body-7500" || at.bodies[len(at.bodies)-1] != "body-9999" {
		t.Fatalf("from offset 7500: first %d %q, last %q", at.offsets[0], at.bodies[0], at.bodies[len(at.bodies)-1])
	}
	at.mu.Unlock()

	next := spConsume(t, env, name, stream.OffsetSpecification{}.Next())
	time.Sleep(300 * time.Millisecond) // subscribed before the next publish
	spPublishConfirmed(t, env, name, n, 10)
	next.wait(t, 10)
	time.Sleep(200 * time.Millisecond)
	next.mu.Lock()
	if len(next.bodies) != 10 || next.bodies[0] != "body-10000" || next.offsets[0] != n {
		t.Fatalf("from next: %d messages, first %v at %v", len(next.bodies), next.bodies[:1], next.offsets[:1])
	}
	next.mu.Unlock()

	last := spConsume(t, env, name, stream.OffsetSpecification{}.Last())
	last.wait(t, 1)
	last.mu.Lock()
	if last.bodies[0] != "body-10009" {
		t.Fatalf("from last: %q", last.bodies[0])
	}
	last.mu.Unlock()

	ts := spConsume(t, env, name, stream.OffsetSpecification{}.Timestamp(time.Now().Add(-time.Hour).UnixMilli()))
	ts.wait(t, n+10)

	// Stored offsets.
	if _, err := env.QueryOffset("reader-1", name); !errors.Is(err, stream.OffsetNotFoundError) {
		t.Fatalf("QueryOffset before any store: %v", err)
	}
	if err := env.StoreOffset("reader-1", name, 1234); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		off, err := env.QueryOffset("reader-1", name)
		if err == nil && off == 1234 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("QueryOffset = %d, %v; want 1234", off, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	stats, err := env.StreamStats(name)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := stats.FirstOffset(); err != nil || f != 0 {
		t.Fatalf("first offset %d, %v", f, err)
	}
	if l, err := stats.CommittedChunkId(); err != nil || l != n+9 {
		t.Fatalf("committed chunk id %d, %v", l, err)
	}

	if err := env.DeleteStream(name); err != nil {
		t.Fatal(err)
	}
	if ok, err := env.StreamExists(name); err != nil || ok {
		t.Fatalf("stream exists after delete: %v %v", ok, err)
	}
}

// TestStreamProtocolAMQPInterop: one core. What AMQP publishes to a stream
// a stream-protocol consumer reads (body, properties, headers), and what
// the stream protocol publishes an AMQP stream consumer reads, stored
// offsets included.
func TestStreamProtocolAMQPInterop(t *testing.T) {
	b, addr := streamBroker(t)
	env := streamEnv(t, addr, "guest", "guest")
	const name = "sp-interop"
	if err := env.DeclareStream(name, nil); err != nil {
		t.Fatal(err)
	}
	_, ch := channel(t, b.URL)
	// AMQP sees the stream the protocol created; declaring it is equivalent.
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
		t.Fatalf("AMQP declare of the stream: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	err := ch.Publish("", name, false, false, amqp.Publishing{Body: []byte("from-amqp"), MessageId: "m-1",
		ContentType: "text/plain", Headers: amqp.Table{"color": "blue"}, DeliveryMode: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c := <-confirms; !c.Ack {
		t.Fatal("AMQP publish nacked")
	}
	got := spConsume(t, env, name, stream.OffsetSpecification{}.First())
	got.wait(t, 1)
	got.mu.Lock()
	m := got.msgs[0]
	if string(m.GetData()) != "from-amqp" || m.Properties == nil || m.Properties.MessageID != "m-1" ||
		m.Properties.ContentType != "text/plain" || m.ApplicationProperties["color"] != "blue" {
		got.mu.Unlock()
		t.Fatalf("stream consumer read %q %+v %v", m.GetData(), m.Properties, m.ApplicationProperties)
	}
	got.mu.Unlock()

	// The other way: a stream-protocol message with properties.
	p, err := env.NewProducer(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := p.NotifyPublishConfirmation()
	sm := amqp10.NewMessage([]byte("from-stream"))
	sm.Properties = &amqp10.MessageProperties{MessageID: "s-1", CorrelationID: "corr", ContentType: "application/json"}
	sm.ApplicationProperties = map[string]any{"size": int64(3)}
	if err := p.Send(sm); err != nil {
		t.Fatal(err)
	}
	select {
	case cs := <-pc:
		if !cs[0].IsConfirmed() {
			t.Fatal("stream publish not confirmed")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no confirm")
	}
	_ = p.Close()
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(name, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := receive(t, ds), receive(t, ds)
	if string(d0.Body) != "from-amqp" || string(d1.Body) != "from-stream" || d1.MessageId != "s-1" ||
		d1.CorrelationId != "corr" || d1.ContentType != "application/json" || d1.Headers["size"] != int64(3) ||
		d1.Headers["x-stream-offset"] != int64(1) {
		t.Fatalf("AMQP consumer read %q, then %q %q %q %q %v", d0.Body, d1.Body, d1.MessageId, d1.CorrelationId, d1.ContentType, d1.Headers)
	}
}

// TestStreamProtocolPermissions: create needs configure, a publisher
// write, a consumer read, each refused with access refused (0x10) as
// RabbitMQ does; a vhost without access is refused at open.
func TestStreamProtocolPermissions(t *testing.T) {
	b, addr := streamBroker(t)
	us := b.n.Users()
	for _, u := range []struct{ name, conf, write, read string }{
		{"sp-none", "^$", "^$", "^$"},
		{"sp-reader", "^$", "^$", ".*"},
	} {
		if err := us.PutUser(u.name, "pw", nil); err != nil {
			t.Fatal(err)
		}
		if err := us.SetPermissions(u.name, "/", u.conf, u.write, u.read); err != nil {
			t.Fatal(err)
		}
	}
	admin := streamEnv(t, addr, "guest", "guest")
	if err := admin.DeclareStream("sp-perm", nil); err != nil {
		t.Fatal(err)
	}
	spPublishConfirmed(t, admin, "sp-perm", 0, 3)

	none := streamEnv(t, addr, "sp-none", "pw")
	if err := none.DeclareStream("sp-other", nil); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("create without configure: %v, want access refused", err)
	}
	if err := none.DeleteStream("sp-perm"); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("delete without configure: %v, want access refused", err)
	}
	if _, err := none.NewProducer("sp-perm", nil); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("publisher without write: %v, want access refused", err)
	}
	if _, err := none.NewConsumer("sp-perm", func(stream.ConsumerContext, *amqp10.Message) {}, nil); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("consumer without read: %v, want access refused", err)
	}
	if _, err := none.QueryOffset("x", "sp-perm"); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("query offset without read: %v, want access refused", err)
	}

	reader := streamEnv(t, addr, "sp-reader", "pw")
	if _, err := reader.NewProducer("sp-perm", nil); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("reader's publisher: %v, want access refused", err)
	}
	got := spConsume(t, reader, "sp-perm", stream.OffsetSpecification{}.First())
	got.wait(t, 3)

	// Wrong password; a vhost the user may not open.
	if _, err := streamEnvErr(addr, "sp-reader", "wrong"); err == nil {
		t.Fatal("wrong password accepted")
	}
	if err := b.n.Broker().EnsureVHost("sp-private"); err != nil {
		t.Fatal(err)
	}
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetHost(addr.IP.String()).SetPort(addr.Port).
		SetUser("sp-reader").SetPassword("pw").SetVHost("sp-private"))
	if err == nil {
		_ = env.Close()
		t.Fatal("vhost without access opened")
	}
}

// TestStreamProtocolSurvivesKill: confirmed messages are on disk: after
// kill -9 and a restart a consumer reads every one.
func TestStreamProtocolSurvivesKill(t *testing.T) {
	port, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	p := testbin.Start(t, "--stream-listen", addr.String())
	env, err := streamEnvErr(addr, "guest", "guest")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.DeclareStream("sp-crash", nil); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	spPublishConfirmed(t, env, "sp-crash", 0, n)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = env.Close()
	p.Restart()

	env = streamEnv(t, addr, "guest", "guest")
	got := spConsume(t, env, "sp-crash", stream.OffsetSpecification{}.First())
	got.wait(t, n)
	got.mu.Lock()
	defer got.mu.Unlock()
	for i := 0; i < n; i++ {
		if got.bodies[i] != "body-"+strconv.Itoa(i) {
			t.Fatalf("after kill -9, message %d is %q", i, got.bodies[i])
		}
	}
}

// readStreamFrame reads one frame off a raw connection.
func readStreamFrame(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		t.Fatalf("no frame: %v", err)
	}
	p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(nc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// expectClose reads a Close request with code and then the end of the
// connection.
func expectClose(t *testing.T, nc net.Conn, code uint16) {
	t.Helper()
	p := readStreamFrame(t, nc)
	if len(p) < 10 || binary.BigEndian.Uint16(p) != 0x0016 || binary.BigEndian.Uint16(p[8:]) != code {
		t.Fatalf("got frame %x, want a close with code %#x", p, code)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := nc.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Fatalf("connection still open after the close: %v", err)
	}
}

// TestStreamProtocolBadFrames: garbage and an oversized frame before
// authentication get a Close with the protocol's code (unknown frame,
// frame too large) without the server reading the body; the broker
// serves on.
func TestStreamProtocolBadFrames(t *testing.T) {
	b, addr := streamBroker(t)
	dial := func() net.Conn {
		nc, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}

	// A frame of 1 GiB announced before authentication: refused on its
	// size alone (the bound before open is 8 KiB).
	nc := dial()
	if _, err := nc.Write([]byte{0x40, 0, 0, 0, 0x00, 0x11, 0x00, 0x01}); err != nil {
		t.Fatal(err)
	}
	expectClose(t, nc, 0x0e)

	// 9 KiB of peer properties: over the pre-auth bound too.
	nc = dial()
	big := make([]byte, 4+9<<10)
	binary.BigEndian.PutUint32(big, 9<<10)
	copy(big[4:], []byte{0x00, 0x11, 0x00, 0x01})
	if _, err := nc.Write(big); err != nil {
		t.Fatal(err)
	}
	expectClose(t, nc, 0x0e)

	// Garbage that fits: an unknown command key.
	nc = dial()
	if _, err := nc.Write([]byte{0, 0, 0, 8, 0x7e, 0x7e, 0, 1, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	expectClose(t, nc, 0x0d)

	// A known command whose fields run past its frame.
	nc = dial()
	if _, err := nc.Write([]byte{0, 0, 0, 10, 0x00, 0x11, 0x00, 0x01, 0, 0, 0, 1, 0x7f, 0xff}); err != nil {
		t.Fatal(err)
	}
	expectClose(t, nc, 0x0d)

	// A frame too short to hold a key.
	nc = dial()
	if _, err := nc.Write([]byte{0, 0, 0, 1, 0xff}); err != nil {
		t.Fatal(err)
	}
	expectClose(t, nc, 0x0d)

	// After open: a frame over the negotiated frame max (1 MiB) gets
	// frame too large, an unknown command unknown frame.
	nc = dial()
	r := &rawStream{t: t, nc: nc}
	r.open()
	if _, err := nc.Write([]byte{0, 0x20, 0, 0, 0x00, 0x02, 0x00, 0x01}); err != nil {
		t.Fatal(err)
	}
	expectClose(t, nc, 0x0e)
	nc = dial()
	r = &rawStream{t: t, nc: nc}
	r.open()
	r.send(0x0777, uint32(9))
	expectClose(t, nc, 0x0d)

	// The broker is fine: a client works.
	env := streamEnv(t, addr, "guest", "guest")
	if err := env.DeclareStream("sp-bad", nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := env.StreamExists("sp-bad"); err != nil || !ok {
		t.Fatalf("StreamExists: %v %v", ok, err)
	}
	_ = b
}

// TestStreamProtocolTLSExternal: the TLS listener serves the protocol,
// with a password or with SASL EXTERNAL as the user a verified client
// certificate names; EXTERNAL without a certificate is refused.
func TestStreamProtocolTLSExternal(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p, func(c *conf.Config) { c.Stream.TLSListen = "127.0.0.1:0" })
	addUser(t, b, "alice", "")
	addr := b.n.StreamTLSAddr().(*net.TCPAddr)
	open := func(user, pass, mech string, cfg *tls.Config) (*stream.Environment, error) {
		o := stream.NewEnvironmentOptions().SetHost("localhost").SetPort(addr.Port).SetUser(user).SetPassword(pass).
			SetTLSConfig(cfg).IsTLS(true).SetRPCTimeout(20 * time.Second)
		if mech != "" {
			o.SetSaslConfiguration(mech)
		}
		return stream.NewEnvironment(o)
	}
	env, err := open("guest", "guest", "", p.client())
	if err != nil {
		t.Fatalf("TLS with a password: %v", err)
	}
	defer env.Close()
	if err := env.DeclareStream("sp-tls", nil); err != nil {
		t.Fatal(err)
	}
	spPublishConfirmed(t, env, "sp-tls", 0, 10)

	ext, err := open("", "", "EXTERNAL", p.client(p.clientCert("alice", nil, nil)))
	if err != nil {
		t.Fatalf("EXTERNAL with CN=alice: %v", err)
	}
	defer ext.Close()
	got := spConsume(t, ext, "sp-tls", stream.OffsetSpecification{}.First())
	got.wait(t, 10)
	// The management API lists the connection, as its certificate's user.
	if users := connectionUsers(t, b, p, "stream"); !slices.Contains(users, "alice") {
		t.Fatalf("stream connection users %v, want alice", users)
	}

	if _, err := open("", "", "EXTERNAL", p.client()); err == nil {
		t.Fatal("EXTERNAL without a client certificate accepted")
	}
}

// TestStreamProtocolOAuth2: an OAuth 2 token is the password of PLAIN, as
// on the other protocols, and its scopes are the permissions: app.* is
// the token user's, anything else is refused; an expired token is
// refused at login.
func TestStreamProtocolOAuth2(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p, func(c *conf.Config) { c.Stream.Listen = "127.0.0.1:0" })
	addr := b.n.StreamAddr().(*net.TCPAddr)
	env := streamEnv(t, addr, "whoever", p.token("app", time.Hour, appScopes...))
	if err := env.DeclareStream("app.events", nil); err != nil {
		t.Fatalf("create within the token's scopes: %v", err)
	}
	spPublishConfirmed(t, env, "app.events", 0, 5)
	spConsume(t, env, "app.events", stream.OffsetSpecification{}.First()).wait(t, 5)
	if err := env.DeclareStream("other.events", nil); !errors.Is(err, stream.CodeAccessRefused) {
		t.Fatalf("create outside the token's scopes: %v, want access refused", err)
	}
	if _, err := streamEnvErr(addr, "whoever", p.token("app", -time.Minute, appScopes...)); err == nil {
		t.Fatal("expired token accepted")
	}
}

// TestStreamProtocolAlarmBlocksPublishers: while a resource alarm is
// raised, publishes are not read (nothing is confirmed); once it clears
// they are stored and confirmed, none lost.
func TestStreamProtocolAlarmBlocksPublishers(t *testing.T) {
	b, addr := streamBroker(t)
	env := streamEnv(t, addr, "guest", "guest")
	if err := env.DeclareStream("sp-alarm", nil); err != nil {
		t.Fatal(err)
	}
	pr, err := env.NewProducer("sp-alarm", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	confirms := pr.NotifyPublishConfirmation()
	b.n.Broker().Alarms().Set("disk", true)
	for i := 0; i < 5; i++ {
		if err := pr.Send(amqp10.NewMessage([]byte("blocked-" + strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case cs := <-confirms:
		t.Fatalf("confirmed during the alarm: %d", cs[0].GetPublishingId())
	case <-time.After(time.Second):
	}
	b.n.Broker().Alarms().Set("disk", false)
	got := 0
	for got < 5 {
		select {
		case cs := <-confirms:
			for _, c := range cs {
				if !c.IsConfirmed() {
					t.Fatalf("message %d refused", c.GetPublishingId())
				}
				got++
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of 5 confirmed after the alarm cleared", got)
		}
	}
}

// rawStream is a hand-driven stream protocol connection.
type rawStream struct {
	t  *testing.T
	nc net.Conn
}

func (r *rawStream) send(key uint16, body ...any) {
	r.t.Helper()
	var b []byte
	b = binary.BigEndian.AppendUint16(b, key)
	b = binary.BigEndian.AppendUint16(b, 1)
	for _, v := range body {
		switch x := v.(type) {
		case uint32:
			b = binary.BigEndian.AppendUint32(b, x)
		case string:
			b = append(binary.BigEndian.AppendUint16(b, uint16(len(x))), x...)
		case []byte:
			b = append(binary.BigEndian.AppendUint32(b, uint32(len(x))), x...)
		}
	}
	if _, err := r.nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		r.t.Fatal(err)
	}
}

// expect reads a frame with key and (for a response) code OK.
func (r *rawStream) expect(key uint16) []byte {
	r.t.Helper()
	p := readStreamFrame(r.t, r.nc)
	if binary.BigEndian.Uint16(p) != key {
		r.t.Fatalf("got frame %x, want key %#x", p, key)
	}
	if key&0x8000 != 0 && binary.BigEndian.Uint16(p[8:]) != 1 {
		r.t.Fatalf("response %x is not OK", p)
	}
	return p
}

// open shakes hands as guest on "/".
func (r *rawStream) open() {
	r.send(0x0011, uint32(1), uint32(0))
	r.expect(0x8011)
	r.send(0x0012, uint32(2))
	r.expect(0x8012)
	r.send(0x0013, uint32(3), "PLAIN", []byte("\x00guest\x00guest"))
	r.expect(0x8013)
	r.expect(0x0014)
	r.send(0x8014, uint32(1<<20), uint32(0))
	r.send(0x0015, uint32(4), "/")
	r.expect(0x8015)
}

// TestStreamProtocolShutdownClose: a broker that stops sends its open
// connections a Close with its reason (AMQP's 320 CONNECTION_FORCED
// counterpart) before it closes them.
func TestStreamProtocolShutdownClose(t *testing.T) {
	b, addr := streamBroker(t)
	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := &rawStream{t: t, nc: nc}
	r.open()
	stopped := make(chan struct{})
	go func() { b.stop(); close(stopped) }()
	p := r.expect(0x0016)
	nc.Close()
	<-stopped
	if reason := string(p[12:]); !strings.Contains(reason, "shutdown") {
		t.Fatalf("close reason %q", reason)
	}
}

// startStreamCluster starts an n-node cluster whose nodes each serve the
// stream protocol on a port of their own (addrs[i] is node i's).
func startStreamCluster(t *testing.T, n int) ([]*cnode, []*net.TCPAddr) {
	t.Helper()
	var addrs []*net.TCPAddr
	for range n {
		port, err := testbin.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	}
	nodes := startClusterWith(t, n, func(i int) []string { return []string{"--stream-listen", addrs[i].String()} })
	return nodes, addrs
}

// TestStreamProtocolCluster: in a 3-node cluster every node answers for
// every stream (metadata names the node the client reached): a stream
// created through one node, published to through another and read through
// the third has every confirmed message, and an offset stored through one
// node is read through another.
func TestStreamProtocolCluster(t *testing.T) {
	const n = 3
	_, addrs := startStreamCluster(t, n)
	envs := make([]*stream.Environment, n)
	for i := range envs {
		envs[i] = streamEnv(t, addrs[i], "guest", "guest")
	}
	if err := envs[0].DeclareStream("sp-clustered", &stream.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, env := range envs {
		eventually(t, 20*time.Second, "stream on node "+strconv.Itoa(i), func() bool {
			ok, err := env.StreamExists("sp-clustered")
			return err == nil && ok
		})
		md, err := env.StreamMetaData("sp-clustered")
		if err != nil {
			t.Fatal(err)
		}
		if md.Leader.Port != strconv.Itoa(addrs[i].Port) || len(md.Replicas) != 0 {
			t.Fatalf("node %d advertises %s:%s (replicas %d) as the leader, want its own address", i, md.Leader.Host, md.Leader.Port, len(md.Replicas))
		}
	}
	const msgs = 1000
	spPublishConfirmed(t, envs[1], "sp-clustered", 0, msgs)
	got := spConsume(t, envs[2], "sp-clustered", stream.OffsetSpecification{}.First())
	got.wait(t, msgs)
	got.mu.Lock()
	for i := 0; i < msgs; i++ {
		if got.bodies[i] != "body-"+strconv.Itoa(i) {
			got.mu.Unlock()
			t.Fatalf("message %d through node 2: %q", i, got.bodies[i])
		}
	}
	got.mu.Unlock()
	if err := envs[0].StoreOffset("reader", "sp-clustered", 777); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "offset on node 2", func() bool {
		off, err := envs[2].QueryOffset("reader", "sp-clustered")
		return err == nil && off == 777
	})
}

// TestStreamProtocolLargeMessages: messages of 300 KiB go out in chunks
// within the frame max, a subscription pauses its stream while it holds
// 4 MiB for the client and resumes as it writes, and every message arrives
// whole.
func TestStreamProtocolLargeMessages(t *testing.T) {
	_, addr := streamBroker(t)
	// Socket buffers of 1 MiB: with the client's default of 8 KiB, TCP
	// on loopback crawls through large frames (as against RabbitMQ).
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetHost(addr.IP.String()).SetPort(addr.Port).
		SetUser("guest").SetPassword("guest").SetReadBuffer(1 << 20).SetWriteBuffer(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.DeclareStream("sp-large", nil); err != nil {
		t.Fatal(err)
	}
	p, err := env.NewProducer("sp-large", nil)
	if err != nil {
		t.Fatal(err)
	}
	confirms := p.NotifyPublishConfirmation()
	const n, size = 60, 300 << 10
	body := func(i int) []byte {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(i + j)
		}
		return b
	}
	for i := 0; i < n; i++ {
		if err := p.Send(amqp10.NewMessage(body(i))); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < n; {
		select {
		case cs := <-confirms:
			got += len(cs)
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d confirmed", got, n)
		}
	}
	// A slow consumer with one credit at a time: the subscription fills
	// up to its bound and pauses the stream again and again.
	got := &spConsumed{}
	cons, err := env.NewConsumer("sp-large", func(ctx stream.ConsumerContext, m *amqp10.Message) {
		time.Sleep(20 * time.Millisecond)
		got.handler(ctx, m)
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()).SetInitialCredits(1).SetCRCCheck(true))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got.wait(t, n)
	got.mu.Lock()
	defer got.mu.Unlock()
	for i := 0; i < n; i++ {
		if got.bodies[i] != string(body(i)) {
			t.Fatalf("message %d differs (%d bytes)", i, len(got.bodies[i]))
		}
	}
}
