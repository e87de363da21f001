package exchange

import (
	"strings"
	"testing"
	"time"
)

func TestMessageTTL(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-message-ttl": int32(20)}})
	publish(t, v, "", "q", "old")
	time.Sleep(40 * time.Millisecond)
	publish(t, v, "", "q", "new")
	if got := getBodies(q); !equalStrings(got, []string{"new"}) {
		t.Fatalf("got %v, want only the unexpired message", got)
	}
	// The expiry timer removes expired messages without a reader.
	publish(t, v, "", "q", "x")
	eventually(t, 2*time.Second, "expiry timer", func() bool { return ready(q) == 0 })
}

func TestMessageTTLZeroDeliversToWaitingConsumer(t *testing.T) {
	// RabbitMQ: with x-message-ttl 0 a message reaches a consumer that
	// can take it at once, and expires otherwise.
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-message-ttl": int32(0)}})
	publish(t, v, "", "q", "nobody")
	time.Sleep(2 * time.Millisecond)
	if d, ok := q.Get(true); ok {
		t.Fatalf("ttl 0 message kept: %s", d.Msg.Body)
	}
	_, s := consume(t, v, "q", ConsumeOpts{NoAck: true})
	publish(t, v, "", "q", "live")
	if got := s.bodies(); !equalStrings(got, []string{"live"}) {
		t.Fatalf("consumer got %v", got)
	}
}

func TestPerMessageExpiration(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	m := &Message{Exchange: "", RoutingKey: "q", Body: []byte("short")}
	m.Props.Expiration = "10"
	publishM(t, v, m, PublishOpts{})
	m2 := &Message{Exchange: "", RoutingKey: "q", Body: []byte("long")}
	m2.Props.Expiration = "60000"
	publishM(t, v, m2, PublishOpts{})
	publish(t, v, "", "q", "none")
	time.Sleep(30 * time.Millisecond)
	if got := getBodies(q); !equalStrings(got, []string{"long", "none"}) {
		t.Fatalf("got %v", got)
	}
	// The shorter of queue TTL and expiration wins.
	q2 := declareQ(t, v, "q2", QueueOpts{Args: Table{"x-message-ttl": int32(60000)}})
	m3 := &Message{Exchange: "", RoutingKey: "q2", Body: []byte("m")}
	m3.Props.Expiration = "5"
	publishM(t, v, m3, PublishOpts{})
	eventually(t, 2*time.Second, "per-message expiry on a TTL queue", func() bool { return ready(q2) == 0 })
	// A bad expiration is ignored (the front end validates it).
	m4 := &Message{Exchange: "", RoutingKey: "q", Body: []byte("bad")}
	m4.Props.Expiration = "soon"
	publishM(t, v, m4, PublishOpts{})
	if got := getBodies(q); !equalStrings(got, []string{"bad"}) {
		t.Fatalf("got %v", got)
	}
}

// dlxSetup declares a fanout DLX "dlx" with queue "dead" bound to it.
func dlxSetup(t *testing.T, v *VHost) *Queue {
	t.Helper()
	declareX(t, v, "dlx", KindFanout, ExchangeOpts{})
	dead := declareQ(t, v, "dead", QueueOpts{})
	bindQ(t, v, "dead", "dlx", "", nil)
	return dead
}

func deathOf(t *testing.T, m *Message) []Table {
	t.Helper()
	raw, ok := m.Props.Headers["x-death"].([]any)
	if !ok {
		t.Fatalf("no x-death in %v", m.Props.Headers)
	}
	out := make([]Table, len(raw))
	for i, d := range raw {
		tb, ok := asTable(d)
		if !ok {
			t.Fatalf("x-death entry %T", d)
		}
		out[i] = tb
	}
	return out
}

func TestDeadLetterExpired(t *testing.T) {
	v, _ := newTestVHost(t)
	dead := dlxSetup(t, v)
	declareQ(t, v, "q", QueueOpts{Args: Table{"x-message-ttl": int32(10), "x-dead-letter-exchange": "dlx"}})
	declareX(t, v, "src", KindDirect, ExchangeOpts{})
	bindQ(t, v, "q", "src", "rk", nil)
	m := &Message{Exchange: "src", RoutingKey: "rk", Body: []byte("m")}
	m.Props.Headers = Table{"app": "h"}
	m.Props.Expiration = "50000"
	before := time.Now().UTC().Truncate(time.Second)
	publishM(t, v, m, PublishOpts{})
	eventually(t, 2*time.Second, "dead-lettering", func() bool { return ready(dead) == 1 })
	d, _ := dead.Get(true)
	dm := d.Msg
	if dm.Exchange != "dlx" || dm.RoutingKey != "rk" || string(dm.Body) != "m" {
		t.Fatalf("dead letter %q %q %q", dm.Exchange, dm.RoutingKey, dm.Body)
	}
	if dm.Props.Expiration != "" {
		t.Fatalf("expiration kept: %q", dm.Props.Expiration)
	}
	if dm.Props.Headers["app"] != "h" {
		t.Fatalf("headers lost: %v", dm.Props.Headers)
	}
	if _, ok := m.Props.Headers["x-death"]; ok {
		t.Fatal("the original message's headers were modified")
	}
	xd := deathOf(t, dm)
	if len(xd) != 1 {
		t.Fatalf("x-death %v", xd)
	}
	e := xd[0]
	if n, _ := asInt64(e["count"]); n != 1 {
		t.Errorf("count %v", e["count"])
	}
	for k, want := range map[string]any{"reason": "expired", "queue": "q", "exchange": "src", "original-expiration": "50000"} {
		if e[k] != want {
			t.Errorf("x-death %s = %v, want %v", k, e[k], want)
		}
	}
	if rk, _ := e["routing-keys"].([]any); len(rk) != 1 || rk[0] != "rk" {
		t.Errorf("routing-keys %v", e["routing-keys"])
	}
	if tm, ok := e["time"].(time.Time); !ok || tm.Before(before) || tm.After(time.Now().Add(time.Second)) {
		t.Errorf("time %v", e["time"])
	}
	h := dm.Props.Headers
	if h["x-first-death-reason"] != "expired" || h["x-first-death-queue"] != "q" || h["x-first-death-exchange"] != "src" {
		t.Errorf("x-first-death-* %v", h)
	}
}

func TestDeadLetterRoutingKeyAndMissingDLX(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "dlx", KindDirect, ExchangeOpts{})
	dead := declareQ(t, v, "dead", QueueOpts{})
	bindQ(t, v, "dead", "dlx", "dl-key", nil)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dl-key"}})
	publish(t, v, "", "q", "m")
	d, _ := q.Get(false)
	q.Reject([]uint64{d.Seq}, false)
	if ready(dead) != 1 {
		t.Fatalf("not dead-lettered by x-dead-letter-routing-key")
	}
	dd, _ := dead.Get(true)
	if dd.Msg.RoutingKey != "dl-key" {
		t.Fatalf("routing key %q", dd.Msg.RoutingKey)
	}
	e := deathOf(t, dd.Msg)[0]
	if e["reason"] != "rejected" || e["exchange"] != "" {
		t.Fatalf("x-death %v", e)
	}
	if rk, _ := e["routing-keys"].([]any); len(rk) != 1 || rk[0] != "q" {
		t.Errorf("routing-keys %v, want the original key", e["routing-keys"])
	}
	// A DLX that does not exist: the message is dropped.
	q2 := declareQ(t, v, "q2", QueueOpts{Args: Table{"x-dead-letter-exchange": "gone"}})
	publish(t, v, "", "q2", "m")
	d, _ = q2.Get(false)
	q2.Reject([]uint64{d.Seq}, false)
	if r, u, _ := q2.Stats(); r != 0 || u != 0 {
		t.Fatalf("q2 ready %d unacked %d", r, u)
	}
}

func TestDeathCountIncrements(t *testing.T) {
	// a and b dead-letter into each other via the default exchange; a
	// rejected message cycles, and the count for (a, rejected) grows.
	v, _ := newTestVHost(t)
	a := declareQ(t, v, "a", QueueOpts{Args: Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"}})
	b := declareQ(t, v, "b", QueueOpts{Args: Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"}})
	publish(t, v, "", "a", "m")
	rejectOne := func(q *Queue) {
		t.Helper()
		d, ok := q.Get(false)
		if !ok {
			t.Fatalf("queue %s empty", q.Name())
		}
		q.Reject([]uint64{d.Seq}, false)
	}
	rejectOne(a)
	rejectOne(b)
	rejectOne(a)
	d, ok := b.Get(true)
	if !ok {
		t.Fatal("message lost in the cycle")
	}
	xd := deathOf(t, d.Msg)
	if len(xd) != 2 {
		t.Fatalf("x-death has %d entries: %v", len(xd), xd)
	}
	if xd[0]["queue"] != "a" || xd[0]["reason"] != "rejected" {
		t.Fatalf("most recent death first: %v", xd[0])
	}
	if n, _ := asInt64(xd[0]["count"]); n != 2 {
		t.Fatalf("count for a = %v, want 2", xd[0]["count"])
	}
	if n, _ := asInt64(xd[1]["count"]); n != 1 || xd[1]["queue"] != "b" {
		t.Fatalf("entry for b: %v", xd[1])
	}
	h := d.Msg.Props.Headers
	if h["x-first-death-queue"] != "a" || h["x-first-death-reason"] != "rejected" {
		t.Fatalf("x-first-death-* %v", h)
	}
}

func TestDeadLetterCycleWithoutRejectDropped(t *testing.T) {
	// A queue that dead-letters expired messages back to itself: RabbitMQ
	// drops the message rather than loop.
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "loop", QueueOpts{Args: Table{"x-message-ttl": int32(5), "x-dead-letter-exchange": ""}})
	publish(t, v, "", "loop", "m")
	time.Sleep(50 * time.Millisecond)
	if ready(q) != 0 {
		t.Fatalf("expired message cycled back: ready %d", ready(q))
	}
}

func TestMaxLengthDropHead(t *testing.T) {
	v, _ := newTestVHost(t)
	dead := dlxSetup(t, v)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-length": int32(2), "x-dead-letter-exchange": "dlx"}})
	for _, b := range []string{"1", "2", "3", "4"} {
		if r := publish(t, v, "", "q", b); r.Routed != 1 || !r.OK {
			t.Fatalf("drop-head publish: %+v", r)
		}
	}
	var dl []string
	for {
		d, ok := dead.Get(true)
		if !ok {
			break
		}
		dl = append(dl, string(d.Msg.Body))
		if r := deathOf(t, d.Msg)[0]["reason"]; r != "maxlen" {
			t.Fatalf("reason %v", r)
		}
	}
	if !equalStrings(dl, []string{"1", "2"}) {
		t.Fatalf("dead-lettered %v, want the oldest", dl)
	}
	if got := getBodies(q); !equalStrings(got, []string{"3", "4"}) {
		t.Fatalf("kept %v", got)
	}
}

func TestMaxLengthRejectPublish(t *testing.T) {
	v, _ := newTestVHost(t)
	dead := dlxSetup(t, v)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-length": int32(2), "x-overflow": "reject-publish", "x-dead-letter-exchange": "dlx"}})
	other := declareQ(t, v, "other", QueueOpts{})
	bindQ(t, v, "q", "amq.fanout", "", nil)
	bindQ(t, v, "other", "amq.fanout", "", nil)
	for i, b := range []string{"1", "2", "3"} {
		r := publish(t, v, "amq.fanout", "", b)
		if wantOK := i < 2; r.OK != wantOK {
			t.Fatalf("publish %s: %+v, want OK=%v", b, r, wantOK)
		}
		if wantRouted := map[bool]int{true: 2, false: 1}[i < 2]; r.Routed != wantRouted {
			t.Fatalf("publish %s: routed %d, want %d", b, r.Routed, wantRouted)
		}
	}
	if ready(dead) != 0 {
		t.Fatal("reject-publish dead-lettered")
	}
	if got := getBodies(q); !equalStrings(got, []string{"1", "2"}) {
		t.Fatalf("q kept %v", got)
	}
	if ready(other) != 3 {
		t.Fatalf("other queue got %d", ready(other))
	}
	// Room again after consuming.
	if r := publish(t, v, "", "q", "4"); !r.OK || r.Routed != 1 {
		t.Fatalf("after drain: %+v", r)
	}
}

func TestMaxLengthRejectPublishDLX(t *testing.T) {
	v, _ := newTestVHost(t)
	dead := dlxSetup(t, v)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-length": int32(1), "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "dlx"}})
	publish(t, v, "", "q", "1")
	if r := publish(t, v, "", "q", "2"); r.OK || r.Routed != 0 {
		t.Fatalf("over limit: %+v", r)
	}
	d, ok := dead.Get(true)
	if !ok || string(d.Msg.Body) != "2" || deathOf(t, d.Msg)[0]["reason"] != "maxlen" {
		t.Fatalf("rejected message not dead-lettered as maxlen: %v", ok)
	}
	if got := getBodies(q); !equalStrings(got, []string{"1"}) {
		t.Fatalf("kept %v", got)
	}
}

func TestMaxLengthBytes(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-length-bytes": int64(10)}})
	publish(t, v, "", "q", "aaaa")
	publish(t, v, "", "q", "bbbb")
	publish(t, v, "", "q", "cccc") // 12 bytes: drop the head
	if got := getBodies(q); !equalStrings(got, []string{"bbbb", "cccc"}) {
		t.Fatalf("kept %v", got)
	}
	r := declareQ(t, v, "r", QueueOpts{Args: Table{"x-max-length-bytes": int64(5), "x-overflow": "reject-publish"}})
	if res := publish(t, v, "", "r", "12345"); !res.OK {
		t.Fatalf("exactly at limit refused: %+v", res)
	}
	if res := publish(t, v, "", "r", "6"); res.OK {
		t.Fatalf("over byte limit accepted: %+v", res)
	}
	if ready(r) != 1 {
		t.Fatalf("r holds %d", ready(r))
	}
}

func TestMaxLengthDoesNotCountUnacked(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}})
	publish(t, v, "", "q", "1")
	q.Get(false)
	if r := publish(t, v, "", "q", "2"); !r.OK {
		t.Fatalf("unacked message counted towards x-max-length: %+v", r)
	}
}

func TestMaxPriority(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-priority": int32(5)}})
	pubP := func(body string, prio uint8) {
		m := &Message{RoutingKey: "q", Body: []byte(body)}
		m.Props.Priority = prio
		publishM(t, v, m, PublishOpts{})
	}
	pubP("p0a", 0)
	pubP("p3a", 3)
	pubP("p9a", 9) // above max: treated as max
	pubP("p3b", 3)
	pubP("p5a", 5)
	pubP("p0b", 0)
	want := []string{"p9a", "p5a", "p3a", "p3b", "p0a", "p0b"}
	if got := getBodies(q); !equalStrings(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// Without x-max-priority the priority is ignored.
	f := declareQ(t, v, "fifo", QueueOpts{})
	for i, p := range []uint8{0, 9, 1} {
		m := &Message{RoutingKey: "fifo", Body: []byte{'a' + byte(i)}}
		m.Props.Priority = p
		publishM(t, v, m, PublishOpts{})
	}
	if got := getBodies(f); !equalStrings(got, []string{"a", "b", "c"}) {
		t.Fatalf("fifo %v", got)
	}
}

func TestPriorityRequeue(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-priority": int32(2)}})
	for i, p := range []uint8{1, 2, 1} {
		m := &Message{RoutingKey: "q", Body: []byte{'a' + byte(i)}}
		m.Props.Priority = p
		publishM(t, v, m, PublishOpts{})
	}
	d1, _ := q.Get(false) // b (2)
	d2, _ := q.Get(false) // a (1)
	q.Reject([]uint64{d2.Seq, d1.Seq}, true)
	if got := strings.Join(getBodies(q), ""); got != "bac" {
		t.Fatalf("after requeue %q, want bac", got)
	}
}
