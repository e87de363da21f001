package test

// Black-box conformance tests of exchanges, queues and durability, as
// RabbitMQ 3.x shows them to an amqp091-go client.
//
// The tests of this file, amqp_routing_test.go and amqp_queue_args_test.go
// run against an in-process Trident. With TRIDENT_CONFORMANCE_URL set (for
// example amqp://guest:guest@127.0.0.1:5673/, the RabbitMQ anchor) they run
// against that broker instead, which is how their expectations were checked;
// tests that need a restart or Trident itself are then skipped.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const conformanceURLEnv = "TRIDENT_CONFORMANCE_URL"

// target is the broker a conformance test talks to.
type target struct {
	t   *testing.T
	URL string
	b   *broker // nil against an external broker
	pfx string  // name prefix, unique per test against an external broker

	mu        sync.Mutex
	queues    []string
	exchanges []string
}

// newTarget starts a Trident for t, or uses the external broker named by
// TRIDENT_CONFORMANCE_URL.
func newTarget(t *testing.T) *target {
	t.Helper()
	u := os.Getenv(conformanceURLEnv)
	if u == "" {
		b := startBroker(t)
		return &target{t: t, URL: b.URL, b: b}
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	tg := &target{t: t, URL: u, pfx: "conf-" + hex.EncodeToString(r[:]) + "-"}
	t.Cleanup(tg.cleanup)
	return tg
}

// trident skips the test against an external broker.
func (tg *target) trident() *broker {
	tg.t.Helper()
	if tg.b == nil {
		tg.t.Skip("needs an in-process Trident")
	}
	return tg.b
}

// q returns a queue name for this test; against an external broker the
// queue is deleted when the test ends.
func (tg *target) q(name string) string {
	n := tg.pfx + name
	if tg.b == nil {
		tg.mu.Lock()
		tg.queues = append(tg.queues, n)
		tg.mu.Unlock()
	}
	return n
}

// x returns an exchange name for this test, as q does for queues.
func (tg *target) x(name string) string {
	n := tg.pfx + name
	if tg.b == nil {
		tg.mu.Lock()
		tg.exchanges = append(tg.exchanges, n)
		tg.mu.Unlock()
	}
	return n
}

func (tg *target) cleanup() {
	c, err := amqp.Dial(tg.URL)
	if err != nil {
		return
	}
	defer c.Close()
	for _, n := range tg.queues {
		if ch, err := c.Channel(); err == nil {
			_, _ = ch.QueueDelete(n, false, false, false)
			_ = ch.Close()
		}
	}
	for _, n := range tg.exchanges {
		if ch, err := c.Channel(); err == nil {
			_ = ch.ExchangeDelete(n, false, false)
			_ = ch.Close()
		}
	}
}

// channel opens a channel on a new connection to the target.
func (tg *target) channel() (*amqp.Connection, *amqp.Channel) {
	tg.t.Helper()
	return channel(tg.t, tg.URL)
}

// confirmChannel opens a channel in confirm mode on a new connection.
func (tg *target) confirmChannel() (*amqp.Connection, *amqp.Channel) {
	tg.t.Helper()
	c, ch := channel(tg.t, tg.URL)
	if err := ch.Confirm(false); err != nil {
		tg.t.Fatalf("confirm.select: %v", err)
	}
	return c, ch
}

// newChannel opens another channel on c.
func newChannel(t testing.TB, c *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

// must fails the test on err.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantAMQPError checks that err is an *amqp.Error with code and, unless
// text is empty, exactly that reply text.
func wantAMQPError(t testing.TB, err error, code int, text string) {
	t.Helper()
	e, ok := err.(*amqp.Error)
	if !ok {
		t.Fatalf("got error %v (%T), want AMQP error %d", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("got reply code %d (%s), want %d", e.Code, e.Reason, code)
	}
	if text != "" && e.Reason != text {
		t.Fatalf("reply text:\n got %q\nwant %q", e.Reason, text)
	}
}

// channelError runs op on ch and checks that it fails with a channel
// error (code, text) and that the channel, not the connection, is closed.
func channelError(t testing.TB, c *amqp.Connection, ch *amqp.Channel, code int, text string, op func() error) {
	t.Helper()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	err := op()
	if err == nil {
		t.Fatalf("no error, want channel error %d", code)
	}
	wantAMQPError(t, err, code, text)
	select {
	case e := <-closed:
		if e == nil || e.Code != code {
			t.Fatalf("channel closed with %v, want code %d", e, code)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("channel not closed")
	}
	if c.IsClosed() {
		t.Fatalf("connection closed by a channel error")
	}
	// The connection is still usable.
	ch2 := newChannel(t, c)
	_ = ch2.Close()
}

// channelClosedBy waits for ch to be closed by the server with code and,
// unless text is empty, that reply text (for errors of asynchronous
// methods such as basic.publish).
func channelClosedBy(t testing.TB, closed <-chan *amqp.Error, code int, text string) {
	t.Helper()
	select {
	case e := <-closed:
		if e == nil {
			t.Fatalf("channel closed without an error, want %d", code)
		}
		wantAMQPError(t, e, code, text)
	case <-time.After(5 * time.Second):
		t.Fatalf("channel not closed, want error %d", code)
	}
}

// publish publishes body to exchange with key.
func publish(t testing.TB, ch *amqp.Channel, exchange, key string, p amqp.Publishing) {
	t.Helper()
	if err := ch.PublishWithContext(context.Background(), exchange, key, false, false, p); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// publishConfirmed publishes on a channel in confirm mode and returns
// whether the broker acked (true) or nacked (false) the message.
func publishConfirmed(t testing.TB, ch *amqp.Channel, exchange, key string, p amqp.Publishing) bool {
	t.Helper()
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, key, false, false, p)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		t.Fatalf("waiting for the confirm: %v", err)
	}
	return ok
}

func text(s string) amqp.Publishing { return amqp.Publishing{Body: []byte(s)} }

// drain takes every ready message from queue with basic.get (no-ack) and
// returns their bodies in order.
func drain(t testing.TB, ch *amqp.Channel, queue string) []string {
	t.Helper()
	var out []string
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("basic.get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, string(d.Body))
	}
}

func wantBodies(t testing.TB, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
		t.Fatalf("got messages %q, want %q", got, want)
	}
}

// queueGone checks that a passive declare of queue answers 404.
func queueGone(t testing.TB, c *amqp.Connection, queue string) {
	t.Helper()
	ch := newChannel(t, c)
	_, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	wantAMQPError(t, err, 404, "NOT_FOUND - no queue '"+queue+"' in vhost '/'")
}

// exchangeGone checks that a passive declare of exchange answers 404.
func exchangeGone(t testing.TB, c *amqp.Connection, exchange string) {
	t.Helper()
	ch := newChannel(t, c)
	err := ch.ExchangeDeclarePassive(exchange, "direct", false, false, false, false, nil)
	wantAMQPError(t, err, 404, "NOT_FOUND - no exchange '"+exchange+"' in vhost '/'")
}

// exchangeExists checks that a passive declare of exchange succeeds.
func exchangeExists(t testing.TB, c *amqp.Connection, exchange string) {
	t.Helper()
	ch := newChannel(t, c)
	if err := ch.ExchangeDeclarePassive(exchange, "direct", false, false, false, false, nil); err != nil {
		t.Fatalf("passive declare of exchange %q: %v", exchange, err)
	}
	_ = ch.Close()
}

// --- exchanges ---

func TestExchangeDeclareEachType(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	for _, kind := range []string{"direct", "fanout", "topic", "headers"} {
		t.Run(kind, func(t *testing.T) {
			name := tg.x("x-" + kind)
			must(t, ch.ExchangeDeclare(name, kind, false, false, false, false, nil))
			// An identical redeclare and a passive declare (whose type
			// and flags are ignored) succeed.
			must(t, ch.ExchangeDeclare(name, kind, false, false, false, false, nil))
			must(t, ch.ExchangeDeclarePassive(name, "fanout", true, true, false, false, nil))
			// The type routes as it should: a queue bound with "k"
			// gets a message published with "k".
			q := tg.q("q-" + kind)
			_, err := ch.QueueDeclare(q, false, false, false, false, nil)
			must(t, err)
			must(t, ch.QueueBind(q, "k", name, false, nil))
			cc := newChannel(t, c)
			must(t, cc.Confirm(false))
			if !publishConfirmed(t, cc, name, "k", text("m")) {
				t.Fatalf("publish nacked")
			}
			wantBodies(t, drain(t, ch, q), "m")
		})
	}
}

func TestExchangePassiveDeclareMissing(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	name := tg.x("missing")
	channelError(t, c, ch, 404, "NOT_FOUND - no exchange '"+name+"' in vhost '/'", func() error {
		return ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil)
	})
}

func TestExchangeRedeclareInequivalent(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	name := tg.x("ineq")
	must(t, ch.ExchangeDeclare(name, "direct", false, false, false, false, nil))
	t.Run("type", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange '"+name+
			"' in vhost '/': received 'fanout' but current is 'direct'", func() error {
			return ch.ExchangeDeclare(name, "fanout", false, false, false, false, nil)
		})
	})
	t.Run("durable", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 406, "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '"+name+
			"' in vhost '/': received 'true' but current is 'false'", func() error {
			return ch.ExchangeDeclare(name, "direct", true, false, false, false, nil)
		})
	})
	t.Run("auto_delete", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 406, "", func() error {
			return ch.ExchangeDeclare(name, "direct", false, true, false, false, nil)
		})
	})
	// The exchange is unchanged.
	exchangeExists(t, c, name)
}

func TestExchangeReservedPrefix(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	channelError(t, c, ch, 403, "ACCESS_REFUSED - exchange name 'amq.trident-test' contains reserved prefix 'amq.*'", func() error {
		return ch.ExchangeDeclare("amq.trident-test", "direct", false, false, false, false, nil)
	})
	exchangeGone(t, c, "amq.trident-test")
}

func TestExchangeInvalidTypeClosesConnection(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	// The type is checked before anything else, even for an existing
	// exchange.
	existing := tg.x("goodtype")
	must(t, ch.ExchangeDeclare(existing, "direct", false, false, false, false, nil))
	if err := ch.ExchangeDeclare(existing, "no-such-type", false, false, false, false, nil); amqpCode(err) != 503 {
		t.Fatalf("redeclare with an unknown type: %v, want 503", err)
	}
	if !c.IsClosed() {
		<-c.NotifyClose(make(chan *amqp.Error, 1))
	}
	c, ch = tg.channel()
	closed := c.NotifyClose(make(chan *amqp.Error, 1))
	name := tg.x("badtype")
	err := ch.ExchangeDeclare(name, "no-such-type", false, false, false, false, nil)
	wantAMQPError(t, err, 503, "")
	select {
	case e := <-closed:
		if e == nil || e.Code != 503 || e.Server != true {
			t.Fatalf("connection closed with %+v, want 503 from the server", e)
		}
		if e.Reason != "COMMAND_INVALID - unknown exchange type 'no-such-type'" {
			t.Fatalf("reply text %q", e.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("connection not closed")
	}
	c2, _ := tg.channel()
	exchangeGone(t, c2, name)
}

func TestExchangeDelete(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	name := tg.x("del")
	must(t, ch.ExchangeDeclare(name, "topic", false, false, false, false, nil))
	q := tg.q("del-q")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q, "#", name, false, nil))
	must(t, ch.ExchangeDelete(name, false, false))
	exchangeGone(t, c, name)
	// Deleting it again is not an error.
	must(t, ch.ExchangeDelete(name, false, false))
	// Its bindings went with it: a new exchange of the same name routes
	// nowhere.
	must(t, ch.ExchangeDeclare(name, "topic", false, false, false, false, nil))
	must(t, ch.Confirm(false))
	publishConfirmed(t, ch, name, "a", text("m"))
	wantBodies(t, drain(t, ch, q))
	// The queue is still there.
	_, err = ch.QueueDeclarePassive(q, false, false, false, false, nil)
	must(t, err)
}

func TestExchangeDeleteIfUnused(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	name := tg.x("ifunused")
	must(t, ch.ExchangeDeclare(name, "direct", false, false, false, false, nil))
	q := tg.q("ifunused-q")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q, "k", name, false, nil))
	channelError(t, c, ch, 406, "PRECONDITION_FAILED - exchange '"+name+"' in vhost '/' in use", func() error {
		return ch.ExchangeDelete(name, true, false)
	})
	ch = newChannel(t, c)
	exchangeExists(t, c, name)
	must(t, ch.QueueUnbind(q, "k", name, nil))
	must(t, ch.ExchangeDelete(name, true, false))
	exchangeGone(t, c, name)
}

func TestExchangeInternal(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	internal := tg.x("internal")
	front := tg.x("front")
	must(t, ch.ExchangeDeclare(internal, "fanout", false, false, true, false, nil))
	must(t, ch.ExchangeDeclare(front, "fanout", false, false, false, false, nil))
	must(t, ch.ExchangeBind(internal, "", front, false, nil))
	q := tg.q("internal-q")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q, "", internal, false, nil))

	// Reached through another exchange, an internal exchange routes.
	cc := newChannel(t, c)
	must(t, cc.Confirm(false))
	publishConfirmed(t, cc, front, "", text("via-front"))
	wantBodies(t, drain(t, ch, q), "via-front")

	// Publishing to it directly closes the channel with 403.
	pc := newChannel(t, c)
	closed := pc.NotifyClose(make(chan *amqp.Error, 1))
	publish(t, pc, internal, "", text("direct"))
	channelClosedBy(t, closed, 403, "ACCESS_REFUSED - cannot publish to internal exchange '"+internal+"' in vhost '/'")
	wantBodies(t, drain(t, ch, q))
}

func TestExchangePublishToMissing(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.channel()
	name := tg.x("nowhere")
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	publish(t, ch, name, "k", text("m"))
	channelClosedBy(t, closed, 404, "NOT_FOUND - no exchange '"+name+"' in vhost '/'")
}

func TestExchangeAutoDelete(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	q := tg.q("ad-q")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)

	t.Run("unused exchange stays", func(t *testing.T) {
		name := tg.x("ad-never-bound")
		must(t, ch.ExchangeDeclare(name, "direct", false, true, false, false, nil))
		exchangeExists(t, c, name)
	})
	t.Run("last unbind", func(t *testing.T) {
		name := tg.x("ad-unbind")
		must(t, ch.ExchangeDeclare(name, "direct", false, true, false, false, nil))
		must(t, ch.QueueBind(q, "a", name, false, nil))
		must(t, ch.QueueBind(q, "b", name, false, nil))
		must(t, ch.QueueUnbind(q, "a", name, nil))
		exchangeExists(t, c, name)
		must(t, ch.QueueUnbind(q, "b", name, nil))
		exchangeGone(t, c, name)
	})
	t.Run("queue deleted", func(t *testing.T) {
		name := tg.x("ad-qdel")
		q2 := tg.q("ad-q2")
		must(t, ch.ExchangeDeclare(name, "fanout", false, true, false, false, nil))
		_, err := ch.QueueDeclare(q2, false, false, false, false, nil)
		must(t, err)
		must(t, ch.QueueBind(q2, "", name, false, nil))
		_, err = ch.QueueDelete(q2, false, false, false)
		must(t, err)
		exchangeGone(t, c, name)
	})
	t.Run("exchange-to-exchange unbind", func(t *testing.T) {
		src := tg.x("ad-src")
		dst := tg.x("ad-dst")
		must(t, ch.ExchangeDeclare(src, "fanout", false, true, false, false, nil))
		must(t, ch.ExchangeDeclare(dst, "fanout", false, false, false, false, nil))
		must(t, ch.ExchangeBind(dst, "", src, false, nil))
		must(t, ch.ExchangeUnbind(dst, "", src, false, nil))
		exchangeGone(t, c, src)
		exchangeExists(t, c, dst)
	})
}

func TestExchangeToExchangeBindings(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	a, b, cx := tg.x("e2e-a"), tg.x("e2e-b"), tg.x("e2e-c")
	must(t, ch.ExchangeDeclare(a, "topic", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare(b, "direct", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare(cx, "fanout", false, false, false, false, nil))
	qb, qc := tg.q("e2e-qb"), tg.q("e2e-qc")
	for _, q := range []string{qb, qc} {
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		must(t, err)
	}
	// a --(orders.#)--> b --(orders.eu)--> qb
	//                   b --(orders.eu)--> c --> qc
	must(t, ch.ExchangeBind(b, "orders.#", a, false, nil))
	must(t, ch.QueueBind(qb, "orders.eu", b, false, nil))
	must(t, ch.ExchangeBind(cx, "orders.eu", b, false, nil))
	must(t, ch.QueueBind(qc, "", cx, false, nil))
	// The same queue reached twice (a→b→qb and a→qb) gets one copy.
	must(t, ch.QueueBind(qb, "orders.*", a, false, nil))

	publishConfirmed(t, ch, a, "orders.eu", text("1"))
	publishConfirmed(t, ch, a, "orders.us", text("2")) // qb by a's own binding only
	publishConfirmed(t, ch, a, "stock.eu", text("3"))  // nowhere
	wantBodies(t, drain(t, ch, qb), "1", "2")
	wantBodies(t, drain(t, ch, qc), "1")

	// Unbinding b→c cuts the end of the chain.
	must(t, ch.ExchangeUnbind(cx, "orders.eu", b, false, nil))
	publishConfirmed(t, ch, a, "orders.eu", text("4"))
	wantBodies(t, drain(t, ch, qb), "4")
	wantBodies(t, drain(t, ch, qc))

	// A cycle does not loop.
	must(t, ch.ExchangeBind(a, "", cx, false, nil))
	must(t, ch.ExchangeBind(cx, "orders.eu", b, false, nil))
	publishConfirmed(t, ch, a, "orders.eu", text("5"))
	wantBodies(t, drain(t, ch, qb), "5")
	wantBodies(t, drain(t, ch, qc), "5")
}

func TestExchangeBindMissing(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	x := tg.x("bm")
	must(t, ch.ExchangeDeclare(x, "direct", false, false, false, false, nil))
	missing := tg.x("bm-missing")
	channelError(t, c, ch, 404, "NOT_FOUND - no exchange '"+missing+"' in vhost '/'", func() error {
		return ch.ExchangeBind(x, "k", missing, false, nil)
	})
	ch = newChannel(t, c)
	channelError(t, c, ch, 404, "NOT_FOUND - no exchange '"+missing+"' in vhost '/'", func() error {
		return ch.ExchangeBind(missing, "k", x, false, nil)
	})
}

func TestExchangeAlternate(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	main, ae := tg.x("ae-main"), tg.x("ae-alt")
	must(t, ch.ExchangeDeclare(ae, "fanout", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare(main, "direct", false, false, false, false, amqp.Table{"alternate-exchange": ae}))
	qm, qa := tg.q("ae-qm"), tg.q("ae-qa")
	for _, q := range []string{qm, qa} {
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		must(t, err)
	}
	must(t, ch.QueueBind(qm, "known", main, false, nil))
	must(t, ch.QueueBind(qa, "", ae, false, nil))

	returns := ch.NotifyReturn(make(chan amqp.Return, 4))
	publishConfirmed(t, ch, main, "known", text("routed"))
	// Unroutable by main, even with mandatory: the AE takes it and no
	// basic.return is sent.
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), main, "unknown", true, false, text("unroutable"))
	must(t, err)
	if !dc.Wait() {
		t.Fatalf("nacked")
	}
	wantBodies(t, drain(t, ch, qm), "routed")
	wantBodies(t, drain(t, ch, qa), "unroutable")
	select {
	case r := <-returns:
		t.Fatalf("unexpected basic.return %d %s", r.ReplyCode, r.ReplyText)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestExchangePredeclared(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	kinds := map[string]string{"amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic",
		"amq.headers": "headers", "amq.match": "headers"}
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			must(t, ch.ExchangeDeclarePassive(n, kinds[n], true, false, false, false, nil))
			// An equivalent active declare is allowed (durable, of its type).
			must(t, ch.ExchangeDeclare(n, kinds[n], true, false, false, false, nil))
			dc := newChannel(t, c)
			channelError(t, c, dc, 403, "ACCESS_REFUSED - deletion of system exchange '"+n+"' in vhost '/' not allowed", func() error {
				return dc.ExchangeDelete(n, false, false)
			})
		})
	}
	exchangeExists(t, c, "amq.direct")
}

func TestDefaultExchange(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.confirmChannel()
	q := tg.q("dflt")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)
	// Every queue is reachable through the default exchange by its name.
	publishConfirmed(t, ch, "", q, text("m"))
	wantBodies(t, drain(t, ch, q), "m")

	t.Run("bind", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 403, "ACCESS_REFUSED - operation not permitted on the default exchange", func() error {
			return ch.QueueBind(q, "other", "", false, nil)
		})
	})
	t.Run("unbind", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 403, "ACCESS_REFUSED - operation not permitted on the default exchange", func() error {
			return ch.QueueUnbind(q, q, "", nil)
		})
	})
	t.Run("delete", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 403, "ACCESS_REFUSED - operation not permitted on the default exchange", func() error {
			return ch.ExchangeDelete("", false, false)
		})
	})
}

// --- queues ---

func TestQueueDeclareDurableAndTransient(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	for _, durable := range []bool{true, false} {
		name := tg.q("dt-transient")
		if durable {
			name = tg.q("dt-durable")
		}
		q, err := ch.QueueDeclare(name, durable, false, false, false, nil)
		must(t, err)
		if q.Name != name || q.Messages != 0 || q.Consumers != 0 {
			t.Fatalf("declare-ok %+v", q)
		}
		// Redeclaring with the other durability is refused.
		ch2 := newChannel(t, c)
		channelError(t, c, ch2, 406, "", func() error {
			_, err := ch2.QueueDeclare(name, !durable, false, false, false, nil)
			return err
		})
	}
}

func TestQueuePassiveDeclare(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.confirmChannel()
	name := tg.q("passive")
	_, err := ch.QueueDeclare(name, false, false, false, false, nil)
	must(t, err)
	for _, b := range []string{"1", "2", "3"} {
		publishConfirmed(t, ch, "", name, text(b))
	}
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	must(t, err)
	if q.Messages != 3 || q.Consumers != 0 {
		t.Fatalf("passive declare-ok: %d messages, %d consumers; want 3, 0", q.Messages, q.Consumers)
	}
	// A consumer with prefetch 1 holds one unacked message: the count is
	// of ready messages only.
	cc := newChannel(t, c)
	must(t, cc.Qos(1, 0, false))
	ds, err := cc.Consume(name, "", false, false, false, false, nil)
	must(t, err)
	receive(t, ds)
	q, err = ch.QueueDeclarePassive(name, false, false, false, false, nil)
	must(t, err)
	if q.Messages != 2 || q.Consumers != 1 {
		t.Fatalf("passive declare-ok: %d messages, %d consumers; want 2, 1", q.Messages, q.Consumers)
	}
	// A non-passive redeclare answers the counts too.
	q, err = ch.QueueDeclare(name, false, false, false, false, nil)
	must(t, err)
	if q.Messages != 2 || q.Consumers != 1 {
		t.Fatalf("declare-ok: %d messages, %d consumers; want 2, 1", q.Messages, q.Consumers)
	}

	missing := tg.q("passive-missing")
	ch2 := newChannel(t, c)
	channelError(t, c, ch2, 404, "NOT_FOUND - no queue '"+missing+"' in vhost '/'", func() error {
		_, err := ch2.QueueDeclarePassive(missing, false, false, false, false, nil)
		return err
	})
}

func TestQueueServerNamed(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.channel()
	q1, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	q2, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	for _, q := range []amqp.Queue{q1, q2} {
		if !strings.HasPrefix(q.Name, "amq.gen-") || len(q.Name) <= len("amq.gen-") {
			t.Fatalf("server-named queue %q, want the amq.gen- prefix", q.Name)
		}
	}
	if q1.Name == q2.Name {
		t.Fatalf("two server-named queues share the name %q", q1.Name)
	}
	// Declaring a queue with the reserved prefix is refused.
	c, ch3 := tg.channel()
	channelError(t, c, ch3, 403, "ACCESS_REFUSED - queue name 'amq.trident-test' contains reserved prefix 'amq.*'", func() error {
		_, err := ch3.QueueDeclare("amq.trident-test", false, false, false, false, nil)
		return err
	})
}

func TestQueueRedeclareInequivalentArgs(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	name := tg.q("ineq-args")
	_, err := ch.QueueDeclare(name, false, false, false, false, amqp.Table{"x-message-ttl": int32(200)})
	must(t, err)
	// The same arguments are fine.
	_, err = ch.QueueDeclare(name, false, false, false, false, amqp.Table{"x-message-ttl": int32(200)})
	must(t, err)
	for _, tc := range []struct {
		name string
		args amqp.Table
	}{
		{"missing", nil},
		{"added", amqp.Table{"x-message-ttl": int32(200), "x-max-length": int32(5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := newChannel(t, c)
			channelError(t, c, ch, 406, "", func() error {
				_, err := ch.QueueDeclare(name, false, false, false, false, tc.args)
				return err
			})
		})
	}
	t.Run("other value", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 406, "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '"+name+
			"' in vhost '/': received '100' but current is '200'", func() error {
			_, err := ch.QueueDeclare(name, false, false, false, false, amqp.Table{"x-message-ttl": int32(100)})
			return err
		})
	})
	t.Run("durable", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue '"+name+
			"' in vhost '/': received 'true' but current is 'false'", func() error {
			_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-message-ttl": int32(200)})
			return err
		})
	})
}

func TestQueueExclusive(t *testing.T) {
	tg := newTarget(t)
	owner, ch := tg.channel()
	name := tg.q("excl")
	_, err := ch.QueueDeclare(name, false, false, true, false, nil)
	must(t, err)
	x := tg.x("excl-x")
	must(t, ch.ExchangeDeclare(x, "fanout", false, false, false, false, nil))

	// The owner can use it.
	_, err = ch.Consume(name, "", true, false, false, false, nil)
	must(t, err)

	other := dial(t, tg.URL)
	locked := "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '" + name + "' in vhost '/'. " +
		"It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
	for _, tc := range []struct {
		op string
		fn func(ch *amqp.Channel) error
	}{
		{"declare", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(name, false, false, true, false, nil)
			return err
		}},
		{"passive declare", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(name, false, false, true, false, nil)
			return err
		}},
		{"consume", func(ch *amqp.Channel) error {
			_, err := ch.Consume(name, "", true, false, false, false, nil)
			return err
		}},
		{"get", func(ch *amqp.Channel) error {
			_, _, err := ch.Get(name, true)
			return err
		}},
		{"bind", func(ch *amqp.Channel) error { return ch.QueueBind(name, "", x, false, nil) }},
		{"purge", func(ch *amqp.Channel) error {
			_, err := ch.QueuePurge(name, false)
			return err
		}},
		{"delete", func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(name, false, false, false)
			return err
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			ch := newChannel(t, other)
			channelError(t, other, ch, 405, locked, func() error { return tc.fn(ch) })
		})
	}

	// The queue goes away with its connection.
	must(t, owner.Close())
	deadline := time.Now().Add(5 * time.Second)
	for {
		pc := newChannel(t, other)
		_, err := pc.QueueDeclarePassive(name, false, false, true, false, nil)
		if amqpCode(err) == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exclusive queue still there after its connection closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestQueueAutoDelete(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	name := tg.q("autodel")
	_, err := ch.QueueDeclare(name, false, true, false, false, nil)
	must(t, err)
	// Without ever having had a consumer, it stays.
	_, err = ch.QueueDeclarePassive(name, false, true, false, false, nil)
	must(t, err)

	c1, c2 := newChannel(t, c), newChannel(t, c)
	_, err = c1.Consume(name, "one", true, false, false, false, nil)
	must(t, err)
	_, err = c2.Consume(name, "two", true, false, false, false, nil)
	must(t, err)
	must(t, c1.Cancel("one", false))
	q, err := ch.QueueDeclarePassive(name, false, true, false, false, nil)
	must(t, err)
	if q.Consumers != 1 {
		t.Fatalf("%d consumers, want 1", q.Consumers)
	}
	// The last consumer's cancel deletes it.
	must(t, c2.Cancel("two", false))
	queueGone(t, c, name)
}

func TestQueuePurge(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	name := tg.q("purge")
	_, err := ch.QueueDeclare(name, false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 5; i++ {
		publishConfirmed(t, ch, "", name, text("m"))
	}
	n, err := ch.QueuePurge(name, false)
	must(t, err)
	if n != 5 {
		t.Fatalf("purge-ok message count %d, want 5", n)
	}
	n, err = ch.QueuePurge(name, false)
	must(t, err)
	if n != 0 {
		t.Fatalf("second purge-ok message count %d, want 0", n)
	}
	wantBodies(t, drain(t, ch, name))
}

func TestQueueDelete(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.confirmChannel()
	name := tg.q("delete")
	_, err := ch.QueueDeclare(name, false, false, false, false, nil)
	must(t, err)

	t.Run("if-empty", func(t *testing.T) {
		publishConfirmed(t, ch, "", name, text("m"))
		dc := newChannel(t, c)
		channelError(t, c, dc, 406, "PRECONDITION_FAILED - queue '"+name+"' in vhost '/' not empty", func() error {
			_, err := dc.QueueDelete(name, false, true, false)
			return err
		})
	})
	t.Run("if-unused", func(t *testing.T) {
		cc := newChannel(t, c)
		must(t, cc.Qos(1, 0, false))
		ds, err := cc.Consume(name, "held", false, false, false, false, nil)
		must(t, err)
		receive(t, ds) // held unacked
		dc := newChannel(t, c)
		channelError(t, c, dc, 406, "PRECONDITION_FAILED - queue '"+name+"' in vhost '/' in use", func() error {
			_, err := dc.QueueDelete(name, true, false, false)
			return err
		})
		must(t, cc.Close()) // the message goes back
	})
	t.Run("count", func(t *testing.T) {
		publishConfirmed(t, ch, "", name, text("m2"))
		publishConfirmed(t, ch, "", name, text("m3"))
		n, err := ch.QueueDelete(name, false, false, false)
		must(t, err)
		if n != 3 {
			t.Fatalf("delete-ok message count %d, want 3", n)
		}
		queueGone(t, c, name)
		// Deleting a queue that does not exist is not an error.
		n, err = ch.QueueDelete(name, false, false, false)
		must(t, err)
		if n != 0 {
			t.Fatalf("delete-ok message count %d, want 0", n)
		}
	})
}

func TestQueueDeleteCancelsConsumers(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	name := tg.q("cancel-notify")
	_, err := ch.QueueDeclare(name, false, false, false, false, nil)
	must(t, err)
	cc := newChannel(t, c)
	cancels := cc.NotifyCancel(make(chan string, 1))
	_, err = cc.Consume(name, "doomed", true, false, false, false, nil)
	must(t, err)
	_, err = ch.QueueDelete(name, false, false, false)
	must(t, err)
	select {
	case tag := <-cancels:
		if tag != "doomed" {
			t.Fatalf("basic.cancel for %q", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no basic.cancel after the queue was deleted")
	}
}

func TestQueueBindMissing(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	x := tg.x("qbm")
	q := tg.q("qbm")
	must(t, ch.ExchangeDeclare(x, "direct", false, false, false, false, nil))
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)
	mq, mx := tg.q("qbm-missing"), tg.x("qbm-missing")
	for _, tc := range []struct {
		name string
		text string
		fn   func(ch *amqp.Channel) error
	}{
		{"bind missing queue", "NOT_FOUND - no queue '" + mq + "' in vhost '/'",
			func(ch *amqp.Channel) error { return ch.QueueBind(mq, "k", x, false, nil) }},
		{"bind missing exchange", "NOT_FOUND - no exchange '" + mx + "' in vhost '/'",
			func(ch *amqp.Channel) error { return ch.QueueBind(q, "k", mx, false, nil) }},
		{"consume missing queue", "NOT_FOUND - no queue '" + mq + "' in vhost '/'",
			func(ch *amqp.Channel) error {
				_, err := ch.Consume(mq, "", true, false, false, false, nil)
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := newChannel(t, c)
			channelError(t, c, ch, 404, tc.text, func() error { return tc.fn(ch) })
		})
	}
	// Unbinding is idempotent in RabbitMQ 3.10: a binding, queue or
	// exchange that does not exist is not an error.
	must(t, ch.QueueUnbind(q, "never-bound", x, nil))
	must(t, ch.QueueUnbind(mq, "k", x, nil))
	must(t, ch.QueueUnbind(q, "k", mx, nil))
	must(t, ch.ExchangeUnbind(mx, "k", x, false, nil))
	must(t, ch.ExchangeUnbind(x, "k", mx, false, nil))
}

// --- durability ---

func TestDurabilityAcrossRestart(t *testing.T) {
	tg := newTarget(t)
	b := tg.trident()
	c, ch := tg.confirmChannel()
	must(t, ch.ExchangeDeclare("dur-x", "topic", true, false, false, false, nil))
	must(t, ch.ExchangeDeclare("tmp-x", "topic", false, false, false, false, nil))
	for _, q := range []struct {
		name    string
		durable bool
	}{{"dur-q", true}, {"tmp-q", false}} {
		_, err := ch.QueueDeclare(q.name, q.durable, false, false, false, nil)
		must(t, err)
		must(t, ch.QueueBind(q.name, "a.#", "dur-x", false, nil))
	}
	_, err := ch.QueueDeclare("dur-q2", true, false, false, false, nil)
	must(t, err)
	must(t, ch.ExchangeBind("dur-x", "", "amq.fanout", false, nil))
	for _, p := range []amqp.Publishing{
		{DeliveryMode: amqp.Persistent, Body: []byte("p1"), Headers: amqp.Table{"h": "v"}, MessageId: "id1"},
		{DeliveryMode: amqp.Transient, Body: []byte("t1")},
		{DeliveryMode: amqp.Persistent, Body: []byte("p2")},
	} {
		if !publishConfirmed(t, ch, "dur-x", "a.b", p) {
			t.Fatalf("nacked")
		}
	}
	// An acked persistent message is gone for good.
	publishConfirmed(t, ch, "", "dur-q2", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("acked")})
	publishConfirmed(t, ch, "", "dur-q2", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("kept")})
	d, ok, err := ch.Get("dur-q2", false)
	must(t, err)
	if !ok || string(d.Body) != "acked" {
		t.Fatalf("basic.get: %v %q", ok, d.Body)
	}
	must(t, d.Ack(false))
	_ = c.Close()

	b.restart()

	c, ch = channel(t, b.URL)
	exchangeExists(t, c, "dur-x")
	exchangeGone(t, c, "tmp-x")
	queueGone(t, c, "tmp-q")
	q, err := ch.QueueDeclarePassive("dur-q", true, false, false, false, nil)
	must(t, err)
	if q.Messages != 2 {
		t.Fatalf("dur-q holds %d messages after restart, want the 2 persistent ones", q.Messages)
	}
	d, ok, err = ch.Get("dur-q", true)
	must(t, err)
	if !ok || string(d.Body) != "p1" || d.Headers["h"] != "v" || d.MessageId != "id1" || d.DeliveryMode != amqp.Persistent {
		t.Fatalf("first message after restart: %v %+v", ok, d)
	}
	wantBodies(t, drain(t, ch, "dur-q"), "p2")
	wantBodies(t, drain(t, ch, "dur-q2"), "kept")

	// The durable bindings (queue and exchange-to-exchange) still route.
	must(t, ch.Confirm(false))
	publishConfirmed(t, ch, "dur-x", "a.c", text("after"))
	publishConfirmed(t, ch, "amq.fanout", "a.d", text("via-fanout"))
	wantBodies(t, drain(t, ch, "dur-q"), "after", "via-fanout")
	// An exchange redeclared with other properties is still refused.
	ch2 := newChannel(t, c)
	channelError(t, c, ch2, 406, "", func() error {
		return ch2.ExchangeDeclare("dur-x", "direct", true, false, false, false, nil)
	})
}
