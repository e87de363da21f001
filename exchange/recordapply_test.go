package exchange

import (
	"slices"
	"strings"
	"testing"
)

// seeCommitted collects the commands ApplyCommitted applies until the
// test ends.
func seeCommitted(t *testing.T) func() []TopologyCommand {
	t.Helper()
	var seen []TopologyCommand
	committedHook = func(c TopologyCommand) { seen = append(seen, c) }
	t.Cleanup(func() { committedHook = nil })
	return func() []TopologyCommand {
		out := seen
		seen = nil
		return out
	}
}

// recordOp is the command a record op must be applied as, by its key's
// kind (the records' key layouts, independently of the decoder).
func recordOp(t *testing.T, op MetaOp) (TopoOp, bool) {
	t.Helper()
	kind, _, _ := strings.Cut(op.Key, "/")
	ops := map[string][2]TopoOp{
		"vhost":     {TopoDeclareVHost, TopoDeleteVHost},
		"exchange":  {TopoDeclareExchange, TopoDeleteExchange},
		"texchange": {TopoDeclareExchange, TopoDeleteExchange},
		"queue":     {TopoDeclareQueue, TopoDeleteQueue},
		"tqueue":    {TopoDeclareQueue, TopoDeleteQueue},
		"binding":   {TopoBind, TopoUnbind},
		"tbinding":  {TopoBind, TopoUnbind},
		"policy":    {TopoSetPolicy, TopoDeletePolicy},
		"oppolicy":  {TopoSetOperatorPolicy, TopoDeleteOperatorPolicy},
	}[kind]
	if op.Prefix || ops[0] == 0 {
		return 0, false
	}
	if op.Val == nil {
		return ops[1], true
	}
	return ops[0], true
}

// TestRecordsApplyAsCommands (issue 43, item 1): every committed topology
// record, put and delete, durable and transient (t-prefixed), reaches
// memory as the command it stands for, through ApplyCommitted (the apply
// committed commands and recovery take), marked as a record; the replica
// writes none of the records again; a delete of one kind (transient,
// durable) leaves an object of the other kind of the name alone.
func TestRecordsApplyAsCommands(t *testing.T) {
	sta := &recStore{fakeStore: newFakeStore()}
	a := newTestBroker(t, sta)
	a.SetCluster(&fakeCluster{name: "a"})
	stb := &recStore{fakeStore: newFakeStore()}
	b := newTestBroker(t, stb)
	b.SetCluster(&fakeCluster{name: "b"})
	seen := seeCommitted(t)
	kinds := map[TopoOp]int{}
	apply := func() {
		t.Helper()
		ops := sta.take()
		stb.take()
		for _, op := range ops {
			if err := b.ApplyMeta([]MetaOp{op}); err != nil {
				t.Fatalf("ApplyMeta(%q): %v", op.Key, err)
			}
			cs := seen()
			want, ok := recordOp(t, op)
			if !ok {
				if len(cs) != 0 {
					t.Fatalf("record %q applied as %+v, want nothing", op.Key, cs)
				}
				continue
			}
			if len(cs) != 1 || cs[0].Op != want || !cs[0].record {
				t.Fatalf("record %q (put %v) applied as %+v, want one %v from a record", op.Key, op.Val != nil, cs, want)
			}
			kinds[want]++
			if strings.HasPrefix(op.Key, "t") {
				kinds[want+100]++ // a transient kind
			}
		}
		if w := stb.take(); len(w) != 0 {
			t.Fatalf("the replica wrote the records again: %+v", w)
		}
	}

	va := mustVHost(t, a, "rv")
	if err := a.SetVHostMetadata("rv", "mirrored", []string{"t1"}); err != nil {
		t.Fatal(err)
	}
	setPolicy(t, va, Policy{Name: "p", Pattern: "^dq$", ApplyTo: ApplyToQueues, Definition: Table{"max-length": int64(5)}})
	if _, err := va.SetOperatorPolicy(Policy{Name: "op", Pattern: ".*", ApplyTo: ApplyToQueues, Definition: Table{"max-length": int64(9)}}); err != nil {
		t.Fatal(err)
	}
	declareX(t, va, "dx", KindDirect, ExchangeOpts{Durable: true})
	declareX(t, va, "tx", KindFanout, ExchangeOpts{})
	declareQ(t, va, "dq", QueueOpts{Durable: true})
	declareQ(t, va, "tq", QueueOpts{})
	bindQ(t, va, "dq", "dx", "k", Table{"a": int64(1)})
	bindQ(t, va, "tq", "tx", "", nil)
	apply()

	vb, ok := b.VHost("rv")
	if !ok {
		t.Fatal("vhost not mirrored")
	}
	if d, tags := vb.Metadata(); d != "mirrored" || !slices.Equal(tags, []string{"t1"}) {
		t.Fatalf("vhost metadata %q %v", d, tags)
	}
	if _, ok := vb.Policy("p"); !ok {
		t.Fatal("policy not mirrored")
	}
	if _, ok := vb.OperatorPolicy("op"); !ok {
		t.Fatal("operator policy not mirrored")
	}
	if x, ok := vb.Exchange("dx"); !ok || !x.Durable() {
		t.Fatal("durable exchange not mirrored")
	}
	if x, ok := vb.Exchange("tx"); !ok || x.Durable() {
		t.Fatal("transient exchange not mirrored")
	}
	dq, err := vb.Queue("dq", nil)
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := dq.Policy(); name != "p" {
		t.Fatalf("mirrored queue's policy %q", name)
	}
	if q, err := vb.Queue("tq", nil); err != nil || q.Home() != "a" {
		t.Fatalf("transient queue: %v %v", q, err)
	}
	if got := len(vb.Bindings()); got != 2 {
		t.Fatalf("%d bindings mirrored, want 2", got)
	}

	// A delete of the other kind than the object's changes nothing.
	for _, k := range []string{"tqueue/rv\x00dq", "texchange/rv\x00dx", "queue/rv\x00tq", "exchange/rv\x00tx",
		"t" + vb.bindingKey(vb.exchanges["dx"].bindings[0])} {
		if err := b.ApplyMeta([]MetaOp{{Key: k}}); err != nil {
			t.Fatal(err)
		}
	}
	seen()
	if len(vb.Queues()) != 2 || len(vb.Bindings()) != 2 {
		t.Fatalf("a delete of the other kind removed something: %d queues, %d bindings", len(vb.Queues()), len(vb.Bindings()))
	}
	for _, x := range []string{"dx", "tx"} {
		if _, ok := vb.Exchange(x); !ok {
			t.Fatalf("a delete of the other kind removed exchange %s", x)
		}
	}

	// Deletes, one kind at a time.
	if err := va.UnbindQueue("dq", "dx", "k", Table{"a": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := va.UnbindQueue("tq", "tx", "", nil, nil); err != nil {
		t.Fatal(err)
	}
	apply()
	if got := len(vb.Bindings()); got != 0 {
		t.Fatalf("%d bindings left after the unbinds", got)
	}
	for _, q := range []string{"dq", "tq"} {
		if _, err := va.DeleteQueue(q, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []string{"dx", "tx"} {
		if err := va.DeleteExchange(x, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := va.DeletePolicy("p"); err != nil {
		t.Fatal(err)
	}
	if err := va.DeleteOperatorPolicy("op"); err != nil {
		t.Fatal(err)
	}
	apply()
	if len(vb.Queues()) != 0 || len(vb.Policies()) != 0 || len(vb.OperatorPolicies()) != 0 {
		t.Fatalf("left after the deletes: %v, %v, %v", vb.Queues(), vb.Policies(), vb.OperatorPolicies())
	}
	for _, x := range []string{"dx", "tx"} {
		if _, ok := vb.Exchange(x); ok {
			t.Fatalf("exchange %s left after its delete", x)
		}
	}
	if err := a.DeleteVHost("rv"); err != nil {
		t.Fatal(err)
	}
	apply()
	if _, ok := b.VHost("rv"); ok {
		t.Fatal("vhost left after its delete")
	}

	for _, op := range []TopoOp{TopoDeclareVHost, TopoDeleteVHost, TopoSetPolicy, TopoDeletePolicy,
		TopoSetOperatorPolicy, TopoDeleteOperatorPolicy} {
		if kinds[op] == 0 {
			t.Errorf("no record applied as %v", op)
		}
	}
	for _, op := range []TopoOp{TopoDeclareExchange, TopoDeleteExchange, TopoDeclareQueue, TopoDeleteQueue, TopoBind, TopoUnbind} {
		if kinds[op] == kinds[op+100] || kinds[op+100] == 0 {
			t.Errorf("%v: %d records, %d of them transient: want both kinds", op, kinds[op], kinds[op+100])
		}
	}
}

// TestRecordSameQueueNewMembers: forget and rebalance re-write a quorum
// queue's record with new members and the same id: the queue the node
// holds takes them and is attached to the cluster again; the same record
// once more changes nothing.
func TestRecordSameQueueNewMembers(t *testing.T) {
	b := newTestBroker(t, newFakeStore())
	c := &fakeCluster{name: "b"}
	b.SetCluster(c)
	v := mustVHost(t, b, "/")
	rec := func(members ...string) MetaOp {
		return MetaOp{Key: "queue//\x00qq", Val: encodeRecord(Table{"id": uint64(7), "durable": true,
			"args": Table{"x-queue-type": "quorum"}, "members": stringsToAny(members)})}
	}
	attached := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.attached)
	}
	if err := b.ApplyMeta([]MetaOp{rec("a", "b", "c")}); err != nil {
		t.Fatal(err)
	}
	q, err := v.Queue("qq", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := attached()
	if err := b.ApplyMeta([]MetaOp{rec("a", "b", "d")}); err != nil {
		t.Fatal(err)
	}
	q2, _ := v.Queue("qq", nil)
	if q2 != q || !slices.Equal(q.Members(), []string{"a", "b", "d"}) {
		t.Fatalf("after the re-written record: same queue %v, members %v", q2 == q, q.Members())
	}
	if got := attached(); got != n+1 {
		t.Fatalf("attached %d times after the members changed, want %d", got, n+1)
	}
	if err := b.ApplyMeta([]MetaOp{rec("a", "b", "d")}); err != nil {
		t.Fatal(err)
	}
	if q3, _ := v.Queue("qq", nil); q3 != q || attached() != n+1 {
		t.Fatal("the same record again changed the queue")
	}
}

// TestRecordReplacesAnotherObject: a record of a queue with another id,
// or of an inequivalent exchange, replaces what the name holds (its
// bindings go with it), as v0.1.0 applies records; an equal exchange
// record keeps the exchange and its bindings. A committed declaration
// (a command, not a record) of a taken name changes nothing.
func TestRecordReplacesAnotherObject(t *testing.T) {
	b := newTestBroker(t, newFakeStore())
	b.SetCluster(&fakeCluster{name: "b"})
	v := mustVHost(t, b, "/")
	qrec := func(id uint64) MetaOp {
		return MetaOp{Key: "queue//\x00q", Val: encodeRecord(Table{"id": id, "durable": true, "args": Table{}})}
	}
	xrec := func(kind string) MetaOp {
		return MetaOp{Key: "exchange//\x00x", Val: encodeRecord(Table{"type": kind, "durable": true, "args": Table{}})}
	}
	bind := MetaOp{Key: "binding//\x00x\x00qq\x00k\x00" + "00", Val: encodeRecord(Table{"source": "x", "destination": "q",
		"destination_type": "queue", "routing_key": "k", "args": Table{}})}
	if err := b.ApplyMeta([]MetaOp{qrec(7), xrec(KindDirect), bind}); err != nil {
		t.Fatal(err)
	}
	q7, err := v.Queue("q", nil)
	if err != nil || q7.ID() != 7 || len(v.Bindings()) != 1 {
		t.Fatalf("queue %v %v, bindings %v", q7, err, v.Bindings())
	}
	// The equal exchange record: the exchange and its binding stay.
	x1, _ := v.Exchange("x")
	if err := b.ApplyMeta([]MetaOp{xrec(KindDirect)}); err != nil {
		t.Fatal(err)
	}
	if x, _ := v.Exchange("x"); x != x1 || len(v.Bindings()) != 1 {
		t.Fatalf("an equal exchange record replaced it (%v) or its bindings (%v)", x != x1, v.Bindings())
	}
	// A committed queue.declare of the taken name: nothing.
	if _, err := b.ApplyCommitted(TopologyCommand{Op: TopoDeclareQueue, VHost: "/", Name: "q", ID: 11, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if q, _ := v.Queue("q", nil); q != q7 {
		t.Fatal("a committed declaration replaced the queue of its name")
	}
	// A record of another queue of the name replaces it, bindings and all.
	if err := b.ApplyMeta([]MetaOp{qrec(9)}); err != nil {
		t.Fatal(err)
	}
	q9, err := v.Queue("q", nil)
	if err != nil || q9.ID() != 9 || q9 == q7 {
		t.Fatalf("after another queue's record: %v %v", q9, err)
	}
	if len(v.Bindings()) != 0 {
		t.Fatalf("the replaced queue's binding stayed: %v", v.Bindings())
	}
	// A committed exchange.declare of the taken name: nothing.
	if _, err := b.ApplyCommitted(TopologyCommand{Op: TopoDeclareExchange, VHost: "/", Name: "x", Type: KindTopic, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if x, _ := v.Exchange("x"); x.Kind() != KindDirect {
		t.Fatalf("a committed declaration replaced the exchange: %s", x.Kind())
	}
	// An inequivalent exchange record replaces it.
	bindQ(t, v, "q", "x", "k", nil)
	if err := b.ApplyMeta([]MetaOp{xrec(KindFanout)}); err != nil {
		t.Fatal(err)
	}
	if x, _ := v.Exchange("x"); x == x1 || x.Kind() != KindFanout {
		t.Fatalf("after an inequivalent record: exchange %s", x.Kind())
	}
	if len(v.Bindings()) != 0 {
		t.Fatalf("the replaced exchange's binding stayed: %v", v.Bindings())
	}
}

// TestRecordAdoptsOwnPending: on the records path a node's own
// declaration waits, pending, for its record to commit; the record's
// apply installs that very object (a queue with its owner, an exchange
// with its delayer), not one rebuilt from the record.
func TestRecordAdoptsOwnPending(t *testing.T) {
	l, va, _ := twoNodes(t)
	var pq *Queue
	l.before = func() {
		va.mu.RLock()
		pq = va.pending["pq"]
		va.mu.RUnlock()
	}
	conn := new(int)
	q := declareQ(t, va, "pq", QueueOpts{Exclusive: true, Owner: conn})
	if pq == nil || q != pq {
		t.Fatalf("declared queue %p, pending %p: not adopted", q, pq)
	}
	var px *Exchange
	l.before = func() {
		va.mu.RLock()
		px = va.pendingX["px"]
		va.mu.RUnlock()
	}
	declareX(t, va, "px", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}})
	if x, _ := va.Exchange("px"); px == nil || x != px {
		t.Fatalf("declared exchange %p, pending %p: not adopted", x, px)
	}
}

// TestRecordStreamOffset: a committed stream offset record, not topology,
// is taken by its stream through ApplyMeta (applyStreamOffsetRecord), put
// and delete; one of a vhost this node lacks is nothing.
func TestRecordStreamOffset(t *testing.T) {
	b := newTestBroker(t, newFakeStore())
	v := mustVHost(t, b, "/")
	q := newStreamQ(t, v, "s", nil)
	seen := seeCommitted(t)
	held := func() (namedOffset, bool) {
		q.st.mu.Lock()
		defer q.st.mu.Unlock()
		o, ok := q.st.offsets["n"]
		return o, ok
	}
	key := "streamoff//\x00s\x00n"
	if err := b.ApplyMeta([]MetaOp{{Key: key, Val: encodeRecord(Table{"offset": uint64(4), "epoch": uint64(1)})}}); err != nil {
		t.Fatal(err)
	}
	if o, ok := held(); !ok || o != (namedOffset{off: 4, epoch: 1}) {
		t.Fatalf("offset held %+v %v, want 4 of epoch 1", o, ok)
	}
	if err := b.ApplyMeta([]MetaOp{{Key: key}, {Key: "streamoff/nov\x00s\x00n", Val: []byte{0xff}}}); err != nil {
		t.Fatal(err)
	}
	if o, ok := held(); ok {
		t.Fatalf("offset %+v held after its record's delete", o)
	}
	if cs := seen(); len(cs) != 0 {
		t.Fatalf("stream offsets applied as topology commands: %+v", cs)
	}
}

// TestCommittedVHostDeleteTakesOperatorPolicies: a committed vhost.delete
// deletes the records of the vhost's operator policies with the rest, on
// every node (as a standalone delete does).
func TestCommittedVHostDeleteTakesOperatorPolicies(t *testing.T) {
	twoNodesCommands = true
	l, _, _ := twoNodes(t)
	twoNodesCommands = false
	a := l.nodes[0]
	v := mustVHost(t, a, "ov")
	if _, err := v.SetOperatorPolicy(Policy{Name: "cap", Pattern: ".*", ApplyTo: ApplyToQueues, Definition: Table{"max-length": int64(3)}}); err != nil {
		t.Fatal(err)
	}
	for i := range l.stores {
		if ks := l.stores[i].MetaKeys(opPolicyPrefix + "ov\x00"); len(ks) != 1 {
			t.Fatalf("node %d: operator policy records %q", i, ks)
		}
	}
	if err := a.DeleteVHost("ov"); err != nil {
		t.Fatal(err)
	}
	for i := range l.stores {
		if ks := l.stores[i].MetaKeys(opPolicyPrefix + "ov\x00"); len(ks) != 0 {
			t.Fatalf("node %d keeps the deleted vhost's operator policy records %q", i, ks)
		}
	}
}

// TestCommittedVHostDeleteTakesStreamOffsets: a committed vhost.delete
// deletes the named offsets of the vhost's streams on every node, so a
// stream declared again under the same names starts with none (a
// stream's drop inside the apply returns its offsets' delete, which the
// vhost's drop does not write).
func TestCommittedVHostDeleteTakesStreamOffsets(t *testing.T) {
	twoNodesCommands = true
	l, _, _ := twoNodes(t)
	twoNodesCommands = false
	a := l.nodes[0]
	mustVHost(t, a, "sv")
	key := streamOffsetPrefix + "sv\x00s\x00reader"
	other := streamOffsetPrefix + "sv2\x00s\x00reader"
	for _, st := range l.stores {
		for _, k := range []string{key, other} {
			if err := st.PutMeta(k, encodeRecord(Table{"offset": uint64(7), "epoch": uint64(1)})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.DeleteVHost("sv"); err != nil {
		t.Fatal(err)
	}
	for i := range l.stores {
		if ks := l.stores[i].MetaKeys(streamOffsetPrefix); len(ks) != 1 || ks[0] != other {
			t.Fatalf("node %d: offset records %q after the vhost's delete, want only %q", i, ks, other)
		}
	}
}
