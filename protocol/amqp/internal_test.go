package amqp

import (
	"context"
	"net"
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// serveBoth starts a core with a public and an internal listener. The
// only user, guest, has no permission at all on vhost "other".
func serveBoth(t *testing.T) (s *Server, b *exchange.Broker, public, internal string) {
	t.Helper()
	st := store.NewMemory()
	b, err := exchange.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, vh := range []string{"/", "other"} {
		if err := b.EnsureVHost(vh); err != nil {
			t.Fatal(err)
		}
	}
	users, err := auth.New(st, auth.Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		t.Fatal(err)
	}
	s = NewServer(Config{ChannelMax: 2}, b, users, nil)
	listen := func(serve func(net.Listener) error) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = serve(ln) }()
		return ln.Addr().String()
	}
	public, internal = listen(s.Serve), listen(func(ln net.Listener) error { return s.ServeInternal(ln, nil) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		_ = b.Close()
	})
	return s, b, public, internal
}

func TestServeInternal(t *testing.T) {
	s, b, public, internal := serveBoth(t)
	b.Limiter().Set(exchange.Limits{MaxConnectionsPerUser: 1, MaxConnectionsPerVHost: 1})

	// The public listener checks credentials and permissions.
	if c, err := amqp091.Dial("amqp://nobody:wrong@" + public + "/other"); err == nil {
		c.Close()
		t.Fatal("public listener accepted bad credentials")
	}

	// The internal one accepts any login, on any vhost, past the
	// connection limits, with no channel limit.
	var conns []*amqp091.Connection
	for i := 0; i < 3; i++ {
		c, err := amqp091.Dial("amqp://nobody:wrong@" + internal + "/other")
		if err != nil {
			t.Fatalf("internal connection %d: %v", i, err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	var chs []*amqp091.Channel
	for i := 0; i < 4; i++ { // more than the listener's channel_max of 2
		ch, err := conns[0].Channel()
		if err != nil {
			t.Fatalf("channel %d: %v", i, err)
		}
		chs = append(chs, ch)
	}
	ch := chs[0]
	for _, q := range []string{"a", "b"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	// user_id names another user; CC names another queue: neither matters.
	hdr := amqp091.Table{"CC": []any{"b"}, "BCC": []any{"b"}, "x": "y"}
	if err := ch.Publish("", "a", false, false, amqp091.Publishing{UserId: "someone-else", Headers: hdr, Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-confirms:
		if !c.Ack {
			t.Fatal("publish nacked")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no confirm")
	}
	for q, want := range map[string]int{"a": 1, "b": 0} {
		got, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		if err != nil || got.Messages != want {
			t.Fatalf("queue %s: %d %v, want %d", q, got.Messages, err, want)
		}
	}
	d, ok, err := ch.Get("a", true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if d.UserId != "someone-else" || !reflect.DeepEqual(d.Headers, hdr) {
		t.Fatalf("delivered user_id %q headers %#v", d.UserId, d.Headers)
	}

	// Internal connections are listed, under the internal user.
	var n int
	for _, ci := range s.Connections() {
		if ci.User == InternalUser {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d connections listed as %s, want 3", n, InternalUser)
	}
	// And they were not counted against the limits: a public connection
	// still gets the one slot.
	pc, err := amqp091.Dial("amqp://guest:guest@" + public + "/")
	if err != nil {
		t.Fatalf("public connection after internal ones: %v", err)
	}
	pc.Close()
}
