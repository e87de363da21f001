package exchange

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
)

// sharedLog stands for the cluster's metadata log over the stores of
// several brokers: every entry is applied on every node in one order. The
// brokers propose their topology changes through it (nodeProposer): as
// commands when commands is set (the feature flag topology_commands on),
// else as the records the command makes (RecordsOf), which every node
// applies with ApplyMeta, a create taking effect only where its key holds
// no other record, as the metadata group's applier does.
type sharedLog struct {
	mu     sync.Mutex
	nodes  []*Broker
	stores []*fakeStore
	// before, if set, runs (once) ahead of the next create: another
	// node's write that commits first.
	before func()
	// fail, if set, fails every replicated write: no quorum.
	fail error
	// commands: the nodes propose topology commands (topology_test.go).
	commands bool
	proposed []TopologyCommand
	// records are the entries of records written for commands while
	// commands is off.
	records [][]MetaOp
	// strict, if set, fails the test on any write of a replicated
	// topology record through a node's store.
	strict testing.TB
}

// nodeProposer is node i's TopologyProposer over a sharedLog: it chooses
// the encoding as the metadata group does (Group.ProposeTopology).
type nodeProposer struct {
	l *sharedLog
	i int
}

func (p nodeProposer) ProposeTopology(c TopologyCommand) error {
	l := p.l
	l.mu.Lock()
	commands := l.commands
	l.mu.Unlock()
	if commands {
		return l.ProposeTopology(c)
	}
	l.runBefore(c)
	ops, err := l.nodes[p.i].RecordsOf(c)
	if err != nil || len(ops) == 0 {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	l.records = append(l.records, ops)
	for i, st := range l.stores {
		var kept []MetaOp
		for _, op := range ops {
			switch {
			case op.Prefix:
				_ = st.DeleteMetaPrefix(op.Key)
			case op.Val == nil:
				_ = st.DeleteMeta(op.Key)
			default:
				if cur, ok := st.record(op.Key); op.Create && ok && !bytes.Equal(cur, op.Val) {
					continue // another record was there first
				}
				_ = st.PutMeta(op.Key, op.Val)
			}
			kept = append(kept, op)
		}
		if len(kept) > 0 {
			_ = l.nodes[i].ApplyMeta(kept)
		}
	}
	return nil
}

// twoNodesCommands makes twoNodes' brokers propose topology commands.
var twoNodesCommands bool

type sharedStore struct {
	*fakeStore
	log *sharedLog
}

func (s *sharedStore) apply(op MetaOp) bool {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if op.Create {
		if cur, ok := s.fakeStore.record(op.Key); ok && !bytes.Equal(cur, op.Val) {
			return false
		}
	}
	for i, st := range l.stores {
		if op.Val == nil {
			_ = st.DeleteMeta(op.Key)
		} else {
			_ = st.PutMeta(op.Key, op.Val)
		}
		if l.nodes[i] != nil {
			_ = l.nodes[i].ApplyMeta([]MetaOp{op})
		}
	}
	return true
}

// topologyWrite fails the test of a strict log on a write of a
// replicated topology record through a node's store.
func (s *sharedStore) topologyWrite(what, key string) {
	if t := s.log.strict; t != nil && ReplicatedKey(key) && !strings.HasPrefix(key, streamOffsetPrefix) {
		t.Errorf("the core wrote a topology record through its store in a cluster: %s %q", what, key)
	}
}

func (s *sharedStore) PutMeta(key string, val []byte) error {
	s.topologyWrite("PutMeta", key)
	if !ReplicatedKey(key) {
		return s.fakeStore.PutMeta(key, val)
	}
	if err := s.failed(); err != nil {
		return err
	}
	s.apply(MetaOp{Key: key, Val: append([]byte{}, val...)})
	return nil
}

func (s *sharedStore) failed() error {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return s.log.fail
}

func (s *sharedStore) DeleteMeta(key string) error {
	s.topologyWrite("DeleteMeta", key)
	if !ReplicatedKey(key) {
		return s.fakeStore.DeleteMeta(key)
	}
	if err := s.failed(); err != nil {
		return err
	}
	s.apply(MetaOp{Key: key})
	return nil
}

func (s *sharedStore) DeleteMetaPrefix(prefix string) error {
	s.topologyWrite("DeleteMetaPrefix", prefix)
	if !ReplicatedKey(prefix) {
		return s.fakeStore.DeleteMetaPrefix(prefix)
	}
	if err := s.failed(); err != nil {
		return err
	}
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, st := range l.stores {
		_ = st.DeleteMetaPrefix(prefix)
		if l.nodes[i] != nil {
			_ = l.nodes[i].ApplyMeta([]MetaOp{{Key: prefix, Prefix: true}})
		}
	}
	return nil
}

// CreateMeta would be a store's create of a record (the MetaCreator of
// before): the core must never call it.
func (s *sharedStore) CreateMeta(key string, val []byte) (bool, error) {
	s.topologyWrite("CreateMeta", key)
	if t := s.log.strict; t != nil {
		t.Errorf("the core called CreateMeta(%q)", key)
	}
	return false, errors.New("no CreateMeta")
}

func (s *fakeStore) record(key string) ([]byte, bool) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	v, ok := s.Meta[key]
	return v, ok
}

// twoNodes makes two clustered brokers a and b over one sharedLog, with
// vhost "/" on both.
func twoNodes(t *testing.T) (*sharedLog, *VHost, *VHost) {
	t.Helper()
	l := &sharedLog{}
	var vs []*VHost
	for i, name := range []string{"a", "b"} {
		fs := newFakeStore()
		l.stores = append(l.stores, fs)
		l.nodes = append(l.nodes, nil)
		b := newTestBroker(t, &sharedStore{fakeStore: fs, log: l})
		b.SetCluster(&fakeCluster{name: name})
		l.commands = twoNodesCommands
		b.SetTopologyProposer(nodeProposer{l: l, i: i})
		l.nodes[i] = b
	}
	for _, b := range l.nodes {
		vs = append(vs, mustVHost(t, b, "/"))
	}
	return l, vs[0], vs[1]
}

// TestConcurrentDeclareFirstWins (issue 17): node a declares queue q
// while node b's declaration of the same name commits first. Both nodes
// end with b's queue (one id, home b); a's declare-ok adopts it (not
// created, no consumer of it cancelled); a declaration inequivalent to
// the winner is refused with PRECONDITION_FAILED as if the queue had been
// there before; a's queue, which lost, was never visible.
func TestConcurrentDeclareFirstWins(t *testing.T) {
	l, va, vb := twoNodes(t)
	var bq *Queue
	s := &sink{}
	l.before = func() {
		bq = declareQ(t, vb, "q", QueueOpts{Durable: true})
		// A consumer on b's queue before a's declaration is decided.
		if _, err := vb.Consume("q", ConsumeOpts{Sink: s}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := va.DeclareQueue("q", QueueOpts{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Created || info.Name != "q" {
		t.Fatalf("a's declare-ok: %+v, want q, not created", info)
	}
	qa, err := va.Queue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if qa.ID() != bq.ID() || qa.Home() != "b" {
		t.Fatalf("a holds queue %d home %q, b's is %d", qa.ID(), qa.Home(), bq.ID())
	}
	if cur, _ := vb.Queue("q", nil); cur != bq {
		t.Fatal("b's queue was replaced")
	}
	if s.cancels() != 0 {
		t.Fatal("b's consumer was cancelled")
	}
	if n := len(l.stores[0].MetaKeys("queue/")); n != 1 {
		t.Fatalf("%d queue records", n)
	}

	// Inequivalent to the queue that won: refused.
	l.before = func() {
		declareQ(t, vb, "r", QueueOpts{Durable: true})
	}
	_, err = va.DeclareQueue("r", QueueOpts{Durable: true, Args: Table{"x-max-length": int64(5)}})
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != KindPreconditionFailed {
		t.Fatalf("inequivalent declare: %v", err)
	}

	// Uncontended: a's own queue is created and installed on both.
	info, err = va.DeclareQueue("s", QueueOpts{Durable: true})
	if err != nil || !info.Created {
		t.Fatalf("uncontended declare: %+v %v", info, err)
	}
	sa, _ := va.Queue("s", nil)
	sb, _ := vb.Queue("s", nil)
	if sa == nil || sb == nil || sa.ID() != sb.ID() || sa.Home() != "a" {
		t.Fatalf("queue s: %v %v", sa, sb)
	}

	// Bound declarations (MQTT, STOMP subscriptions) bind once created.
	if _, err := va.DeclareQueueBound("t", QueueOpts{Durable: true}, []Binding{{Exchange: "amq.topic", Key: "k.#"}}); err != nil {
		t.Fatal(err)
	}
	res, err := vb.Publish(&Message{Exchange: "amq.topic", RoutingKey: "k.x", Body: []byte("m")}, PublishOpts{})
	if err != nil || res.Routed != 1 {
		t.Fatalf("publish through the binding on b: %+v %v", res, err)
	}
}

// TestConcurrentExchangeDeclareFirstWins: the same for exchanges. Node b's
// declaration of exchange x commits first: a's equivalent declaration
// adopts it (b's bindings stay), an inequivalent one is refused, and a
// non-durable exchange (whose records differ by home node) keeps b as its
// home on both nodes.
func TestConcurrentExchangeDeclareFirstWins(t *testing.T) {
	l, va, vb := twoNodes(t)
	l.before = func() {
		declareX(t, vb, "x", KindTopic, ExchangeOpts{Durable: true})
		declareQ(t, vb, "qx", QueueOpts{Durable: true})
		bindQ(t, vb, "qx", "x", "k.#", nil)
	}
	if err := va.DeclareExchange("x", KindTopic, ExchangeOpts{Durable: true}); err != nil {
		t.Fatal(err)
	}
	res, err := va.Publish(&Message{Exchange: "x", RoutingKey: "k.1", Body: []byte("m")}, PublishOpts{})
	if err != nil || res.Routed != 1 {
		t.Fatalf("b's binding lost on a: %+v %v", res, err)
	}
	l.before = func() { declareX(t, vb, "y", KindTopic, ExchangeOpts{Durable: true}) }
	err = va.DeclareExchange("y", KindFanout, ExchangeOpts{Durable: true})
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != KindPreconditionFailed {
		t.Fatalf("inequivalent exchange declare: %v", err)
	}
	if x, _ := vb.Exchange("y"); x == nil || x.Kind() != KindTopic {
		t.Fatal("b's exchange y replaced")
	}
	l.before = func() { declareX(t, vb, "tx", KindDirect, ExchangeOpts{}) }
	if err := va.DeclareExchange("tx", KindDirect, ExchangeOpts{}); err != nil {
		t.Fatal(err)
	}
	xa, _ := va.Exchange("tx")
	xb, _ := vb.Exchange("tx")
	if xa == nil || xb == nil || xa.home != "b" || xb.home != "b" {
		t.Fatalf("transient exchange homes: %v %v", xa, xb)
	}
	// Uncontended: created, and visible on both.
	if err := va.DeclareExchange("z", KindFanout, ExchangeOpts{Durable: true}); err != nil {
		t.Fatal(err)
	}
	if x, _ := vb.Exchange("z"); x == nil {
		t.Fatal("z missing on b")
	}
}

// TestClusteredBindProposesFirst: in a cluster a binding exists once its
// record is applied, on the node that made it as on the others; a bind
// whose record is not committed fails and leaves no binding anywhere.
func TestClusteredBindProposesFirst(t *testing.T) {
	l, va, vb := twoNodes(t)
	declareQ(t, va, "q", QueueOpts{Durable: true})
	declareX(t, va, "x", KindDirect, ExchangeOpts{Durable: true})
	l.mu.Lock()
	l.fail = errors.New("no quorum")
	l.mu.Unlock()
	if err := va.BindQueue("q", "x", "k", nil, nil); err == nil {
		t.Fatal("bind succeeded without a quorum")
	}
	for _, v := range []*VHost{va, vb} {
		if n := len(v.Bindings()); n != 0 {
			t.Fatalf("%d bindings after a failed bind: %v", n, v.Bindings())
		}
	}
	l.mu.Lock()
	l.fail = nil
	l.mu.Unlock()
	bindQ(t, va, "q", "x", "k", nil)
	for _, v := range []*VHost{va, vb} {
		bs := v.Bindings()
		if len(bs) != 1 || bs[0].Source != "x" || bs[0].Destination != "q" || bs[0].RoutingKey != "k" {
			t.Fatalf("bindings after the bind: %v", bs)
		}
	}
	bindQ(t, vb, "q", "x", "k", nil) // the same binding from the other node: one
	if n := len(va.Bindings()); n != 1 {
		t.Fatalf("%d bindings after an equal bind", n)
	}
}

// TestClusteredQueueDeleteProposesFirst (issue 16): a queue.delete that
// does not commit (no quorum) leaves the queue, its bindings and an
// auto-delete exchange bound only to it as they were on every node; one
// that commits removes them all on every node, records included.
func TestClusteredQueueDeleteProposesFirst(t *testing.T) {
	l, va, vb := twoNodes(t)
	q := declareQ(t, va, "q", QueueOpts{Durable: true})
	declareX(t, va, "x", KindDirect, ExchangeOpts{Durable: true})
	declareX(t, va, "ax", KindDirect, ExchangeOpts{Durable: true, AutoDelete: true})
	bindQ(t, va, "q", "x", "k", nil)
	bindQ(t, va, "q", "ax", "k", nil)
	publishM(t, va, persistent("", "q", "m"), PublishOpts{})
	l.mu.Lock()
	l.fail = errors.New("no quorum")
	l.mu.Unlock()
	if _, err := va.DeleteQueue("q", false, false, nil); err == nil {
		t.Fatal("delete succeeded without a quorum")
	}
	for i, v := range []*VHost{va, vb} {
		if _, err := v.Queue("q", nil); err != nil {
			t.Fatalf("node %d: the queue is gone after a failed delete: %v", i, err)
		}
		if _, ok := v.Exchange("ax"); !ok {
			t.Fatalf("node %d: the auto-delete exchange is gone after a failed delete", i)
		}
		if n := len(v.Bindings()); n != 2 {
			t.Fatalf("node %d: %d bindings after a failed delete", i, n)
		}
	}
	if r := ready(q); r != 1 {
		t.Fatalf("ready %d after a failed delete", r)
	}
	l.mu.Lock()
	l.fail = nil
	l.mu.Unlock()
	n, err := va.DeleteQueue("q", false, false, nil)
	if err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	for i, v := range []*VHost{va, vb} {
		if _, err := v.Queue("q", nil); err == nil {
			t.Fatalf("node %d: the queue is still there", i)
		}
		if _, ok := v.Exchange("ax"); ok {
			t.Fatalf("node %d: the auto-delete exchange is still there", i)
		}
		if _, ok := v.Exchange("x"); !ok {
			t.Fatalf("node %d: exchange x went too", i)
		}
		if n := len(v.Bindings()); n != 0 {
			t.Fatalf("node %d: %d bindings left", i, n)
		}
	}
	for i, st := range l.stores {
		st.Mu.Lock()
		for k := range st.Meta {
			if strings.Contains(k, "binding/") || strings.Contains(k, "queue/") || strings.Contains(k, "\x00ax") {
				t.Errorf("node %d: record %q left", i, k)
			}
		}
		st.Mu.Unlock()
	}
}

// TestClusteredExchangeDeleteAndUnbindProposeFirst (issue 16): an
// exchange.delete or a queue.unbind that does not commit changes nothing
// on any node; one that commits removes the exchange with its bindings
// (and an auto-delete source bound only to it), or the binding (and an
// auto-delete source it leaves empty), on every node, records included.
func TestClusteredExchangeDeleteAndUnbindProposeFirst(t *testing.T) {
	l, va, vb := twoNodes(t)
	declareQ(t, va, "q", QueueOpts{Durable: true})
	declareX(t, va, "x", KindDirect, ExchangeOpts{Durable: true})
	declareX(t, va, "src", KindDirect, ExchangeOpts{Durable: true, AutoDelete: true})
	declareX(t, va, "ax", KindDirect, ExchangeOpts{Durable: true, AutoDelete: true})
	bindQ(t, va, "q", "x", "k", nil)
	if err := va.BindExchange("x", "src", "k", nil); err != nil {
		t.Fatal(err)
	}
	bindQ(t, va, "q", "ax", "k", nil)
	setFail := func(err error) {
		l.mu.Lock()
		l.fail = err
		l.mu.Unlock()
	}
	has := func(v *VHost, x string) bool { _, ok := v.Exchange(x); return ok }
	setFail(errors.New("no quorum"))
	if err := va.DeleteExchange("x", false); err == nil {
		t.Fatal("exchange delete succeeded without a quorum")
	}
	if err := va.UnbindQueue("q", "ax", "k", nil, nil); err == nil {
		t.Fatal("unbind succeeded without a quorum")
	}
	for i, v := range []*VHost{va, vb} {
		if !has(v, "x") || !has(v, "src") || !has(v, "ax") || len(v.Bindings()) != 3 {
			t.Fatalf("node %d after failed deletes: x %v src %v ax %v, %d bindings", i, has(v, "x"), has(v, "src"), has(v, "ax"), len(v.Bindings()))
		}
	}
	setFail(nil)
	if err := va.DeleteExchange("x", false); err != nil {
		t.Fatal(err)
	}
	if err := va.UnbindQueue("q", "ax", "k", nil, nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range []*VHost{va, vb} {
		if has(v, "x") || has(v, "src") || has(v, "ax") || len(v.Bindings()) != 0 {
			t.Fatalf("node %d after the deletes: x %v src %v ax %v, %v", i, has(v, "x"), has(v, "src"), has(v, "ax"), v.Bindings())
		}
		if _, err := v.Queue("q", nil); err != nil {
			t.Fatalf("node %d: the queue went too: %v", i, err)
		}
	}
	for i, st := range l.stores {
		st.Mu.Lock()
		for k := range st.Meta {
			if strings.Contains(k, "binding/") || strings.HasSuffix(k, "\x00x") || strings.HasSuffix(k, "\x00src") || strings.HasSuffix(k, "\x00ax") {
				t.Errorf("node %d: record %q left", i, k)
			}
		}
		st.Mu.Unlock()
	}
}

// TestClusteredVHostDeleteProposesFirst (issue 16): a vhost delete that
// does not commit leaves the vhost with its queues and exchanges on every
// node; one that commits removes it everywhere, records included.
func TestClusteredVHostDeleteProposesFirst(t *testing.T) {
	l, va, vb := twoNodes(t)
	for _, b := range l.nodes {
		if err := b.EnsureVHost("v2"); err != nil {
			t.Fatal(err)
		}
	}
	a2 := mustVHost(t, l.nodes[0], "v2")
	declareQ(t, a2, "q", QueueOpts{Durable: true})
	declareX(t, a2, "x", KindDirect, ExchangeOpts{Durable: true})
	bindQ(t, a2, "q", "x", "k", nil)
	_, _ = va, vb
	l.mu.Lock()
	l.fail = errors.New("no quorum")
	l.mu.Unlock()
	if err := l.nodes[0].DeleteVHost("v2"); err == nil {
		t.Fatal("vhost delete succeeded without a quorum")
	}
	for i, b := range l.nodes {
		v, ok := b.VHost("v2")
		if !ok {
			t.Fatalf("node %d: the vhost is gone after a failed delete", i)
		}
		if _, err := v.Queue("q", nil); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if _, ok := v.Exchange("x"); !ok || len(v.Bindings()) != 1 {
			t.Fatalf("node %d: exchange %v, %d bindings", i, ok, len(v.Bindings()))
		}
	}
	l.mu.Lock()
	l.fail = nil
	l.mu.Unlock()
	if err := l.nodes[0].DeleteVHost("v2"); err != nil {
		t.Fatal(err)
	}
	for i, b := range l.nodes {
		if _, ok := b.VHost("v2"); ok {
			t.Fatalf("node %d: the vhost is still there", i)
		}
		if _, ok := b.VHost("/"); !ok {
			t.Fatalf("node %d: vhost / went too", i)
		}
	}
	for i, st := range l.stores {
		st.Mu.Lock()
		for k := range st.Meta {
			if strings.Contains(k, "v2") {
				t.Errorf("node %d: record %q left", i, k)
			}
		}
		st.Mu.Unlock()
	}
}
