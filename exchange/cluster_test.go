package exchange

import (
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// recStore records the metadata writes a broker makes, as the cluster's
// replicated store would propose them.
type recStore struct {
	*fakeStore
	mu  sync.Mutex
	ops []MetaOp
}

func (s *recStore) PutMeta(key string, val []byte) error {
	s.mu.Lock()
	s.ops = append(s.ops, MetaOp{Key: key, Val: append([]byte(nil), val...)})
	s.mu.Unlock()
	return s.fakeStore.PutMeta(key, val)
}

func (s *recStore) DeleteMeta(key string) error {
	s.mu.Lock()
	s.ops = append(s.ops, MetaOp{Key: key})
	s.mu.Unlock()
	return s.fakeStore.DeleteMeta(key)
}

func (s *recStore) DeleteMetaPrefix(prefix string) error {
	s.mu.Lock()
	s.ops = append(s.ops, MetaOp{Key: prefix, Prefix: true})
	s.mu.Unlock()
	return s.fakeStore.DeleteMetaPrefix(prefix)
}

func (s *recStore) take() []MetaOp {
	s.mu.Lock()
	defer s.mu.Unlock()
	ops := s.ops
	s.ops = nil
	var out []MetaOp
	for _, op := range ops {
		if ReplicatedKey(op.Key) {
			out = append(out, op)
		}
	}
	return out
}

// topology is a comparable picture of a broker's durable topology.
func topology(b *Broker) []string {
	var out []string
	for _, vn := range b.VHosts() {
		v, _ := b.VHost(vn)
		out = append(out, "vhost "+vn)
		for _, x := range v.Exchanges() {
			out = append(out, "exchange "+vn+" "+x.name+" "+x.kind)
		}
		for _, q := range v.Queues() {
			out = append(out, "queue "+vn+" "+q.name)
		}
		for _, bi := range v.Bindings() {
			out = append(out, "binding "+vn+" "+bi.Source+" "+bi.Destination+" "+bi.RoutingKey)
		}
	}
	sort.Strings(out)
	return out
}

func TestApplyMetaMirrorsTopology(t *testing.T) {
	st := &recStore{fakeStore: newFakeStore()}
	a := newTestBroker(t, st)
	b := newTestBroker(t, newFakeStore())
	va := mustVHost(t, a, "/")
	mustVHost(t, a, "other")
	declareX(t, va, "orders", KindTopic, ExchangeOpts{Durable: true})
	declareX(t, va, "gone", KindFanout, ExchangeOpts{Durable: true})
	declareQ(t, va, "q1", QueueOpts{Durable: true})
	declareQ(t, va, "q2", QueueOpts{Durable: true})
	bindQ(t, va, "q1", "orders", "eu.#", nil)
	bindQ(t, va, "q2", "orders", "us.*", nil)
	bindQ(t, va, "q2", "gone", "", nil)
	if err := va.UnbindQueue("q2", "orders", "us.*", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := va.DeleteExchange("gone", false); err != nil {
		t.Fatal(err)
	}
	declareQ(t, va, "transient", QueueOpts{}) // not replicated
	ops := st.take()
	if err := b.ApplyMeta(ops); err != nil {
		t.Fatal(err)
	}
	want := topology(a)
	for i, s := range want {
		if s == "queue / transient" {
			want = append(want[:i:i], want[i+1:]...)
			break
		}
	}
	if got := topology(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("replica topology\n got %v\nwant %v", got, want)
	}
	// Applying again, and applying on the origin, changes nothing.
	q1, _ := va.Queue("q1", nil)
	if err := b.ApplyMeta(ops); err != nil {
		t.Fatal(err)
	}
	if err := a.ApplyMeta(ops); err != nil {
		t.Fatal(err)
	}
	if got := topology(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("after replay\n got %v\nwant %v", got, want)
	}
	if q, _ := va.Queue("q1", nil); q != q1 {
		t.Fatal("the origin's queue was replaced by its own record")
	}
	// Deletes follow.
	if _, err := va.DeleteQueue("q1", false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteVHost("other"); err != nil {
		t.Fatal(err)
	}
	if err := b.ApplyMeta(st.take()); err != nil {
		t.Fatal(err)
	}
	want = topology(a)
	for i, s := range want {
		if s == "queue / transient" {
			want = append(want[:i:i], want[i+1:]...)
			break
		}
	}
	if got := topology(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("after deletes\n got %v\nwant %v", got, want)
	}
}

func TestQuorumDeclareRules(t *testing.T) {
	v, st := newTestVHost(t)
	q := Table{"x-queue-type": "quorum"}
	for _, o := range []QueueOpts{{Args: q}, {Durable: true, Exclusive: true, Args: q}, {Durable: true, AutoDelete: true, Args: q}} {
		if _, err := v.DeclareQueue("qq", o); KindOf(err) != KindPreconditionFailed {
			t.Fatalf("declare %+v: %v, want PRECONDITION_FAILED", o, err)
		}
	}
	if _, err := v.DeclareQueue("qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum", "x-delivery-limit": "x"}}); KindOf(err) != KindPreconditionFailed {
		t.Fatalf("bad x-delivery-limit: %v", err)
	}
	declareQ(t, v, "qq", QueueOpts{Durable: true, Args: q})
	// A quorum queue keeps transient messages too, and the confirm waits.
	cf := newConfirms()
	st.hold = true
	res, err := v.Publish(&Message{RoutingKey: "qq", Body: []byte("t")}, PublishOpts{Confirmer: cf, Tag: 1})
	if err != nil || !res.Pending {
		t.Fatalf("publish: %+v %v, want pending", res, err)
	}
	st.release()
	<-cf.ch
	if got := cf.get(1); len(got) != 1 || !got[0] {
		t.Fatalf("confirm %v", got)
	}
}

func TestDeliveryLimitDeadLetters(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "dead", QueueOpts{Durable: true})
	q := declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum",
		"x-delivery-limit": int64(1), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}})
	if _, err := v.Publish(&Message{RoutingKey: "qq", Body: []byte("poison")}, PublishOpts{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		d, ok := q.Get(false)
		if !ok {
			t.Fatalf("get %d: empty", i)
		}
		if d.Redelivered != (i > 0) {
			t.Fatalf("get %d: redelivered %v", i, d.Redelivered)
		}
		q.Reject([]uint64{d.Seq}, true)
	}
	if _, ok := q.Get(false); ok {
		t.Fatal("message still in the queue past its delivery limit")
	}
	dq, _ := v.Queue("dead", nil)
	d, ok := dq.Get(true)
	if !ok || string(d.Msg.Body) != "poison" {
		t.Fatalf("dead-lettered: %v %v", ok, d.Msg)
	}
	deaths, _ := d.Msg.Props.Headers["x-death"].([]any)
	if len(deaths) == 0 || deaths[0].(Table)["reason"] != "delivery_limit" {
		t.Fatalf("x-death %v", d.Msg.Props.Headers["x-death"])
	}
}

// fakeRemote records what a proxy queue asks of its owner.
type fakeRemote struct {
	mu       sync.Mutex
	pub      []*Message
	done     []func(error)
	prefetch int
	push     func(*Message, uint64, bool)
	reset    func()
	acks     []uint64
	nacks    []uint64
	stopped  int
	closed   bool
}

func (r *fakeRemote) Publish(m *Message, done func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pub = append(r.pub, m)
	r.done = append(r.done, done)
}
func (r *fakeRemote) Consume(prefetch int, push func(*Message, uint64, bool), reset func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prefetch, r.push, r.reset = prefetch, push, reset
}
func (r *fakeRemote) StopConsuming() { r.mu.Lock(); r.stopped++; r.prefetch = 0; r.mu.Unlock() }
func (r *fakeRemote) Ack(tag uint64) { r.mu.Lock(); r.acks = append(r.acks, tag); r.mu.Unlock() }
func (r *fakeRemote) Nack(tag uint64, requeue bool) {
	r.mu.Lock()
	r.nacks = append(r.nacks, tag)
	r.mu.Unlock()
}
func (r *fakeRemote) Get(bool) (*Message, uint64, bool, int, bool, error) {
	return &Message{Body: []byte("got")}, 77, true, 3, true, nil
}
func (r *fakeRemote) Purge() (int, error)      { return 5, nil }
func (r *fakeRemote) Count() (int, int, error) { return 9, 2, nil }
func (r *fakeRemote) Close()                   { r.mu.Lock(); r.closed = true; r.mu.Unlock() }
func (r *fakeRemote) state() (int, []uint64, []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prefetch, r.acks, r.nacks
}
func (r *fakeRemote) pushed() func(*Message, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.push
}

func TestProxyQueue(t *testing.T) {
	v, st := newTestVHost(t)
	q := declareQ(t, v, "far", QueueOpts{Durable: true})
	r := &fakeRemote{}
	q.BecomeProxy(r)

	// Publishes go to the owner; the confirm waits for it.
	cf := newConfirms()
	res, err := v.Publish(&Message{RoutingKey: "far", Body: []byte("p"), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: 7})
	if err != nil || !res.Pending || res.Routed != 1 {
		t.Fatalf("publish %+v %v", res, err)
	}
	if st.appends != 0 {
		t.Fatal("a proxied message was stored locally")
	}
	r.done[0](nil)
	<-cf.ch
	if got := cf.get(7); len(got) != 1 || !got[0] {
		t.Fatalf("confirm %v", got)
	}

	// Consumers are fed from the owner, within their prefetch.
	s := &sink{}
	c, err := v.Consume("far", ConsumeOpts{Tag: "c", Prefetch: 2, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := r.state(); p != 2 {
		t.Fatalf("upstream prefetch %d, want 2", p)
	}
	push := r.pushed()
	push(&Message{Body: []byte("a")}, 101, false)
	push(&Message{Body: []byte("b")}, 102, true)
	push(&Message{Body: []byte("c")}, 103, false)
	ds := s.deliveries()
	if len(ds) != 2 || ds[0].Redelivered || !ds[1].Redelivered {
		t.Fatalf("deliveries %v", s.bodies())
	}
	q.Ack(ds[0].Seq)                    // → upstream ack of 101
	q.Reject([]uint64{ds[1].Seq}, true) // → upstream nack of 102, not requeued here
	if _, acks, nacks := r.state(); !reflect.DeepEqual(acks, []uint64{101}) || !reflect.DeepEqual(nacks, []uint64{102}) {
		t.Fatalf("acks %v nacks %v", acks, nacks)
	}
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("bodies %v", got)
	}
	// A reset forgets what was pushed before it.
	push(&Message{Body: []byte("d")}, 104, false)
	r.reset()
	q.Ack(s.deliveries()[2].Seq) // c: still settles upstream
	if r, _, _ := q.Stats(); r != 0 {
		t.Fatalf("ready after reset %d", r)
	}
	c.Cancel()
	if r.stopped != 1 {
		t.Fatalf("upstream consumer not stopped")
	}
	if n := q.Purge(); n != 5 {
		t.Fatalf("purge %d", n)
	}
	info, err := v.DeclareQueue("far", QueueOpts{Passive: true})
	if err != nil || info.Messages != 9 || info.Consumers != 2 {
		t.Fatalf("passive declare %+v %v", info, err)
	}
	// Management sees the owner's counts, fetched in the background.
	q.Status()
	deadline := time.Now().Add(5 * time.Second)
	for st := q.Status(); st.Ready != 9 || st.Consumers != 2; st = q.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("proxy status %+v, want the owner's 9 ready, 2 consumers", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d, ok := q.Get(false)
	if !ok || !d.Redelivered || string(d.Msg.Body) != "got" {
		t.Fatalf("get %+v %v", d, ok)
	}
	q.Ack(d.Seq)
	if _, acks, _ := r.state(); acks[len(acks)-1] != 77 {
		t.Fatalf("get not acked upstream: %v", acks)
	}
}

func TestBecomeLocalLoadsReplicatedMessages(t *testing.T) {
	v, st := newTestVHost(t)
	q := declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum", "x-delivery-limit": int64(2)}})
	r := &fakeRemote{}
	q.BecomeProxy(r)
	s := &sink{}
	if _, err := v.Consume("qq", ConsumeOpts{Tag: "c", Sink: s}); err != nil {
		t.Fatal(err)
	}
	r.pushed()(&Message{Body: []byte("old")}, 1, false) // delivered, unacked: forgotten
	data := func(body string) []byte { return encodeMessage(&Message{Body: []byte(body)}, nowNano(), nil) }
	// The FSM wrote them to the node's store under the queue's keys.
	k10, k11 := storeKey(0, 10, false), storeKey(0, 11, false)
	st.AppendMessage(q.ID(), k10, data("x"), nil)
	st.AppendMessage(q.ID(), k11, data("y"), nil)
	q.BecomeLocal(st, LogState{
		Groups:  []LogGroup{{Top: 0, Count: 2, Bytes: int64(len(data("x")) * 2), MaxKey: k11}},
		Returns: func(k uint64) uint32 { return map[uint64]uint32{k11: 2}[k] },
	})
	if !r.closed {
		t.Fatal("remote not closed")
	}
	ds := s.deliveries()
	if len(ds) != 3 || string(ds[1].Msg.Body) != "x" || !ds[1].Redelivered || !ds[2].Redelivered {
		t.Fatalf("deliveries %v", s.bodies())
	}
	q.Ack(ds[0].Seq) // forgotten: ignored
	q.Ack(ds[1].Seq)
	if st.deletes != 1 {
		t.Fatalf("deletes %d, want 1", st.deletes)
	}
	// y came back twice before: this delivery was its third, past the
	// limit of 2, so a requeue drops it.
	q.Reject([]uint64{ds[2].Seq}, true)
	if n := len(s.deliveries()); n != 3 || q.Status().Ready != 0 {
		t.Fatalf("y requeued past its delivery limit: %d deliveries, %d ready", n, q.Status().Ready)
	}
	// New messages get seqs after the loaded ones.
	if _, err := v.Publish(&Message{RoutingKey: "qq", Body: []byte("z")}, PublishOpts{}); err != nil {
		t.Fatal(err)
	}
	if ds := s.deliveries(); ds[3].Seq&seqMask <= 11 {
		t.Fatalf("new seq %d", ds[3].Seq)
	}
}

// holdingRemote is a proxy that could not locate the owner yet: it
// holds every publish, and gives them back (HandBackRemote).
type holdingRemote struct {
	fakeRemote
	handedBack bool
}

func (r *holdingRemote) HandBack(later func(*Message, func(error))) []HeldPublish {
	r.mu.Lock()
	defer r.mu.Unlock()
	var held []HeldPublish
	for i, m := range r.pub {
		held = append(held, HeldPublish{Msg: m, Done: r.done[i]})
	}
	r.pub, r.done, r.handedBack = nil, nil, true
	return held
}

// TestBecomeLocalTakesHeldPublishes: publishes a proxy still held when
// this node became the queue's leader are taken by the queue, in order,
// ahead of later ones, and confirmed: not failed with the proxy.
func TestBecomeLocalTakesHeldPublishes(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "qh", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
	r := &holdingRemote{}
	q.BecomeProxy(r)
	cf := newConfirms()
	for i, body := range []string{"h1", "h2"} {
		res, err := v.Publish(&Message{RoutingKey: "qh", Body: []byte(body), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: uint64(i + 1)})
		if err != nil || !res.Pending {
			t.Fatalf("publish %s: %+v %v", body, res, err)
		}
	}
	q.BecomeLocal(q.vh.b.store, LogState{})
	if !r.handedBack || !r.closed {
		t.Fatalf("handed back %v, closed %v", r.handedBack, r.closed)
	}
	res, err := v.Publish(&Message{RoutingKey: "qh", Body: []byte("after"), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pending {
		// Stored before Publish returned: the caller confirms it (as
		// the front ends do), the Confirmer is not called.
		cf.Confirm(3, res.OK)
	}
	for tag := uint64(1); tag <= 3; tag++ {
		deadline := time.Now().Add(5 * time.Second)
		for len(cf.get(tag)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no confirm for %d", tag)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := cf.get(tag); len(got) != 1 || !got[0] {
			t.Fatalf("confirm %d: %v", tag, got)
		}
	}
	s := &sink{}
	if _, err := v.Consume("qh", ConsumeOpts{Tag: "c", Sink: s}); err != nil {
		t.Fatal(err)
	}
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"h1", "h2", "after"}) {
		t.Fatalf("bodies %v", got)
	}
}

// fakeCluster is a Cluster that records attachments.
type fakeCluster struct {
	name     string
	mu       sync.Mutex
	attached []string
}

func (c *fakeCluster) NodeName() string           { return c.name }
func (c *fakeCluster) QuorumMembers(int) []string { return []string{c.name} }
func (c *fakeCluster) Detach(*Queue)              {}
func (c *fakeCluster) WaitReady(*Queue) error     { return nil }
func (c *fakeCluster) Attach(q *Queue) {
	c.mu.Lock()
	c.attached = append(c.attached, q.Name())
	c.mu.Unlock()
}

func TestTransientTopologyAcrossNodes(t *testing.T) {
	sta := &recStore{fakeStore: newFakeStore()}
	a := newTestBroker(t, sta)
	a.SetCluster(&fakeCluster{name: "a"})
	stb := newFakeStore()
	b := newTestBroker(t, stb)
	cb := &fakeCluster{name: "b"}
	b.SetCluster(cb)
	va, vb := mustVHost(t, a, "/"), mustVHost(t, b, "/")
	conn := new(int)
	declareX(t, va, "events", KindFanout, ExchangeOpts{})
	declareQ(t, va, "mine", QueueOpts{Exclusive: true, Owner: conn})
	declareQ(t, va, "shared", QueueOpts{AutoDelete: true})
	if err := va.BindQueue("mine", "events", "", nil, conn); err != nil {
		t.Fatal(err)
	}
	bindQ(t, va, "shared", "events", "", nil)
	apply := func() {
		t.Helper()
		ops := sta.take()
		for _, op := range ops {
			if op.Val != nil {
				_ = stb.PutMeta(op.Key, op.Val)
			} else {
				_ = stb.DeleteMeta(op.Key)
			}
		}
		if err := b.ApplyMeta(ops); err != nil {
			t.Fatal(err)
		}
	}
	apply()
	if x, ok := vb.Exchange("events"); !ok || x.Durable() {
		t.Fatalf("non-durable exchange on the other node: %v %v", ok, x)
	}
	if _, err := vb.Queue("mine", new(int)); KindOf(err) != KindResourceLocked {
		t.Fatalf("another node's exclusive queue: %v, want RESOURCE_LOCKED", err)
	}
	if q, err := vb.Queue("shared", nil); err != nil || q.Home() != "a" {
		t.Fatalf("shared queue on b: %v %v", q, err)
	}
	cb.mu.Lock()
	attached := append([]string(nil), cb.attached...)
	cb.mu.Unlock()
	slices.Sort(attached)
	if !slices.Equal(attached, []string{"mine", "shared"}) {
		t.Fatalf("attached as proxies on b: %v", attached)
	}
	if got := len(vb.Bindings()); got != 2 {
		t.Fatalf("bindings on b: %d, want 2", got)
	}
	// The exclusive queue's connection closes on a: gone on b.
	va.CloseOwner(conn)
	apply()
	if _, err := vb.Queue("mine", nil); KindOf(err) != KindNotFound {
		t.Fatalf("closed exclusive queue on b: %v", err)
	}
	// b restarts: it gets a's transient topology back from its store.
	b2 := newTestBroker(t, stb)
	b2.SetCluster(&fakeCluster{name: "b"})
	vb2 := mustVHost(t, b2, "/")
	if _, err := vb2.Queue("shared", nil); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	// a dies: b forgets what lived on it.
	if n := b2.ForgetNode("a"); n != 2 {
		t.Fatalf("ForgetNode removed %d, want 2 (queue and exchange)", n)
	}
	if _, ok := vb2.Exchange("events"); ok {
		t.Fatal("a's non-durable exchange survived a")
	}
	// a restarts over its store: its own transient records are stale and
	// are deleted (asynchronously, through the store).
	a2 := newTestBroker(t, sta)
	a2.SetCluster(&fakeCluster{name: "a"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		_ = sta.LoadMeta("tqueue/", func(string, []byte) error { n++; return nil })
		_ = sta.LoadMeta("texchange/", func(string, []byte) error { n++; return nil })
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d stale transient records left", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *fakeCluster) Remote(string, string, string) Remote { return &fakeRemote{} }
func (c *fakeCluster) StreamRemote(*Queue) StreamRemote     { return nil }

// TestStaleDeliveryCannotSettleNewEntry: a delivery from the proxy era
// whose seq equals that of an entry loaded when the queue became local
// settles nothing (the epoch in Delivery.Seq differs).
func TestStaleDeliveryCannotSettleNewEntry(t *testing.T) {
	v, st := newTestVHost(t)
	q := declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
	r := &fakeRemote{}
	q.BecomeProxy(r)
	s := &sink{}
	if _, err := v.Consume("qq", ConsumeOpts{Tag: "c", Sink: s}); err != nil {
		t.Fatal(err)
	}
	r.pushed()(&Message{Body: []byte("proxied")}, 9, false)
	stale := s.deliveries()[0].Seq
	data := encodeMessage(&Message{Body: []byte("replicated")}, nowNano(), nil)
	k := storeKey(0, stale&seqMask, false)
	st.AppendMessage(q.ID(), k, data, nil)
	q.BecomeLocal(st, LogState{Groups: []LogGroup{{Top: 0, Count: 1, Bytes: int64(len(data)), MaxKey: k}}})
	fresh := s.deliveries()[1]
	if fresh.Seq&seqMask != stale&seqMask || fresh.Seq == stale {
		t.Fatalf("test setup: seqs %x and %x", stale, fresh.Seq)
	}
	q.Ack(stale)
	if st.deletes != 0 {
		t.Fatal("a stale delivery settled the new entry with the same seq")
	}
	q.Ack(fresh.Seq)
	if st.deletes != 1 {
		t.Fatalf("deletes %d after acking the live delivery", st.deletes)
	}
}

// locatingRemote asks the queue for its members inside Publish, as the
// node's Locator does for a quorum queue it is not a member of.
type locatingRemote struct {
	fakeRemote
	q *Queue
}

func (r *locatingRemote) Publish(m *Message, done func(error)) {
	_ = r.q.Members()
	r.fakeRemote.Publish(m, done)
}

func TestProxyPublishMayReadMembers(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
	q.setMembers([]string{"a", "b", "c"})
	r := &locatingRemote{q: q}
	q.BecomeProxy(r)
	finished := make(chan struct{})
	go func() {
		_, _ = v.Publish(&Message{RoutingKey: "qq", Body: []byte("x")}, PublishOpts{})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("publish to a proxy deadlocked reading the queue's members")
	}
}

// TestApplyMetaReportsBadRecords: a record that does not decode, or that
// names an unknown exchange type or invalid queue arguments, changes
// nothing and is reported by key; the batch's good records still apply.
func TestApplyMetaReportsBadRecords(t *testing.T) {
	b := newTestBroker(t, newFakeStore())
	mustVHost(t, b, "/")
	good := encodeRecord(Table{"id": uint64(7), "durable": true, "args": Table{}})
	ops := []MetaOp{
		{Key: "queue//\x00broken", Val: []byte{0xff, 0x01}},
		{Key: "exchange//\x00odd", Val: encodeRecord(Table{"type": "no-such-type"})},
		{Key: "queue//\x00badargs", Val: encodeRecord(Table{"id": uint64(8), "durable": true, "args": Table{"x-max-length": "many"}})},
		{Key: "queue//\x00fine", Val: good},
	}
	err := b.ApplyMeta(ops)
	if !errors.Is(err, ErrBadRecord) {
		t.Fatalf("ApplyMeta = %v, want ErrBadRecord", err)
	}
	for _, name := range []string{"broken", "odd", "badargs"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name record %q", err, name)
		}
	}
	if strings.Contains(err.Error(), "fine") {
		t.Errorf("error %q names the good record", err)
	}
	v, _ := b.VHost("/")
	if _, err := v.Queue("fine", nil); err != nil {
		t.Fatalf("the good record was not applied: %v", err)
	}
	for _, name := range []string{"broken", "badargs"} {
		if _, err := v.Queue(name, nil); err == nil {
			t.Errorf("queue %q installed from a bad record", name)
		}
	}
	if _, ok := v.Exchange("odd"); ok {
		t.Error("exchange of an unknown type installed")
	}
}
