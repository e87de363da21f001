package exchange

import (
	"strings"
	"testing"
	"time"
)

func TestQueueDeclareEquivalence(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{Args: Table{"x-message-ttl": int32(1000), "x-max-length": int64(10)}})
	// Numbers compare by value whatever their width.
	if _, err := v.DeclareQueue("q", QueueOpts{Args: Table{"x-message-ttl": int64(1000), "x-max-length": uint16(10)}}); err != nil {
		t.Fatalf("equivalent redeclare: %v", err)
	}
	// x-queue-type classic is the default.
	if _, err := v.DeclareQueue("q", QueueOpts{Args: Table{"x-message-ttl": int64(1000), "x-max-length": int64(10), "x-queue-type": "classic"}}); err != nil {
		t.Fatalf("redeclare with x-queue-type classic: %v", err)
	}
	tt := []struct {
		name string
		o    QueueOpts
		kind Kind
		text string
	}{
		{"durable", QueueOpts{Durable: true, Args: Table{"x-message-ttl": int64(1000), "x-max-length": int64(10)}}, KindPreconditionFailed,
			"inequivalent arg 'durable' for queue 'q' in vhost '/': received 'true' but current is 'false'"},
		{"auto_delete", QueueOpts{AutoDelete: true, Args: Table{"x-message-ttl": int64(1000), "x-max-length": int64(10)}}, KindPreconditionFailed,
			"inequivalent arg 'auto_delete' for queue 'q' in vhost '/': received 'true' but current is 'false'"},
		{"ttl differs", QueueOpts{Args: Table{"x-message-ttl": int64(2000), "x-max-length": int64(10)}}, KindPreconditionFailed,
			"inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/'"},
		{"ttl missing", QueueOpts{Args: Table{"x-max-length": int64(10)}}, KindPreconditionFailed,
			"inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/'"},
		{"extra arg", QueueOpts{Args: Table{"x-message-ttl": int64(1000), "x-max-length": int64(10), "x-max-priority": int32(3)}}, KindPreconditionFailed,
			"inequivalent arg 'x-max-priority' for queue 'q' in vhost '/'"},
		{"exclusive", QueueOpts{Exclusive: true, Args: Table{"x-message-ttl": int64(1000), "x-max-length": int64(10)}}, KindResourceLocked,
			"cannot obtain exclusive access to locked queue 'q' in vhost '/'"},
	}
	for _, tc := range tt {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.DeclareQueue("q", tc.o)
			wantKind(t, err, tc.kind)
			wantText(t, err, tc.text)
		})
	}
	// A passive declare ignores the options and reports counts.
	publish(t, v, "", "q", "m")
	info, err := v.DeclareQueue("q", QueueOpts{Passive: true, Durable: true})
	if err != nil || info.Messages != 1 || info.Name != "q" {
		t.Fatalf("passive: %+v %v", info, err)
	}
}

func TestQueueDeclareErrors(t *testing.T) {
	v, _ := newTestVHost(t)
	_, err := v.DeclareQueue("missing", QueueOpts{Passive: true})
	wantKind(t, err, KindNotFound)
	wantText(t, err, "no queue 'missing' in vhost '/'")
	_, err = v.DeclareQueue("amq.mine", QueueOpts{})
	wantKind(t, err, KindAccessRefused)
	wantText(t, err, "queue name 'amq.mine' contains reserved prefix 'amq.*'")

	bad := []Table{
		{"x-message-ttl": "1000"},
		{"x-message-ttl": int64(-1)},
		{"x-expires": int64(0)},
		{"x-max-length": int64(-1)},
		{"x-max-priority": int64(256)},
		{"x-overflow": "drop-tail"},
		{"x-dead-letter-exchange": int64(1)},
		{"x-dead-letter-routing-key": "k"},
		{"x-single-active-consumer": "yes"},
		{"x-queue-type": "quorum-ish"},
	}
	for _, args := range bad {
		if _, err := v.DeclareQueue("bad", QueueOpts{Args: args}); KindOf(err) != KindPreconditionFailed {
			t.Errorf("args %v: err %v, want precondition failed", args, err)
		}
	}
	if _, err := v.Queue("bad", nil); err == nil {
		t.Fatal("a queue with bad arguments was created")
	}
}

func TestServerNamedQueue(t *testing.T) {
	v, _ := newTestVHost(t)
	a, err := v.DeclareQueue("", QueueOpts{Exclusive: true, Owner: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.DeclareQueue("", QueueOpts{Exclusive: true, Owner: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Name, "amq.gen-") || a.Name == b.Name || len(a.Name) < len("amq.gen-")+16 {
		t.Fatalf("server names %q %q", a.Name, b.Name)
	}
	if r := publish(t, v, "", a.Name, "m"); r.Routed != 1 {
		t.Fatalf("publish to server-named queue: %+v", r)
	}
}

func TestExclusiveQueue(t *testing.T) {
	v, st := newTestVHost(t)
	connA, connB := new(int), new(int)
	q := declareQ(t, v, "ex", QueueOpts{Exclusive: true, Durable: true, Owner: connA})
	if got := st.MetaKeys("queue/"); len(got) != 0 {
		t.Fatalf("exclusive queue stored: %v", got)
	}
	// Same owner may redeclare and use it.
	if _, err := v.DeclareQueue("ex", QueueOpts{Exclusive: true, Durable: true, Owner: connA}); err != nil {
		t.Fatalf("owner redeclare: %v", err)
	}
	checks := map[string]error{}
	_, checks["declare"] = v.DeclareQueue("ex", QueueOpts{Exclusive: true, Durable: true, Owner: connB})
	_, checks["passive"] = v.DeclareQueue("ex", QueueOpts{Passive: true, Owner: connB})
	_, checks["queue"] = v.Queue("ex", connB)
	_, checks["consume"] = v.Consume("ex", ConsumeOpts{Sink: &sink{}, Owner: connB})
	checks["bind"] = v.BindQueue("ex", "amq.direct", "k", nil, connB)
	_, checks["purge"] = v.PurgeQueue("ex", connB)
	_, checks["delete"] = v.DeleteQueue("ex", false, false, connB)
	for what, err := range checks {
		if KindOf(err) != KindResourceLocked {
			t.Errorf("%s by another connection: %v, want resource locked", what, err)
		}
	}
	_, s := consume(t, v, "ex", ConsumeOpts{Owner: connA})
	bindQ2 := v.BindQueue("ex", "amq.direct", "k", nil, connA)
	if bindQ2 != nil {
		t.Fatal(bindQ2)
	}
	v.CloseOwner(connB) // not the owner: nothing happens
	if _, err := v.Queue("ex", connA); err != nil {
		t.Fatalf("queue gone after another owner closed: %v", err)
	}
	v.CloseOwner(connA)
	if _, err := v.Queue("ex", connA); KindOf(err) != KindNotFound {
		t.Fatalf("exclusive queue survived its owner: %v", err)
	}
	if s.cancels() != 1 {
		t.Fatalf("consumer cancel notifications: %d, want 1", s.cancels())
	}
	if n := len(v.Bindings()); n != 0 {
		t.Fatalf("bindings left: %d", n)
	}
	_ = q
}

func TestAutoDeleteQueue(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "ad", QueueOpts{AutoDelete: true})
	// Never consumed: stays.
	publish(t, v, "", "ad", "m")
	c1, _ := consume(t, v, "ad", ConsumeOpts{NoAck: true})
	c2, _ := consume(t, v, "ad", ConsumeOpts{NoAck: true})
	c1.Cancel()
	if _, err := v.Queue("ad", nil); err != nil {
		t.Fatalf("auto-delete queue went with a consumer left: %v", err)
	}
	c2.Cancel()
	c2.Cancel() // idempotent
	if _, err := v.Queue("ad", nil); KindOf(err) != KindNotFound {
		t.Fatalf("auto-delete queue survived its last consumer: %v", err)
	}
}

func TestQueueExpires(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "idle", QueueOpts{Args: Table{"x-expires": int32(30)}})
	declareQ(t, v, "used", QueueOpts{Args: Table{"x-expires": int32(30)}})
	c, _ := consume(t, v, "used", ConsumeOpts{NoAck: true})
	eventually(t, 2*time.Second, "x-expires to delete the idle queue", func() bool {
		_, err := v.Queue("idle", nil)
		return KindOf(err) == KindNotFound
	})
	time.Sleep(60 * time.Millisecond)
	if _, err := v.Queue("used", nil); err != nil {
		t.Fatalf("queue with a consumer expired: %v", err)
	}
	c.Cancel()
	eventually(t, 2*time.Second, "x-expires after the last consumer left", func() bool {
		_, err := v.Queue("used", nil)
		return KindOf(err) == KindNotFound
	})
}

func TestDeleteQueue(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	publish(t, v, "", "q", "a")
	publish(t, v, "", "q", "b")
	_, err := v.DeleteQueue("q", false, true, nil)
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "queue 'q' in vhost '/' not empty")
	c, s := consume(t, v, "q", ConsumeOpts{})
	_, err = v.DeleteQueue("q", true, false, nil)
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "queue 'q' in vhost '/' in use")
	c.Cancel()
	// Both delivered and unacked: not ready, so if-empty passes.
	n, err := v.DeleteQueue("q", true, true, nil)
	if err != nil || n != 0 {
		t.Fatalf("delete: %d %v", n, err)
	}
	if s.len() != 2 {
		t.Fatalf("deliveries %d", s.len())
	}
	if n, err := v.DeleteQueue("q", false, false, nil); err != nil || n != 0 {
		t.Fatalf("delete of a missing queue: %d %v", n, err)
	}
	declareQ(t, v, "q2", QueueOpts{})
	publish(t, v, "", "q2", "a")
	publish(t, v, "", "q2", "b")
	if n, err := v.DeleteQueue("q2", false, false, nil); err != nil || n != 2 {
		t.Fatalf("delete q2: %d %v, want 2", n, err)
	}
	if r := publish(t, v, "", "q2", "c"); r.Routed != 0 {
		t.Fatalf("published to a deleted queue: %+v", r)
	}
}

func TestPurge(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	for _, b := range []string{"a", "b", "c"} {
		publish(t, v, "", "q", b)
	}
	d, _ := q.Get(false) // one unacked, not purged
	n, err := v.PurgeQueue("q", nil)
	if err != nil || n != 2 {
		t.Fatalf("purge: %d %v, want 2", n, err)
	}
	_, unacked, _ := q.Stats()
	if ready(q) != 0 || unacked != 1 {
		t.Fatalf("after purge ready %d unacked %d", ready(q), unacked)
	}
	q.Reject([]uint64{d.Seq}, true)
	if got := getBodies(q); !equalStrings(got, []string{"a"}) {
		t.Fatalf("after requeue: %v", got)
	}
	_, err = v.PurgeQueue("nope", nil)
	wantKind(t, err, KindNotFound)
}

func TestGet(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	if _, ok := q.Get(false); ok {
		t.Fatal("get-ok from an empty queue")
	}
	publish(t, v, "", "q", "a")
	publish(t, v, "", "q", "b")
	d, ok := q.Get(false)
	if !ok || string(d.Msg.Body) != "a" || d.Remaining != 1 || d.Redelivered || d.Consumer != nil {
		t.Fatalf("get: %+v %v", d, ok)
	}
	if _, unacked, _ := q.Stats(); unacked != 1 {
		t.Fatalf("unacked %d", unacked)
	}
	q.Ack(d.Seq)
	d, ok = q.Get(true)
	if !ok || string(d.Msg.Body) != "b" || d.Remaining != 0 {
		t.Fatalf("get no-ack: %+v %v", d, ok)
	}
	r, u, _ := q.Stats()
	if r != 0 || u != 0 {
		t.Fatalf("stats ready %d unacked %d", r, u)
	}
	if _, ok := q.Get(true); ok {
		t.Fatal("get-empty expected")
	}
}

func TestRequeueOriginalPosition(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	for _, b := range []string{"a", "b", "c", "d", "e"} {
		publish(t, v, "", "q", b)
	}
	var ds []Delivery
	for i := 0; i < 4; i++ {
		d, _ := q.Get(false)
		ds = append(ds, d)
	}
	// Requeue b and d, then a; ack c.
	q.Reject([]uint64{ds[3].Seq, ds[1].Seq}, true)
	q.Reject([]uint64{ds[0].Seq}, true)
	q.Ack(ds[2].Seq)
	var got []string
	for {
		d, ok := q.Get(true)
		if !ok {
			break
		}
		got = append(got, string(d.Msg.Body))
		want := string(d.Msg.Body) != "e"
		if d.Redelivered != want {
			t.Errorf("%s: redelivered %v, want %v", d.Msg.Body, d.Redelivered, want)
		}
	}
	if !equalStrings(got, []string{"a", "b", "d", "e"}) {
		t.Fatalf("order after requeue %v", got)
	}
}

func TestRequeueToConsumerRedelivered(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	c, s := consume(t, v, "q", ConsumeOpts{Prefetch: 1})
	publish(t, v, "", "q", "a")
	publish(t, v, "", "q", "b")
	d := s.deliveries()
	if len(d) != 1 || d[0].Redelivered {
		t.Fatalf("first delivery %+v", d)
	}
	c.Queue().Reject([]uint64{d[0].Seq}, true)
	d = s.deliveries()
	if len(d) != 2 || string(d[1].Msg.Body) != "a" || !d[1].Redelivered || d[1].Consumer != c {
		t.Fatalf("redelivery %+v", d)
	}
}

func TestRejectWithoutRequeue(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	publish(t, v, "", "q", "a")
	d, _ := q.Get(false)
	q.Reject([]uint64{d.Seq}, false)
	r, u, _ := q.Stats()
	if r != 0 || u != 0 {
		t.Fatalf("after reject: ready %d unacked %d", r, u)
	}
	// Unknown seqs are ignored.
	q.Reject([]uint64{12345}, true)
	q.Ack(12345)
}

func TestDeleteVHost(t *testing.T) {
	st := newFakeStore()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "v1")
	mustVHost(t, b, "v2")
	declareX(t, v, "x", KindDirect, ExchangeOpts{Durable: true})
	declareQ(t, v, "q", QueueOpts{Durable: true})
	bindQ(t, v, "q", "x", "k", nil)
	_, s := consume(t, v, "q", ConsumeOpts{})
	if got := b.VHosts(); !equalStrings(got, []string{"v1", "v2"}) {
		t.Fatalf("vhosts %v", got)
	}
	if err := b.DeleteVHost("v1"); err != nil {
		t.Fatal(err)
	}
	wantKind(t, b.DeleteVHost("v1"), KindNotFound)
	if s.cancels() != 1 {
		t.Fatalf("consumer not cancelled on vhost delete")
	}
	for _, p := range []string{"vhost/v1", "exchange/v1", "queue/v1", "binding/v1"} {
		if k := st.MetaKeys(p); len(k) != 0 {
			t.Fatalf("left in store: %q", k)
		}
	}
	if k := st.MetaKeys("vhost/v2"); len(k) != 1 {
		t.Fatalf("other vhost gone: %v", k)
	}
}
