package exchange

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// sharedLog as a TopologyProposer: with commands set, the brokers of
// twoNodes propose their topology changes as commands, which the log
// applies on every node in one order (ApplyCommitted), writing the
// records each returns to that node's store, as the metadata group's FSM
// does (nodeProposer picks the encoding as the group does).

// runBefore runs l.before (once) if c is a create: another node's
// declaration that commits ahead of this one.
func (l *sharedLog) runBefore(c TopologyCommand) {
	l.mu.Lock()
	f := l.before
	if c.Op == TopoDeclareQueue || c.Op == TopoDeclareExchange {
		l.before = nil
	} else {
		f = nil
	}
	l.mu.Unlock()
	if f != nil {
		f()
	}
}

func (l *sharedLog) ProposeTopology(c TopologyCommand) error {
	l.runBefore(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	l.proposed = append(l.proposed, c)
	for i, b := range l.nodes {
		ops, err := b.ApplyCommitted(c)
		if err != nil {
			return err
		}
		for _, op := range ops {
			if op.Prefix {
				_ = l.stores[i].DeleteMetaPrefix(op.Key)
			} else if op.Val == nil {
				_ = l.stores[i].DeleteMeta(op.Key)
			} else {
				_ = l.stores[i].PutMeta(op.Key, op.Val)
			}
		}
	}
	return nil
}

// withCommands runs test with the two nodes of twoNodes proposing
// topology commands (a cluster with topology_commands enabled).
func withCommands(t *testing.T, test func(*testing.T)) {
	twoNodesCommands = true
	defer func() { twoNodesCommands = false }()
	test(t)
}

// The concurrent-declare guarantees hold as well when the cluster runs
// topology commands: the same tests, through the command path.
func TestConcurrentDeclareFirstWinsCommands(t *testing.T) {
	withCommands(t, TestConcurrentDeclareFirstWins)
}

func TestConcurrentExchangeDeclareFirstWinsCommands(t *testing.T) {
	withCommands(t, TestConcurrentExchangeDeclareFirstWins)
}

func TestClusteredBindProposesFirstCommands(t *testing.T) {
	withCommands(t, TestClusteredBindProposesFirst)
}

func TestClusteredQueueDeleteProposesFirstCommands(t *testing.T) {
	withCommands(t, TestClusteredQueueDeleteProposesFirst)
}

func TestClusteredExchangeDeleteAndUnbindProposeFirstCommands(t *testing.T) {
	withCommands(t, TestClusteredExchangeDeleteAndUnbindProposeFirst)
}

func TestClusteredVHostDeleteProposesFirstCommands(t *testing.T) {
	withCommands(t, TestClusteredVHostDeleteProposesFirst)
}

// TestCommandsReplaceRecordWrites: with commands on, a declaration, a
// bind, an unbind and the deletes reach the log as commands carrying the
// acting user, not as record writes through the store, and every node
// holds the same topology and the same records after them.
func TestCommandsReplaceRecordWrites(t *testing.T) {
	twoNodesCommands = true
	l, va, vb := twoNodes(t)
	twoNodesCommands = false
	n := len(l.proposed) // the vhost "/" twoNodes declared
	a := namedAuthorizer{name: "alice"}
	do := func(c Command) {
		t.Helper()
		if _, err := va.Do(a, c); err != nil {
			t.Fatal(err)
		}
	}
	do(ExchangeDeclare{Name: "x", Type: KindDirect, Opts: ExchangeOpts{Durable: true}})
	do(QueueDeclare{Name: "q", Opts: QueueOpts{Durable: true}})
	do(QueueBind{Queue: "q", Exchange: "x", Key: "k"})
	do(QueueBind{Queue: "q", Exchange: "x", Key: "k2"})
	do(QueueUnbind{Queue: "q", Exchange: "x", Key: "k2"})
	if got, want := topology(vb.b), topology(va.b); !slices.Equal(got, want) {
		t.Fatalf("b's topology %v, a's %v", got, want)
	}
	for _, p := range []string{"exchange/", "queue/", "binding/"} {
		ka, kb := l.stores[0].MetaKeys(p), l.stores[1].MetaKeys(p)
		slices.Sort(ka)
		slices.Sort(kb)
		if len(ka) == 0 || !slices.Equal(ka, kb) {
			t.Fatalf("%s records: a %q, b %q", p, ka, kb)
		}
	}
	do(QueueDelete{Name: "q"})
	do(ExchangeDelete{Name: "x"})
	if got := topology(vb.b); !slices.Equal(got, topology(va.b)) || slices.ContainsFunc(got, func(s string) bool {
		return strings.Contains(s, " x ") || strings.HasSuffix(s, " q")
	}) {
		t.Fatalf("after the deletes: b %v, a %v", got, topology(va.b))
	}
	for i, st := range l.stores {
		if ks := st.MetaKeys("queue/"); len(ks) != 0 {
			t.Fatalf("node %d keeps queue records %q", i, ks)
		}
		if ks := st.MetaKeys("binding/"); len(ks) != 0 {
			t.Fatalf("node %d keeps binding records %q", i, ks)
		}
	}
	ops := []TopoOp{TopoDeclareExchange, TopoDeclareQueue, TopoBind, TopoBind, TopoUnbind, TopoDeleteQueue, TopoDeleteExchange}
	proposed := l.proposed[n:]
	if len(proposed) != len(ops) {
		t.Fatalf("proposed %d commands, want %d: %+v", len(proposed), len(ops), proposed)
	}
	for i, c := range proposed {
		if c.Op != ops[i] || c.Actor != "alice" || c.VHost != "/" {
			t.Fatalf("command %d: %v by %q in %q, want %v by alice", i, c.Op, c.Actor, c.VHost, ops[i])
		}
	}
	if c := proposed[5]; c.ID == 0 {
		t.Fatal("a queue delete names no queue id")
	}
}

// TestPoliciesAsCommands: with commands on, a policy set or deleted on
// one node is a command applied on every node: both hold it (and its
// record), both queues take it; an invalid one is refused on the node
// where it is set, and nothing is proposed.
func TestPoliciesAsCommands(t *testing.T) {
	twoNodesCommands = true
	l, va, vb := twoNodes(t)
	twoNodesCommands = false
	declareQ(t, va, "q.1", QueueOpts{Durable: true})
	n := len(l.proposed)
	if _, err := va.SetPolicy(Policy{Name: "bad", Pattern: "(", ApplyTo: ApplyToQueues}); err == nil {
		t.Fatal("an invalid pattern was accepted")
	}
	created, err := va.SetPolicy(Policy{Name: "ttl", Pattern: "^q\\.", ApplyTo: ApplyToQueues, Priority: 1,
		Definition: Table{"max-length": int64(3)}})
	if err != nil || !created {
		t.Fatalf("set: created %v, %v", created, err)
	}
	if got := l.proposed[n:]; len(got) != 1 || got[0].Op != TopoSetPolicy || got[0].Name != "ttl" {
		t.Fatalf("proposed %+v, want the one policy.set", got)
	}
	for i, v := range []*VHost{va, vb} {
		q, err := v.Queue("q.1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if name, _ := q.Policy(); name != "ttl" {
			t.Fatalf("node %d: queue's policy %q", i, name)
		}
		if ks := l.stores[i].MetaKeys("policy/"); len(ks) != 1 {
			t.Fatalf("node %d: policy records %q", i, ks)
		}
	}
	if created, err := vb.SetPolicy(Policy{Name: "ttl", Pattern: "^q\\.", ApplyTo: ApplyToQueues, Priority: 2,
		Definition: Table{"max-length": int64(4)}}); err != nil || created {
		t.Fatalf("update from b: created %v, %v", created, err)
	}
	if err := vb.DeletePolicy("ttl"); err != nil {
		t.Fatal(err)
	}
	if err := va.DeletePolicy("ttl"); KindOf(err) != KindNotFound {
		t.Fatalf("delete of a deleted policy: %v", err)
	}
	for i, v := range []*VHost{va, vb} {
		if ps := v.Policies(); len(ps) != 0 {
			t.Fatalf("node %d keeps policies %+v", i, ps)
		}
		if ks := l.stores[i].MetaKeys("policy/"); len(ks) != 0 {
			t.Fatalf("node %d keeps policy records %q", i, ks)
		}
	}
}

// TestVHostsAsCommands: with commands on, a vhost declared, described and
// deleted on one node is so on every node, records included, and each
// change is one proposed command.
func TestVHostsAsCommands(t *testing.T) {
	twoNodesCommands = true
	l, _, _ := twoNodes(t)
	twoNodesCommands = false
	a, b := l.nodes[0], l.nodes[1]
	n := len(l.proposed)
	if err := a.EnsureVHost("v3"); err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureVHost("v3"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetVHostMetadata("v3", "third", []string{"t1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetVHostMetadata("nope", "", nil); KindOf(err) != KindNotFound {
		t.Fatalf("metadata of a missing vhost: %v", err)
	}
	ops := []TopoOp{}
	for _, c := range l.proposed[n:] {
		ops = append(ops, c.Op)
	}
	if !slices.Equal(ops, []TopoOp{TopoDeclareVHost, TopoSetVHostMeta}) {
		t.Fatalf("proposed %v, want one declare and one set-metadata", ops)
	}
	for i, br := range l.nodes {
		v, ok := br.VHost("v3")
		if !ok {
			t.Fatalf("node %d: no vhost v3", i)
		}
		if d, tags := v.Metadata(); d != "third" || !slices.Equal(tags, []string{"t1"}) {
			t.Fatalf("node %d: metadata %q %q", i, d, tags)
		}
		if r, err := l.stores[i].metaRecord("vhost/v3"); err != nil || r["description"] != "third" {
			t.Fatalf("node %d: record %v %v", i, r, err)
		}
	}
	v3 := mustVHost(t, a, "v3")
	declareQ(t, v3, "q", QueueOpts{Durable: true})
	if err := b.DeleteVHost("v3"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteVHost("v3"); KindOf(err) != KindNotFound {
		t.Fatalf("delete of a deleted vhost: %v", err)
	}
	for i, br := range l.nodes {
		if _, ok := br.VHost("v3"); ok {
			t.Fatalf("node %d keeps vhost v3", i)
		}
		for _, k := range l.stores[i].MetaKeys("") {
			if strings.Contains(k, "v3") {
				t.Fatalf("node %d keeps record %q", i, k)
			}
		}
	}
}

// TestSelfDeletesAsCommands (issue 43): with commands on, the deletes
// the broker makes by itself — an exclusive queue whose connection
// closes, an auto-delete queue whose last consumer goes, a queue past
// its x-expires — are commands naming the queue's id, by no user, that
// every node applies: the queue, its bindings and the auto-delete
// exchange they leave empty are gone on both nodes, records included.
func TestSelfDeletesAsCommands(t *testing.T) {
	twoNodesCommands = true
	l, va, vb := twoNodes(t)
	twoNodesCommands = false
	owner := new(int)
	ex := declareQ(t, va, "ex", QueueOpts{Exclusive: true, Owner: owner})
	ad := declareQ(t, va, "ad", QueueOpts{Durable: true, AutoDelete: true})
	exp := declareQ(t, va, "exp", QueueOpts{Durable: true, Args: Table{"x-expires": int32(50)}})
	if err := va.DeclareExchange("adx", KindDirect, ExchangeOpts{Durable: true, AutoDelete: true}); err != nil {
		t.Fatal(err)
	}
	if err := va.BindQueue("ad", "adx", "k", nil, nil); err != nil {
		t.Fatal(err)
	}
	has := func(v *VHost, name string) bool {
		v.mu.RLock()
		defer v.mu.RUnlock()
		return v.queues[name] != nil
	}
	for _, name := range []string{"ex", "ad", "exp"} {
		if !has(vb, name) {
			t.Fatalf("b lacks %s", name)
		}
	}
	n := len(l.proposed)
	c, err := va.Consume("ad", ConsumeOpts{Sink: &sink{}})
	if err != nil {
		t.Fatal(err)
	}
	c.Cancel()
	va.CloseOwner(owner)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if !has(va, "exp") && !has(vb, "exp") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("exp did not expire on both nodes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, v := range []*VHost{va, vb} {
		for _, name := range []string{"ex", "ad", "exp"} {
			if has(v, name) {
				t.Fatalf("%s still on a node", name)
			}
		}
		if _, ok := v.Exchange("adx"); ok {
			t.Fatal("the auto-delete exchange outlived its last binding")
		}
	}
	for i, st := range l.stores {
		for _, p := range []string{"queue/", "tqueue/", "binding/", "exchange/\x2f\x00adx"} {
			for _, k := range st.MetaKeys(p) {
				if strings.Contains(k, "ad") || strings.Contains(k, "ex") {
					t.Fatalf("node %d keeps record %q", i, k)
				}
			}
		}
	}
	ids := map[uint64]string{ex.ID(): "ex", ad.ID(): "ad", exp.ID(): "exp"}
	l.mu.Lock()
	proposed := append([]TopologyCommand(nil), l.proposed[n:]...)
	l.mu.Unlock()
	for _, c := range proposed {
		if c.Op == TopoDeleteQueue && ids[c.ID] == c.Name && c.Actor == "" {
			delete(ids, c.ID)
		}
	}
	if len(ids) != 0 {
		t.Fatalf("no delete command for %v; proposed %+v", ids, proposed)
	}
}

// TestOperatorPoliciesAsCommands: with commands on, an operator policy
// set on one node and deleted on the other is one command each, applied
// on every node: both queues take its limit and lose it, both stores hold
// its record and lose it; an invalid one is refused where it is set, and
// nothing is proposed.
func TestOperatorPoliciesAsCommands(t *testing.T) {
	twoNodesCommands = true
	l, va, vb := twoNodes(t)
	twoNodesCommands = false
	declareQ(t, va, "q.1", QueueOpts{Durable: true})
	n := len(l.proposed)
	if _, err := va.SetOperatorPolicy(Policy{Name: "bad", Pattern: "(", ApplyTo: ApplyToQueues}); err == nil {
		t.Fatal("an invalid pattern was accepted")
	}
	created, err := va.SetOperatorPolicy(Policy{Name: "cap", Pattern: "^q\\.", ApplyTo: ApplyToQueues, Priority: 1,
		Definition: Table{"max-length": int64(3)}})
	if err != nil || !created {
		t.Fatalf("set: created %v, %v", created, err)
	}
	if got := l.proposed[n:]; len(got) != 1 || got[0].Op != TopoSetOperatorPolicy || got[0].Name != "cap" {
		t.Fatalf("proposed %+v, want the one operator-policy.set", got)
	}
	for i, v := range []*VHost{va, vb} {
		q, err := v.Queue("q.1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if name, _ := q.OperatorPolicy(); name != "cap" {
			t.Fatalf("node %d: queue's operator policy %q", i, name)
		}
		if ks := l.stores[i].MetaKeys(opPolicyPrefix); len(ks) != 1 {
			t.Fatalf("node %d: operator policy records %q", i, ks)
		}
	}
	if err := vb.DeleteOperatorPolicy("cap"); err != nil {
		t.Fatal(err)
	}
	if err := va.DeleteOperatorPolicy("cap"); KindOf(err) != KindNotFound {
		t.Fatalf("delete of a deleted operator policy: %v", err)
	}
	if got := l.proposed[n:]; len(got) != 2 || got[1].Op != TopoDeleteOperatorPolicy {
		t.Fatalf("proposed %+v, want operator-policy.set and .delete", got)
	}
	for i, v := range []*VHost{va, vb} {
		if ps := v.OperatorPolicies(); len(ps) != 0 {
			t.Fatalf("node %d keeps operator policies %+v", i, ps)
		}
		q, _ := v.Queue("q.1", nil)
		if name, _ := q.OperatorPolicy(); name != "" {
			t.Fatalf("node %d: the queue keeps operator policy %q", i, name)
		}
		if ks := l.stores[i].MetaKeys(opPolicyPrefix); len(ks) != 0 {
			t.Fatalf("node %d keeps operator policy records %q", i, ks)
		}
	}
}
