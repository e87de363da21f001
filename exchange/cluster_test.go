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
	st.Hold = true
	res, err := v.Publish(&Message{RoutingKey: "qq", Body: []byte("t")}, PublishOpts{Confirmer: cf, Tag: 1})
	if err != nil || !res.Pending {
		t.Fatalf("publish: %+v %v, want pending", res, err)
	}
	st.Release()
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
