package test

// Black-box routing tests: which queues a message reaches, as RabbitMQ 3.x
// routes it. See amqp_topology_test.go for the target and helpers.

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// routeCase binds one queue per entry of bindings (queue → routing keys or
// header tables) and publishes each message; want lists, per queue, the
// bodies it must hold afterwards, in order.
func declareBoundQueues(t *testing.T, tg *target, ch *amqp.Channel, x string, bindings map[string][]string) map[string]string {
	t.Helper()
	names := map[string]string{}
	for q, keys := range bindings {
		n := tg.q("b-" + x + "-" + q) // "b-": x may be an amq.* exchange
		names[q] = n
		_, err := ch.QueueDeclare(n, false, false, false, false, nil)
		must(t, err)
		for _, k := range keys {
			must(t, ch.QueueBind(n, k, x, false, nil))
		}
	}
	return names
}

func TestRoutingTopic(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	for i, tc := range []struct {
		name     string
		patterns []string // all bound to one queue
		match    []string
		miss     []string
	}{
		{"literal", []string{"a.b.c"}, []string{"a.b.c"}, []string{"a.b", "a.b.c.d", "a.B.c", "a.bc"}},
		{"star one word", []string{"a.*"}, []string{"a.b", "a.", "a.xyz"}, []string{"a", "a.b.c", "b.a", ""}},
		{"star alone", []string{"*"}, []string{"a", "xyz"}, []string{"", "a.b", "."}}, // "" has no word
		{"star middle", []string{"a.*.c"}, []string{"a.b.c", "a..c"}, []string{"a.c", "a.b.b.c", "a.b.d"}},
		{"star star", []string{"*.*"}, []string{"a.b", "."}, []string{"a", "a.b.c"}},
		{"hash tail", []string{"a.#"}, []string{"a", "a.b", "a.b.c"}, []string{"b.a", "ab", "b"}},
		{"hash head", []string{"#.z"}, []string{"z", "a.z", "a.b.z"}, []string{"z.a", "az"}},
		{"hash middle", []string{"a.#.b"}, []string{"a.b", "a.x.b", "a.x.y.b"}, []string{"a.x.c", "a", "b", "x.a.b"}},
		{"hash alone", []string{"#"}, []string{"", "a", "a.b.c", "..."}, nil},
		{"hash then star", []string{"#.*"}, []string{"a", "a.b", "a.b.c"}, []string{""}},
		{"star then hash", []string{"a.*.#"}, []string{"a.b", "a.b.c", "a.b.c.d"}, []string{"a", "b.c"}},
		{"hash hash", []string{"#.#"}, []string{"", "a", "a.b"}, nil},
		{"empty key", []string{""}, []string{""}, []string{"a"}},
		{"several patterns one copy", []string{"a.*", "*.b", "a.#", "#", "a.b"}, []string{"a.b", "a.c", "x"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := tg.x(fmt.Sprintf("topic-%d", i))
			must(t, ch.ExchangeDeclare(x, "topic", false, false, false, false, nil))
			q := declareBoundQueues(t, tg, ch, x, map[string][]string{"q": tc.patterns})["q"]
			keys := append(append([]string{}, tc.match...), tc.miss...)
			for _, k := range keys {
				publishConfirmed(t, ch, x, k, text("key="+k))
			}
			var want []string
			for _, k := range tc.match {
				want = append(want, "key="+k)
			}
			wantBodies(t, drain(t, ch, q), want...)
		})
	}

	t.Run("one copy per queue", func(t *testing.T) {
		x := tg.x("topic-multi")
		must(t, ch.ExchangeDeclare(x, "topic", false, false, false, false, nil))
		qs := declareBoundQueues(t, tg, ch, x, map[string][]string{
			"eu":  {"orders.eu.*", "orders.#"},
			"all": {"#"},
			"us":  {"orders.us.*"},
			"new": {"*.*.new", "orders.*.new"},
		})
		publishConfirmed(t, ch, x, "orders.eu.new", text("1"))
		publishConfirmed(t, ch, x, "orders.us.new", text("2"))
		publishConfirmed(t, ch, x, "stock.eu.old", text("3"))
		wantBodies(t, drain(t, ch, qs["eu"]), "1", "2")
		wantBodies(t, drain(t, ch, qs["all"]), "1", "2", "3")
		wantBodies(t, drain(t, ch, qs["us"]), "2")
		wantBodies(t, drain(t, ch, qs["new"]), "1", "2")
	})

	t.Run("unbind", func(t *testing.T) {
		x := tg.x("topic-unbind")
		must(t, ch.ExchangeDeclare(x, "topic", false, false, false, false, nil))
		q := declareBoundQueues(t, tg, ch, x, map[string][]string{"q": {"a.*", "a.#"}})["q"]
		must(t, ch.QueueUnbind(q, "a.#", x, nil))
		publishConfirmed(t, ch, x, "a.b", text("1"))
		publishConfirmed(t, ch, x, "a.b.c", text("2"))
		wantBodies(t, drain(t, ch, q), "1")
	})
}

func TestRoutingDirect(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	for _, x := range []string{tg.x("direct"), "amq.direct"} {
		t.Run(x, func(t *testing.T) {
			if x != "amq.direct" {
				must(t, ch.ExchangeDeclare(x, "direct", false, false, false, false, nil))
			}
			qs := declareBoundQueues(t, tg, ch, x, map[string][]string{
				"q1": {"k1" + tg.pfx},
				"q2": {"k1" + tg.pfx, "k2" + tg.pfx},
			})
			publishConfirmed(t, ch, x, "k1"+tg.pfx, text("1"))
			publishConfirmed(t, ch, x, "k2"+tg.pfx, text("2"))
			publishConfirmed(t, ch, x, "k3"+tg.pfx, text("3"))
			publishConfirmed(t, ch, x, "K1"+tg.pfx, text("4")) // keys are case-sensitive
			wantBodies(t, drain(t, ch, qs["q1"]), "1")
			wantBodies(t, drain(t, ch, qs["q2"]), "1", "2")
		})
	}
}

func TestRoutingFanout(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	x := tg.x("fanout")
	must(t, ch.ExchangeDeclare(x, "fanout", false, false, false, false, nil))
	qs := declareBoundQueues(t, tg, ch, x, map[string][]string{
		"q1": {""},
		"q2": {"ignored", "also-ignored"},
	})
	publishConfirmed(t, ch, x, "", text("1"))
	publishConfirmed(t, ch, x, "whatever", text("2"))
	wantBodies(t, drain(t, ch, qs["q1"]), "1", "2")
	wantBodies(t, drain(t, ch, qs["q2"]), "1", "2")
}

func TestRoutingHeaders(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	for i, tc := range []struct {
		name    string
		binding amqp.Table
		headers amqp.Table
		match   bool
	}{
		{"all: every header", amqp.Table{"x-match": "all", "a": "1", "b": "2"}, amqp.Table{"a": "1", "b": "2", "c": "3"}, true},
		{"all: one differs", amqp.Table{"x-match": "all", "a": "1", "b": "2"}, amqp.Table{"a": "1", "b": "3"}, false},
		{"all: one missing", amqp.Table{"x-match": "all", "a": "1", "b": "2"}, amqp.Table{"a": "1"}, false},
		{"all is the default", amqp.Table{"a": "1", "b": "2"}, amqp.Table{"a": "1"}, false},
		{"default all matches", amqp.Table{"a": "1", "b": "2"}, amqp.Table{"a": "1", "b": "2"}, true},
		{"all: no headers", amqp.Table{"x-match": "all", "a": "1"}, nil, false},
		{"all: empty binding matches anything", amqp.Table{"x-match": "all"}, amqp.Table{"z": "9"}, true},
		{"any: one of two", amqp.Table{"x-match": "any", "a": "1", "b": "2"}, amqp.Table{"b": "2"}, true},
		{"any: none", amqp.Table{"x-match": "any", "a": "1", "b": "2"}, amqp.Table{"a": "2", "c": "1"}, false},
		{"any: empty binding matches nothing", amqp.Table{"x-match": "any"}, amqp.Table{"a": "1"}, false},
		{"value types differ", amqp.Table{"x-match": "all", "n": "1"}, amqp.Table{"n": int32(1)}, false},
		{"integers of other widths", amqp.Table{"x-match": "all", "n": int32(7)}, amqp.Table{"n": int64(7)}, true},
		{"booleans", amqp.Table{"x-match": "all", "f": true}, amqp.Table{"f": true}, true},
		{"all ignores x- binding args", amqp.Table{"x-match": "all", "x-k": "v", "a": "1"}, amqp.Table{"a": "1"}, true},
		{"any ignores x- headers", amqp.Table{"x-match": "any", "x-k": "v"}, amqp.Table{"x-k": "v"}, false},
		{"any-with-x matches x- headers", amqp.Table{"x-match": "any-with-x", "x-k": "v"}, amqp.Table{"x-k": "v"}, true},
		{"any-with-x: no match", amqp.Table{"x-match": "any-with-x", "x-k": "v"}, amqp.Table{"x-k": "w"}, false},
		{"all-with-x matches x- headers", amqp.Table{"x-match": "all-with-x", "x-k": "v", "a": "1"}, amqp.Table{"x-k": "v", "a": "1"}, true},
		{"all-with-x: x- header missing", amqp.Table{"x-match": "all-with-x", "x-k": "v", "a": "1"}, amqp.Table{"a": "1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := tg.x(fmt.Sprintf("headers-%d", i))
			must(t, ch.ExchangeDeclare(x, "headers", false, false, false, false, nil))
			q := tg.q(x)
			_, err := ch.QueueDeclare(q, false, false, false, false, nil)
			must(t, err)
			must(t, ch.QueueBind(q, "", x, false, tc.binding))
			publishConfirmed(t, ch, x, "any-key", amqp.Publishing{Headers: tc.headers, Body: []byte("m")})
			var want []string
			if tc.match {
				want = []string{"m"}
			}
			wantBodies(t, drain(t, ch, q), want...)
		})
	}

	t.Run("invalid x-match", func(t *testing.T) {
		c, ch := tg.channel()
		x := tg.x("headers-bad")
		must(t, ch.ExchangeDeclare(x, "headers", false, false, false, false, nil))
		q := tg.q(x)
		_, err := ch.QueueDeclare(q, false, false, false, false, nil)
		must(t, err)
		channelError(t, c, ch, 406, "", func() error {
			return ch.QueueBind(q, "", x, false, amqp.Table{"x-match": "some"})
		})
	})
}

// TestRoutingMandatoryReturn checks basic.return for unroutable mandatory
// messages, and that the return reaches the client before the confirm.
func TestRoutingMandatoryReturn(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	x := tg.x("mandatory")
	must(t, ch.ExchangeDeclare(x, "direct", false, false, false, false, nil))
	q := tg.q("mandatory-q")
	_, err := ch.QueueDeclare(q, false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q, "bound", x, false, nil))

	// Unbuffered: the client's reader hands returns and confirms over
	// one at a time, in the order the frames arrived.
	returns := ch.NotifyReturn(make(chan amqp.Return))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation))
	type event struct {
		ret  *amqp.Return
		conf *amqp.Confirmation
	}
	events := make(chan event, 16)
	go func() {
		for {
			select {
			case r, ok := <-returns:
				if !ok {
					return
				}
				events <- event{ret: &r}
			case c, ok := <-confirms:
				if !ok {
					return
				}
				events <- event{conf: &c}
			}
		}
	}()
	next := func() event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(5 * time.Second):
			t.Fatalf("timeout waiting for a return or confirm")
		}
		return event{}
	}
	pub := func(exchange, key string, mandatory bool, body string) {
		t.Helper()
		err := ch.PublishWithContext(context.Background(), exchange, key, mandatory, false,
			amqp.Publishing{Body: []byte(body), ContentType: "text/plain", Headers: amqp.Table{"h": "v"}})
		must(t, err)
	}

	// 1: unroutable and mandatory → basic.return 312 NO_ROUTE, then ack.
	pub(x, "unbound", true, "lost")
	e := next()
	if e.ret == nil {
		t.Fatalf("got a confirm %+v before the basic.return", e.conf)
	}
	r := e.ret
	if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || r.Exchange != x || r.RoutingKey != "unbound" ||
		string(r.Body) != "lost" || r.ContentType != "text/plain" || r.Headers["h"] != "v" {
		t.Fatalf("basic.return %d %q exchange %q key %q body %q", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey, r.Body)
	}
	e = next()
	if e.conf == nil || e.conf.DeliveryTag != 1 || !e.conf.Ack {
		t.Fatalf("want ack of tag 1 after the return, got %+v", e)
	}
	// 2: routable and mandatory → ack only.
	pub(x, "bound", true, "kept")
	if e = next(); e.conf == nil || e.conf.DeliveryTag != 2 || !e.conf.Ack {
		t.Fatalf("want ack of tag 2, got %+v", e)
	}
	// 3: unroutable, not mandatory → dropped silently, acked.
	pub(x, "unbound", false, "dropped")
	if e = next(); e.conf == nil || e.conf.DeliveryTag != 3 || !e.conf.Ack {
		t.Fatalf("want ack of tag 3, got %+v", e)
	}
	// 4: mandatory through the default exchange to a missing queue.
	pub("", tg.q("no-such-queue"), true, "nobody")
	if e = next(); e.ret == nil || e.ret.ReplyCode != 312 || e.ret.Exchange != "" {
		t.Fatalf("want basic.return from the default exchange, got %+v", e)
	}
	if e = next(); e.conf == nil || e.conf.DeliveryTag != 4 || !e.conf.Ack {
		t.Fatalf("want ack of tag 4, got %+v", e)
	}
	select {
	case e := <-events:
		t.Fatalf("unexpected %+v", e)
	case <-time.After(50 * time.Millisecond):
	}
	got := drain(t, ch, q)
	sort.Strings(got)
	wantBodies(t, got, "kept")
}

// TestRoutingMandatoryReturnWithoutConfirms checks basic.return on a
// channel that is not in confirm mode.
func TestRoutingMandatoryReturnWithoutConfirms(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.channel()
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	must(t, ch.PublishWithContext(context.Background(), "amq.direct", tg.pfx+"nobody-bound", true, false, text("r")))
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || r.Exchange != "amq.direct" || string(r.Body) != "r" {
			t.Fatalf("basic.return %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no basic.return")
	}
}
