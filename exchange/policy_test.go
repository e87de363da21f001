package exchange

import (
	"testing"
	"time"
)

func setPolicy(t testing.TB, v *VHost, p Policy) {
	t.Helper()
	if _, err := v.SetPolicy(p); err != nil {
		t.Fatalf("SetPolicy(%s): %v", p.Name, err)
	}
}

func policyOf(q *Queue) string { n, _ := q.Policy(); return n }

func TestPolicyMatching(t *testing.T) {
	v, _ := newTestVHost(t)
	setPolicy(t, v, Policy{Name: "low", Pattern: "^app\\.", Priority: 1, Definition: Table{"max-length": int64(10)}})
	setPolicy(t, v, Policy{Name: "high", Pattern: "^app\\.orders", Priority: 5, Definition: Table{"max-length": int64(20)}})
	setPolicy(t, v, Policy{Name: "xs", Pattern: "^app\\.", ApplyTo: ApplyToExchanges, Priority: 99, Definition: Table{"alternate-exchange": "ae"}})
	setPolicy(t, v, Policy{Name: "b-tie", Pattern: "^tie$", Definition: Table{"max-length": int64(1)}})
	setPolicy(t, v, Policy{Name: "a-tie", Pattern: "^tie$", Definition: Table{"max-length": int64(2)}})
	declareX(t, v, "app.x", KindFanout, ExchangeOpts{})
	declareX(t, v, "other.x", KindFanout, ExchangeOpts{})
	for _, c := range []struct{ queue, want string }{
		{"app.orders.eu", "high"},
		{"app.billing", "low"},
		{"other", ""},
		{"tie", "a-tie"}, // equal priorities: the name sorting first
	} {
		t.Run(c.queue, func(t *testing.T) {
			q := declareQ(t, v, c.queue, QueueOpts{})
			if got := policyOf(q); got != c.want {
				t.Fatalf("policy %q, want %q", got, c.want)
			}
		})
	}
	x, _ := v.Exchange("app.x")
	if n, d := x.Policy(); n != "xs" || d["alternate-exchange"] != "ae" {
		t.Fatalf("exchange policy %q %v", n, d)
	}
	x, _ = v.Exchange("other.x")
	if n, _ := x.Policy(); n != "" {
		t.Fatalf("other.x got policy %q", n)
	}
}

func TestPolicyValidation(t *testing.T) {
	v, _ := newTestVHost(t)
	for _, p := range []Policy{
		{Name: "p", Pattern: ".*", Definition: Table{"max-length": int64(-1)}},
		{Name: "p", Pattern: ".*", Definition: Table{"max-length": "10"}},
		{Name: "p", Pattern: ".*", Definition: Table{"expires": int64(0)}},
		{Name: "p", Pattern: ".*", Definition: Table{"message-ttl": 1.5}},
		{Name: "p", Pattern: ".*", Definition: Table{"overflow": "drop-tail"}},
		{Name: "p", Pattern: ".*", Definition: Table{"dead-letter-exchange": int64(1)}},
		{Name: "p", Pattern: ".*", Definition: Table{}},
		{Name: "p", Pattern: "(", Definition: Table{"max-length": int64(1)}},
		{Name: "p", Pattern: ".*", ApplyTo: "streams", Definition: Table{"max-length": int64(1)}},
	} {
		if _, err := v.SetPolicy(p); KindOf(err) != KindPreconditionFailed {
			t.Errorf("SetPolicy(%v %q %v): %v, want a precondition failure", p.Definition, p.Pattern, p.ApplyTo, err)
		}
	}
	if len(v.Policies()) != 0 {
		t.Fatalf("invalid policies were kept: %v", v.Policies())
	}
	// Unknown keys are kept and reported, and have no effect.
	created, err := v.SetPolicy(Policy{Name: "ha", Pattern: ".*", Definition: Table{"ha-mode": "all", "max-length": int64(3)}})
	if err != nil || !created {
		t.Fatalf("SetPolicy: created %v, %v", created, err)
	}
	if created, err := v.SetPolicy(Policy{Name: "ha", Pattern: ".*", Definition: Table{"ha-mode": "all"}}); err != nil || created {
		t.Fatalf("SetPolicy again: created %v, %v", created, err)
	}
	p, ok := v.Policy("ha")
	if !ok || p.ApplyTo != ApplyToAll || p.Definition["ha-mode"] != "all" || p.VHost != "/" {
		t.Fatalf("Policy: %+v %v", p, ok)
	}
	wantKind(t, v.DeletePolicy("nope"), KindNotFound)
}

// TestPolicyPrecedence: numeric limits take the lower of x-argument and
// policy; the other settings prefer the x-argument.
func TestPolicyPrecedence(t *testing.T) {
	v, _ := newTestVHost(t)
	setPolicy(t, v, Policy{Name: "p", Pattern: ".*", ApplyTo: ApplyToAll, Definition: Table{
		"max-length": int64(5), "message-ttl": int64(1000), "expires": int64(60000), "delivery-limit": int64(3),
		"max-length-bytes":     int64(100),
		"dead-letter-exchange": "pdlx", "dead-letter-routing-key": "prk", "overflow": OverflowRejectPublish,
		"alternate-exchange": "pae"}})
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-max-length": int64(2), "x-message-ttl": int64(5000),
		"x-dead-letter-exchange": "xdlx", "x-overflow": OverflowDropHead}})
	q.mu.Lock()
	a := *q.a
	q.mu.Unlock()
	want := queueArgs{memLen: -1, memBytes: -1, messageTTL: 1000, expires: 60000, maxLen: 2, maxLenBytes: 100, overflow: OverflowDropHead,
		dlx: "xdlx", hasDLX: true, dlrk: "prk", hasDLRK: true, deliveryLimit: 3}
	if a != want {
		t.Fatalf("effective args\n got %+v\nwant %+v", a, want)
	}
	q2 := declareQ(t, v, "q2", QueueOpts{})
	q2.mu.Lock()
	a = *q2.a
	q2.mu.Unlock()
	want = queueArgs{memLen: -1, memBytes: -1, messageTTL: 1000, expires: 60000, maxLen: 5, maxLenBytes: 100, overflow: OverflowRejectPublish,
		dlx: "pdlx", hasDLX: true, dlrk: "prk", hasDLRK: true, deliveryLimit: 3}
	if a != want {
		t.Fatalf("effective args without x-arguments\n got %+v\nwant %+v", a, want)
	}
	declareX(t, v, "own-ae", KindFanout, ExchangeOpts{Args: Table{"alternate-exchange": "xae"}})
	declareX(t, v, "no-ae", KindFanout, ExchangeOpts{})
	for name, ae := range map[string]string{"own-ae": "xae", "no-ae": "pae"} {
		x, _ := v.Exchange(name)
		v.mu.RLock()
		got := x.alternate
		v.mu.RUnlock()
		if got != ae {
			t.Fatalf("%s: alternate exchange %q, want %q", name, got, ae)
		}
	}
	// The queue's declared arguments are unchanged.
	if len(q2.Args()) != 0 {
		t.Fatalf("declared args changed: %v", q2.Args())
	}
}

func TestPolicyMaxLengthTrimsLiveQueue(t *testing.T) {
	v, st := newTestVHost(t)
	declareX(t, v, "dlx", KindFanout, ExchangeOpts{})
	dead := declareQ(t, v, "dead", QueueOpts{})
	bindQ(t, v, "dead", "dlx", "", nil)
	q := declareQ(t, v, "work", QueueOpts{Durable: true, Args: Table{"x-dead-letter-exchange": "dlx"}})
	for _, b := range []string{"1", "2", "3", "4", "5"} {
		m := &Message{RoutingKey: "work", Body: []byte(b)}
		m.Props.DeliveryMode = 2
		publishM(t, v, m, PublishOpts{})
	}
	setPolicy(t, v, Policy{Name: "cap", Pattern: "^work$", ApplyTo: ApplyToQueues, Definition: Table{"max-length": int64(2)}})
	if got := ready(q); got != 2 {
		t.Fatalf("ready %d after a max-length 2 policy, want 2", got)
	}
	eventually(t, time.Second, "store trimmed", func() bool { return len(st.StoredSeqs(q.id)) == 2 })
	if got := getBodies(dead); !equalStrings(got, []string{"1", "2", "3"}) {
		t.Fatalf("dead-lettered %v, want the 3 head messages", got)
	}
	// New publishes obey it too.
	publish(t, v, "", "work", "6")
	if got := getBodies(q); !equalStrings(got, []string{"5", "6"}) {
		t.Fatalf("queue holds %v", got)
	}
	// Deleting the policy lifts the limit.
	if err := v.DeletePolicy("cap"); err != nil {
		t.Fatal(err)
	}
	if policyOf(q) != "" {
		t.Fatal("policy still applied after delete")
	}
	for _, b := range []string{"a", "b", "c"} {
		publish(t, v, "", "work", b)
	}
	if got := ready(q); got != 3 {
		t.Fatalf("ready %d after the policy went, want 3", got)
	}
}

func TestPolicyMaxLengthRejectPublishKeepsMessages(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-overflow": OverflowRejectPublish}})
	for _, b := range []string{"1", "2", "3"} {
		publish(t, v, "", "q", b)
	}
	setPolicy(t, v, Policy{Name: "cap", Pattern: ".*", Definition: Table{"max-length": int64(1)}})
	if got := ready(q); got != 3 {
		t.Fatalf("reject-publish queue trimmed to %d", got)
	}
	if r := publish(t, v, "", "q", "4"); r.OK {
		t.Fatal("publish over the policy's max-length accepted")
	}
}

func TestPolicyMessageTTLExpires(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	publish(t, v, "", "q", "queued-before")
	setPolicy(t, v, Policy{Name: "ttl", Pattern: "^q$", Definition: Table{"message-ttl": int64(30)}})
	publish(t, v, "", "q", "queued-after")
	eventually(t, 2*time.Second, "messages expired by the policy's TTL", func() bool { return ready(q) == 0 })
	// Changing the policy to a longer TTL keeps new messages.
	setPolicy(t, v, Policy{Name: "ttl", Pattern: "^q$", Definition: Table{"message-ttl": int64(60000)}})
	publish(t, v, "", "q", "kept")
	time.Sleep(60 * time.Millisecond)
	if got := getBodies(q); !equalStrings(got, []string{"kept"}) {
		t.Fatalf("got %v", got)
	}
}

func TestPolicyExpiresAndDLX(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "dlx", KindFanout, ExchangeOpts{})
	dead := declareQ(t, v, "dead", QueueOpts{})
	bindQ(t, v, "dead", "dlx", "", nil)
	q := declareQ(t, v, "tmp", QueueOpts{})
	publish(t, v, "", "tmp", "m")
	setPolicy(t, v, Policy{Name: "dl", Pattern: "^tmp$", Definition: Table{"dead-letter-exchange": "dlx"}})
	d, ok := q.Get(false)
	if !ok {
		t.Fatal("no message")
	}
	q.Reject([]uint64{d.Seq}, false)
	if got := getBodies(dead); !equalStrings(got, []string{"m"}) {
		t.Fatalf("dead-lettered %v", got)
	}
	setPolicy(t, v, Policy{Name: "gone", Pattern: "^tmp$", Priority: 1, Definition: Table{"expires": int64(30)}})
	eventually(t, 2*time.Second, "idle queue deleted by the policy's expires", func() bool {
		_, err := v.Queue("tmp", nil)
		return err != nil
	})
}

func TestPolicyExchangeAlternate(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "ae", KindFanout, ExchangeOpts{})
	declareQ(t, v, "unrouted", QueueOpts{})
	bindQ(t, v, "unrouted", "ae", "", nil)
	declareX(t, v, "main", KindDirect, ExchangeOpts{})
	if r := publish(t, v, "main", "nowhere", "m"); r.Routed != 0 {
		t.Fatalf("routed %d before the policy", r.Routed)
	}
	setPolicy(t, v, Policy{Name: "ae", Pattern: "^main$", ApplyTo: ApplyToExchanges, Definition: Table{"alternate-exchange": "ae"}})
	if r := publish(t, v, "main", "nowhere", "m"); r.Routed != 1 {
		t.Fatalf("routed %d with an alternate-exchange policy", r.Routed)
	}
	if err := v.DeletePolicy("ae"); err != nil {
		t.Fatal(err)
	}
	if r := publish(t, v, "main", "nowhere", "m"); r.Routed != 0 {
		t.Fatalf("routed %d after the policy went", r.Routed)
	}
}

func TestPolicyRecoveredAndReplicated(t *testing.T) {
	st := &recStore{fakeStore: newFakeStore()}
	a := newTestBroker(t, st)
	va := mustVHost(t, a, "/")
	declareQ(t, va, "q", QueueOpts{Durable: true})
	setPolicy(t, va, Policy{Name: "cap", Pattern: ".*", ApplyTo: ApplyToQueues, Priority: 3, Definition: Table{"max-length": int64(1), "ha-mode": "all"}})

	// Another node applies the replicated records.
	b := newTestBroker(t, newFakeStore())
	if err := b.ApplyMeta(st.take()); err != nil {
		t.Fatal(err)
	}
	vb, _ := b.VHost("/")
	qb, err := vb.Queue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if policyOf(qb) != "cap" {
		t.Fatalf("replica's queue policy %q", policyOf(qb))
	}
	publish(t, vb, "", "q", "1")
	publish(t, vb, "", "q", "2")
	if got := ready(qb); got != 1 {
		t.Fatalf("replica's queue holds %d, want 1", got)
	}
	// Applying the same records again changes nothing.
	p1, _ := vb.Policy("cap")
	if err := b.ApplyMeta([]MetaOp{{Key: "policy//\x00cap", Val: encodeRecord(p1.record())}}); err != nil {
		t.Fatal(err)
	}
	if err := va.DeletePolicy("cap"); err != nil {
		t.Fatal(err)
	}
	if err := b.ApplyMeta(st.take()); err != nil {
		t.Fatal(err)
	}
	if policyOf(qb) != "" || len(vb.Policies()) != 0 {
		t.Fatal("policy delete not applied")
	}

	// A restart recovers the policy.
	setPolicy(t, va, Policy{Name: "ttl", Pattern: "^q$", Definition: Table{"message-ttl": int64(60000)}})
	c := newTestBroker(t, st.fakeStore)
	vc, _ := c.VHost("/")
	qc, _ := vc.Queue("q", nil)
	if p, ok := vc.Policy("ttl"); !ok || p.Definition["message-ttl"] != int64(60000) || policyOf(qc) != "ttl" {
		t.Fatalf("recovered policy %+v %v, queue's %q", p, ok, policyOf(qc))
	}
	// Deleting the vhost deletes its policies.
	if err := c.DeleteVHost("/"); err != nil {
		t.Fatal(err)
	}
	if keys := st.MetaKeys("policy/"); len(keys) != 0 {
		t.Fatalf("policy records left: %q", keys)
	}
}
