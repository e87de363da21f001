package test

// Black-box tests of queue arguments (TTL, expiry, length limits,
// dead-lettering, priorities, single active consumer) and consumer
// priorities, as RabbitMQ 3.x shows them. See amqp_topology_test.go for
// the target and helpers.

import (
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// declareQueue declares a transient queue with args.
func declareQueue(t testing.TB, ch *amqp.Channel, name string, args amqp.Table) {
	t.Helper()
	if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
}

// getOne takes one message with basic.get (no-ack), failing if there is none.
func getOne(t testing.TB, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("basic.get %s: %v", queue, err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message in %s", queue)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// deathOf returns the entries of a delivery's x-death header.
func deathOf(t testing.TB, d amqp.Delivery) []amqp.Table {
	t.Helper()
	raw, ok := d.Headers["x-death"].([]interface{})
	if !ok {
		t.Fatalf("no x-death array in headers %v", d.Headers)
	}
	out := make([]amqp.Table, 0, len(raw))
	for _, e := range raw {
		tb, ok := e.(amqp.Table)
		if !ok {
			t.Fatalf("x-death entry %v is a %T", e, e)
		}
		out = append(out, tb)
	}
	return out
}

// checkDeath checks one x-death entry as RabbitMQ writes it.
func checkDeath(t testing.TB, e amqp.Table, count int64, reason, queue, exchange string, keys ...string) {
	t.Helper()
	if n, ok := e["count"].(int64); !ok || n != count {
		t.Errorf("x-death count %v (%T), want int64 %d", e["count"], e["count"], count)
	}
	if e["reason"] != reason {
		t.Errorf("x-death reason %v, want %q", e["reason"], reason)
	}
	if e["queue"] != queue {
		t.Errorf("x-death queue %v, want %q", e["queue"], queue)
	}
	if e["exchange"] != exchange {
		t.Errorf("x-death exchange %v, want %q", e["exchange"], exchange)
	}
	rk, ok := e["routing-keys"].([]interface{})
	if !ok || len(rk) != len(keys) {
		t.Errorf("x-death routing-keys %v, want %q", e["routing-keys"], keys)
	} else {
		for i := range keys {
			if rk[i] != keys[i] {
				t.Errorf("x-death routing-keys %v, want %q", rk, keys)
			}
		}
	}
	ts, ok := e["time"].(time.Time)
	if !ok {
		t.Errorf("x-death time %v is a %T, want a timestamp", e["time"], e["time"])
	} else if d := time.Since(ts); d < -2*time.Second || d > time.Minute {
		t.Errorf("x-death time %v is not now", ts)
	}
}

// dlxSetup declares a fanout DLX with a queue bound to it and returns
// the names.
func dlxSetup(t *testing.T, tg *target, ch *amqp.Channel) (dlx, dlq string) {
	t.Helper()
	dlx, dlq = tg.x("dlx"), tg.q("dlq")
	must(t, ch.ExchangeDeclare(dlx, "fanout", false, false, false, false, nil))
	declareQueue(t, ch, dlq, nil)
	must(t, ch.QueueBind(dlq, "", dlx, false, nil))
	return dlx, dlq
}

// --- TTL and expiry ---

func TestQueueMessageTTL(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	q := tg.q("ttl")
	declareQueue(t, ch, q, amqp.Table{"x-message-ttl": int32(100)})
	publishConfirmed(t, ch, "", q, text("expires"))
	// Still there before the TTL.
	d := getOne(t, ch, q)
	if string(d.Body) != "expires" {
		t.Fatalf("got %q", d.Body)
	}
	publishConfirmed(t, ch, "", q, text("expires too"))
	time.Sleep(200 * time.Millisecond)
	wantBodies(t, drain(t, ch, q))
	// A consumer that comes later gets nothing either.
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	must(t, err)
	noDelivery(t, ds, 50*time.Millisecond)
	info, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	must(t, err)
	if info.Messages != 0 {
		t.Fatalf("%d messages after expiry", info.Messages)
	}
}

func TestQueueMessageTTLZero(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	q := tg.q("ttl0")
	declareQueue(t, ch, q, amqp.Table{"x-message-ttl": int32(0)})
	// Without a consumer, a message with TTL 0 is dropped at once.
	publishConfirmed(t, ch, "", q, text("gone"))
	time.Sleep(20 * time.Millisecond)
	wantBodies(t, drain(t, ch, q))
}

func TestPerMessageExpiration(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	q := tg.q("expiration")
	declareQueue(t, ch, q, nil)
	publishConfirmed(t, ch, "", q, amqp.Publishing{Body: []byte("long"), Expiration: "60000"})
	publishConfirmed(t, ch, "", q, amqp.Publishing{Body: []byte("short"), Expiration: "50"})
	publishConfirmed(t, ch, "", q, amqp.Publishing{Body: []byte("none")})
	time.Sleep(150 * time.Millisecond)
	// "short" expired; it is not delivered although it was behind a live
	// message (RabbitMQ drops it when it reaches the head).
	d := getOne(t, ch, q)
	if string(d.Body) != "long" || d.Expiration != "60000" {
		t.Fatalf("got %q expiration %q", d.Body, d.Expiration)
	}
	wantBodies(t, drain(t, ch, q), "none")

	// The lower of queue TTL and per-message expiration wins.
	q2 := tg.q("expiration-ttl")
	declareQueue(t, ch, q2, amqp.Table{"x-message-ttl": int32(60000)})
	publishConfirmed(t, ch, "", q2, amqp.Publishing{Body: []byte("short"), Expiration: "50"})
	time.Sleep(150 * time.Millisecond)
	wantBodies(t, drain(t, ch, q2))
}

func TestInvalidExpirationRefused(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	q := tg.q("bad-expiration")
	declareQueue(t, ch, q, nil)
	for _, tc := range []struct{ exp, why string }{
		{"soon", "no_integer"},
		{"-1", "{value_negative,-1}"},
		{"1.5", `{leftover_string,".5"}`},
	} {
		t.Run(tc.exp, func(t *testing.T) {
			ch := newChannel(t, c)
			closed := ch.NotifyClose(make(chan *amqp.Error, 1))
			publish(t, ch, "", q, amqp.Publishing{Body: []byte("x"), Expiration: tc.exp})
			channelClosedBy(t, closed, 406, "PRECONDITION_FAILED - invalid expiration '"+tc.exp+"': "+tc.why)
		})
	}
	wantBodies(t, drain(t, ch, q))
}

func TestQueueExpires(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.channel()
	q := tg.q("expires")
	declareQueue(t, ch, q, amqp.Table{"x-expires": int32(100)})
	// A consumer keeps it alive.
	busy := tg.q("expires-busy")
	declareQueue(t, ch, busy, amqp.Table{"x-expires": int32(100)})
	_, err := ch.Consume(busy, "", true, false, false, false, nil)
	must(t, err)

	// Redeclaring (passively too) renews the lease.
	renewed := tg.q("expires-renewed")
	declareQueue(t, ch, renewed, amqp.Table{"x-expires": int32(150)})

	for i := 0; i < 3; i++ {
		time.Sleep(100 * time.Millisecond)
		_, err = ch.QueueDeclarePassive(renewed, false, false, false, false, nil)
		must(t, err)
	}
	queueGone(t, c, q)
	_, err = ch.QueueDeclarePassive(busy, false, false, false, false, nil)
	must(t, err)
}

// --- length limits ---

func TestQueueMaxLengthDropHead(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	for _, args := range []amqp.Table{
		{"x-max-length": int32(2)},
		{"x-max-length": int32(2), "x-overflow": "drop-head"},
	} {
		q := tg.q("maxlen-" + strconv.Itoa(len(args)))
		declareQueue(t, ch, q, args)
		for _, b := range []string{"1", "2", "3", "4"} {
			if !publishConfirmed(t, ch, "", q, text(b)) {
				t.Fatalf("publish %s nacked", b)
			}
		}
		wantBodies(t, drain(t, ch, q), "3", "4")
	}
	// x-max-length 0 keeps nothing.
	q := tg.q("maxlen-0")
	declareQueue(t, ch, q, amqp.Table{"x-max-length": int32(0)})
	publishConfirmed(t, ch, "", q, text("x"))
	wantBodies(t, drain(t, ch, q))
}

func TestQueueMaxLengthBytes(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	q := tg.q("maxbytes")
	declareQueue(t, ch, q, amqp.Table{"x-max-length-bytes": int32(10)})
	for _, b := range []string{"aaaaa", "bbbbb", "ccccc"} {
		publishConfirmed(t, ch, "", q, text(b))
	}
	wantBodies(t, drain(t, ch, q), "bbbbb", "ccccc")

	q2 := tg.q("maxbytes-reject")
	declareQueue(t, ch, q2, amqp.Table{"x-max-length-bytes": int32(10), "x-overflow": "reject-publish"})
	for _, tc := range []struct {
		body string
		ack  bool
	}{{"aaaaa", true}, {"bbbbb", true}, {"c", false}} {
		if got := publishConfirmed(t, ch, "", q2, text(tc.body)); got != tc.ack {
			t.Fatalf("publish %q: ack %v, want %v", tc.body, got, tc.ack)
		}
	}
	wantBodies(t, drain(t, ch, q2), "aaaaa", "bbbbb")
}

func TestQueueOverflowRejectPublish(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	q := tg.q("reject-publish")
	declareQueue(t, ch, q, amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"})
	for i, want := range []bool{true, true, false, false} {
		if got := publishConfirmed(t, ch, "", q, text(strconv.Itoa(i+1))); got != want {
			t.Fatalf("publish %d: ack %v, want %v", i+1, got, want)
		}
	}
	wantBodies(t, drain(t, ch, q), "1", "2")
	// With room again, publishes are accepted.
	if !publishConfirmed(t, ch, "", q, text("5")) {
		t.Fatalf("publish after drain nacked")
	}
	wantBodies(t, drain(t, ch, q), "5")
}

func TestQueueOverflowRejectPublishDLX(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	dlx, dlq := dlxSetup(t, tg, ch)
	q := tg.q("reject-publish-dlx")
	declareQueue(t, ch, q, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish-dlx",
		"x-dead-letter-exchange": dlx})
	if !publishConfirmed(t, ch, "", q, text("1")) {
		t.Fatalf("first publish nacked")
	}
	if publishConfirmed(t, ch, "", q, text("2")) {
		t.Fatalf("publish over the limit acked")
	}
	wantBodies(t, drain(t, ch, q), "1")
	d := getOne(t, ch, dlq)
	if string(d.Body) != "2" {
		t.Fatalf("dead-lettered %q", d.Body)
	}
	deaths := deathOf(t, d)
	if len(deaths) != 1 {
		t.Fatalf("x-death %v", deaths)
	}
	checkDeath(t, deaths[0], 1, "maxlen", q, "", q)
}

// --- dead-lettering ---

func TestDeadLetterRejected(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.confirmChannel()
	dlx, dlq := dlxSetup(t, tg, ch)
	src := tg.x("dl-src")
	must(t, ch.ExchangeDeclare(src, "direct", false, false, false, false, nil))
	q := tg.q("dl-rejected")
	declareQueue(t, ch, q, amqp.Table{"x-dead-letter-exchange": dlx})
	must(t, ch.QueueBind(q, "orig-key", src, false, nil))

	cc := newChannel(t, c)
	ds, err := cc.Consume(q, "", false, false, false, false, nil)
	must(t, err)
	for _, tc := range []struct {
		name    string
		settle  func(d amqp.Delivery) error
		requeue bool
	}{
		{"reject", func(d amqp.Delivery) error { return d.Reject(false) }, false},
		{"nack", func(d amqp.Delivery) error { return d.Nack(false, false) }, false},
		{"nack multiple", func(d amqp.Delivery) error { return d.Nack(true, false) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			publishConfirmed(t, ch, src, "orig-key", amqp.Publishing{Body: []byte(tc.name), Headers: amqp.Table{"app": "kept"}})
			d := receive(t, ds)
			must(t, tc.settle(d))
			dl := getOne(t, ch, dlq)
			if string(dl.Body) != tc.name || dl.Exchange != dlx || dl.RoutingKey != "orig-key" || dl.Headers["app"] != "kept" {
				t.Fatalf("dead-lettered %q via %q key %q headers %v", dl.Body, dl.Exchange, dl.RoutingKey, dl.Headers)
			}
			deaths := deathOf(t, dl)
			if len(deaths) != 1 {
				t.Fatalf("x-death %v", deaths)
			}
			checkDeath(t, deaths[0], 1, "rejected", q, src, "orig-key")
			if dl.Headers["x-first-death-reason"] != "rejected" || dl.Headers["x-first-death-queue"] != q ||
				dl.Headers["x-first-death-exchange"] != src {
				t.Fatalf("x-first-death-* headers %v", dl.Headers)
			}
		})
	}
	// Requeued rejections are not dead-lettered.
	publishConfirmed(t, ch, src, "orig-key", text("requeued"))
	d := receive(t, ds)
	must(t, d.Reject(true))
	d = receive(t, ds)
	if string(d.Body) != "requeued" || !d.Redelivered {
		t.Fatalf("got %q redelivered=%v", d.Body, d.Redelivered)
	}
	must(t, d.Ack(false))
	wantBodies(t, drain(t, ch, dlq))
}

func TestDeadLetterRoutingKey(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.confirmChannel()
	dlx := tg.x("dlrk-x")
	must(t, ch.ExchangeDeclare(dlx, "direct", false, false, false, false, nil))
	dlq := tg.q("dlrk-dlq")
	declareQueue(t, ch, dlq, nil)
	must(t, ch.QueueBind(dlq, "dead", dlx, false, nil))
	q := tg.q("dlrk")
	declareQueue(t, ch, q, amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "dead"})

	cc := newChannel(t, c)
	d, ok, err := cc.Get(q, false)
	must(t, err)
	if ok {
		t.Fatalf("queue not empty")
	}
	publishConfirmed(t, ch, "", q, text("m"))
	d, ok, err = cc.Get(q, false)
	must(t, err)
	if !ok {
		t.Fatalf("basic.get-empty")
	}
	must(t, d.Reject(false))
	dl := getOne(t, ch, dlq)
	if dl.RoutingKey != "dead" || dl.Exchange != dlx {
		t.Fatalf("dead-lettered via %q with key %q", dl.Exchange, dl.RoutingKey)
	}
	// routing-keys keeps the original key; exchange the original exchange.
	checkDeath(t, deathOf(t, dl)[0], 1, "rejected", q, "", q)
}

func TestDeadLetterDefaultExchangeCount(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	// q dead-letters back into itself; rejection breaks the cycle check,
	// and the second death of the same reason in the same queue counts 2.
	q := tg.q("dl-self")
	declareQueue(t, ch, q, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q})
	publishConfirmed(t, ch, "", q, text("m"))
	for want := int64(1); want <= 2; want++ {
		var d amqp.Delivery
		var ok bool
		var err error
		for deadline := time.Now().Add(5 * time.Second); !ok; {
			d, ok, err = ch.Get(q, false)
			must(t, err)
			if !ok && time.Now().After(deadline) {
				t.Fatalf("message not dead-lettered back")
			}
		}
		if want > 1 {
			deaths := deathOf(t, d)
			if len(deaths) != 1 {
				t.Fatalf("x-death %v", deaths)
			}
			checkDeath(t, deaths[0], want-1, "rejected", q, "", q)
		}
		must(t, d.Reject(false))
	}
	d := getOne(t, ch, q)
	deaths := deathOf(t, d)
	if len(deaths) != 1 {
		t.Fatalf("x-death %v", deaths)
	}
	checkDeath(t, deaths[0], 2, "rejected", q, "", q)
}

func TestDeadLetterExpired(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	dlx, dlq := dlxSetup(t, tg, ch)

	t.Run("queue ttl", func(t *testing.T) {
		q := tg.q("dl-ttl")
		declareQueue(t, ch, q, amqp.Table{"x-message-ttl": int32(50), "x-dead-letter-exchange": dlx})
		must(t, ch.QueueBind(q, "ttl-key", "amq.direct", false, nil))
		publishConfirmed(t, ch, "amq.direct", "ttl-key", text("ttl"))
		dl := getOne(t, ch, dlq)
		if string(dl.Body) != "ttl" {
			t.Fatalf("dead-lettered %q", dl.Body)
		}
		deaths := deathOf(t, dl)
		if len(deaths) != 1 {
			t.Fatalf("x-death %v", deaths)
		}
		checkDeath(t, deaths[0], 1, "expired", q, "amq.direct", "ttl-key")
		if _, ok := deaths[0]["original-expiration"]; ok {
			t.Fatalf("original-expiration without a per-message expiration: %v", deaths[0])
		}
	})
	t.Run("per-message expiration", func(t *testing.T) {
		q := tg.q("dl-expiration")
		declareQueue(t, ch, q, amqp.Table{"x-dead-letter-exchange": dlx})
		publishConfirmed(t, ch, "", q, amqp.Publishing{Body: []byte("exp"), Expiration: "50"})
		dl := getOne(t, ch, dlq)
		if string(dl.Body) != "exp" || dl.Expiration != "" {
			t.Fatalf("dead-lettered %q with expiration %q", dl.Body, dl.Expiration)
		}
		deaths := deathOf(t, dl)
		checkDeath(t, deaths[0], 1, "expired", q, "", q)
		if deaths[0]["original-expiration"] != "50" {
			t.Fatalf("original-expiration %v, want \"50\"", deaths[0]["original-expiration"])
		}
	})
}

func TestDeadLetterMaxLength(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	dlx, dlq := dlxSetup(t, tg, ch)
	q := tg.q("dl-maxlen")
	declareQueue(t, ch, q, amqp.Table{"x-max-length": int32(1), "x-dead-letter-exchange": dlx})
	publishConfirmed(t, ch, "", q, text("old"))
	publishConfirmed(t, ch, "", q, text("new"))
	wantBodies(t, drain(t, ch, q), "new")
	dl := getOne(t, ch, dlq)
	if string(dl.Body) != "old" {
		t.Fatalf("dead-lettered %q, want the oldest", dl.Body)
	}
	checkDeath(t, deathOf(t, dl)[0], 1, "maxlen", q, "", q)
}

// --- priorities and consumers ---

func TestQueueMaxPriority(t *testing.T) {
	tg := newTarget(t)
	_, ch := tg.confirmChannel()
	q := tg.q("priority")
	declareQueue(t, ch, q, amqp.Table{"x-max-priority": int32(10)})
	for _, p := range []struct {
		body string
		prio uint8
	}{{"p1", 1}, {"p0", 0}, {"p5a", 5}, {"p9", 9}, {"p5b", 5}, {"p200", 200}} {
		publishConfirmed(t, ch, "", q, amqp.Publishing{Body: []byte(p.body), Priority: p.prio})
	}
	// Highest first, FIFO within a priority; above the maximum counts as
	// the maximum.
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	must(t, err)
	var got []string
	for i := 0; i < 6; i++ {
		got = append(got, string(receive(t, ds).Body))
	}
	wantBodies(t, got, "p200", "p9", "p5a", "p5b", "p1", "p0")
}

func TestSingleActiveConsumer(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.confirmChannel()
	q := tg.q("sac")
	declareQueue(t, ch, q, amqp.Table{"x-single-active-consumer": true})
	ch1, ch2 := newChannel(t, c), newChannel(t, c)
	ds1, err := ch1.Consume(q, "first", true, false, false, false, nil)
	must(t, err)
	ds2, err := ch2.Consume(q, "second", true, false, false, false, nil)
	must(t, err)
	for _, b := range []string{"1", "2", "3"} {
		publishConfirmed(t, ch, "", q, text(b))
	}
	for _, b := range []string{"1", "2", "3"} {
		if d := receive(t, ds1); string(d.Body) != b {
			t.Fatalf("first consumer got %q, want %q", d.Body, b)
		}
	}
	noDelivery(t, ds2, 50*time.Millisecond)

	// When the active consumer cancels, the other takes over.
	must(t, ch1.Cancel("first", false))
	publishConfirmed(t, ch, "", q, text("4"))
	if d := receive(t, ds2); string(d.Body) != "4" {
		t.Fatalf("second consumer got %q", d.Body)
	}
}

func TestConsumerPriority(t *testing.T) {
	tg := newTarget(t)
	c, ch := tg.confirmChannel()
	q := tg.q("cprio")
	declareQueue(t, ch, q, nil)
	low, high := newChannel(t, c), newChannel(t, c)
	must(t, high.Qos(2, 0, false))
	dsLow, err := low.Consume(q, "low", false, false, false, false, amqp.Table{"x-priority": int32(1)})
	must(t, err)
	dsHigh, err := high.Consume(q, "high", false, false, false, false, amqp.Table{"x-priority": int32(10)})
	must(t, err)

	// While the high-priority consumer has room, it gets everything.
	publishConfirmed(t, ch, "", q, text("1"))
	publishConfirmed(t, ch, "", q, text("2"))
	h1, h2 := receive(t, dsHigh), receive(t, dsHigh)
	if string(h1.Body) != "1" || string(h2.Body) != "2" {
		t.Fatalf("high got %q %q", h1.Body, h2.Body)
	}
	noDelivery(t, dsLow, 30*time.Millisecond)
	// Its prefetch full, the next message goes to the low one.
	publishConfirmed(t, ch, "", q, text("3"))
	if d := receive(t, dsLow); string(d.Body) != "3" {
		t.Fatalf("low got %q", d.Body)
	}
	noDelivery(t, dsHigh, 30*time.Millisecond)
}
