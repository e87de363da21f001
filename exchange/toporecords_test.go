package exchange

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
)

// replicatedRecords are a store's replicated topology records (stream
// offsets aside), by key, with the ids (random per node) zeroed: the rest
// of each record's bytes is as stored.
func replicatedRecords(t *testing.T, st *fakeStore) map[string]string {
	t.Helper()
	st.Mu.Lock()
	defer st.Mu.Unlock()
	out := map[string]string{}
	for k, v := range st.Meta {
		if !ReplicatedKey(k) || strings.HasPrefix(k, streamOffsetPrefix) {
			continue
		}
		if r, err := decodeRecord(v); err == nil && (r["id"] != nil || r["delay_id"] != nil) {
			for _, f := range []string{"id", "delay_id"} {
				if _, ok := r[f].(uint64); ok {
					r[f] = uint64(0)
				}
			}
			v = encodeRecord(r)
		}
		out[k] = string(v)
	}
	return out
}

// sameRecords fails the test unless got holds the records of want.
func sameRecords(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: record %q missing", what, k)
		} else if g != want[k] {
			t.Errorf("%s: record %q differs:\n got % x\nwant % x", what, k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: record %q too many", what, k)
		}
	}
	t.FailNow()
}

// TestFlagOffClusterWritesNoTopologyRecords (issue 43): in a cluster with
// topology commands off (a v0.1.0 member), the core writes no replicated
// topology record through its store (no PutMeta, DeleteMeta,
// DeleteMetaPrefix, nor CreateMeta: the store fails the test), and yet
// declarations, binds, unbinds, deletes, policies, operator policies,
// vhosts, an exclusive queue whose connection closes, an auto-delete
// queue whose last consumer goes and ForgetNode all work on both nodes:
// each is proposed as the records it makes (RecordsOf), never as a
// command entry, and every node ends with the records a node writing them
// itself (the records path of v0.1.0: a clustered broker without a
// metadata group) ends with for the same changes.
func TestFlagOffClusterWritesNoTopologyRecords(t *testing.T) {
	l, va, vb := twoNodes(t)
	l.mu.Lock()
	l.strict = t
	l.mu.Unlock()
	// The reference: the same changes on a node that writes its records
	// itself, as v0.1.0 did.
	refStore := newFakeStore()
	ref := newTestBroker(t, refStore)
	ref.SetCluster(&fakeCluster{name: "a"})
	vr := mustVHost(t, ref, "/")

	owner := new(int)
	declare := func(v *VHost) {
		t.Helper()
		declareQ(t, v, "q", QueueOpts{Durable: true})
		declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
		declareQ(t, v, "tq", QueueOpts{})
		declareQ(t, v, "ad", QueueOpts{Durable: true, AutoDelete: true})
		declareQ(t, v, "ex", QueueOpts{Exclusive: true, Owner: owner})
		declareX(t, v, "x", KindDirect, ExchangeOpts{Durable: true})
		declareX(t, v, "src", KindTopic, ExchangeOpts{Durable: true, AutoDelete: true})
		declareX(t, v, "tx", KindFanout, ExchangeOpts{})
		declareX(t, v, "dx", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}})
		bindQ(t, v, "q", "x", "k", nil)
		bindQ(t, v, "q", "x", "k2", Table{"a": "b"})
		bindQ(t, v, "tq", "tx", "", nil)
		if err := v.BindQueue("ex", "x", "mine", nil, owner); err != nil {
			t.Fatal(err)
		}
		bindQ(t, v, "ad", "src", "a.#", nil)
		if err := v.BindExchange("x", "src", "b.#", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := v.SetPolicy(Policy{Name: "p", Pattern: "^q$", ApplyTo: ApplyToQueues, Priority: 1,
			Definition: Table{"max-length": int64(3)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.SetOperatorPolicy(Policy{Name: "op", Pattern: "^qq$", ApplyTo: ApplyToQueues,
			Definition: Table{"max-length": int64(9)}}); err != nil {
			t.Fatal(err)
		}
		if err := v.b.EnsureVHost("v2"); err != nil {
			t.Fatal(err)
		}
		if err := v.b.SetVHostMetadata("v2", "second", []string{"t1", "t2"}); err != nil {
			t.Fatal(err)
		}
		v2 := mustVHost(t, v.b, "v2")
		declareQ(t, v2, "q2", QueueOpts{Durable: true})
	}
	declare(va)
	declare(vr)
	if got, want := topology(vb.b), topology(va.b); !slices.Equal(got, want) {
		t.Fatalf("after the declarations: b %v, a %v", got, want)
	}
	want := replicatedRecords(t, refStore)
	sameRecords(t, "node a after the declarations", replicatedRecords(t, l.stores[0]), want)
	sameRecords(t, "node b after the declarations", replicatedRecords(t, l.stores[1]), want)

	// Node b's transient queue and exchange, which ForgetNode("b") removes.
	declareQ(t, vb, "btq", QueueOpts{})
	declareX(t, vb, "btx", KindFanout, ExchangeOpts{})
	bindQ(t, vb, "btq", "x", "b", nil)

	change := func(v *VHost) {
		t.Helper()
		if err := v.UnbindQueue("q", "x", "k2", Table{"a": "b"}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := v.DeleteQueue("tq", false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := v.DeleteExchange("x", false); err != nil { // its bindings, and src it leaves empty of exchanges
			t.Fatal(err)
		}
		if err := v.DeletePolicy("p"); err != nil {
			t.Fatal(err)
		}
		if err := v.DeleteOperatorPolicy("op"); err != nil {
			t.Fatal(err)
		}
		v.CloseOwner(owner)
		c, err := v.Consume("ad", ConsumeOpts{Sink: &sink{}})
		if err != nil {
			t.Fatal(err)
		}
		c.Cancel() // ad goes, and src with its last binding
		if err := v.b.DeleteVHost("v2"); err != nil {
			t.Fatal(err)
		}
	}
	change(va)
	change(vr)
	if n := l.nodes[0].ForgetNode("b"); n != 2 {
		t.Fatalf("ForgetNode removed %d, want 2", n)
	}
	if got, want := topology(vb.b), topology(va.b); !slices.Equal(got, want) {
		t.Fatalf("after the deletes: b %v, a %v", got, want)
	}
	for _, gone := range []string{" tq", " ex", " ad", " src ", " x ", " btq", " btx ", "vhost v2"} {
		if s := strings.Join(topology(va.b), "|"); strings.Contains(s, gone) {
			t.Fatalf("%q left: %v", gone, topology(va.b))
		}
	}
	if ps := va.Policies(); len(ps) != 0 {
		t.Fatalf("policies left %v", ps)
	}
	l.stores[0].Mu.Lock()
	rawA := maps.Clone(l.stores[0].Meta)
	l.stores[0].Mu.Unlock()
	l.stores[1].Mu.Lock()
	rawB := maps.Clone(l.stores[1].Meta)
	l.stores[1].Mu.Unlock()
	for k, va := range rawA {
		if vb, ok := rawB[k]; ReplicatedKey(k) && (!ok || !bytes.Equal(va, vb)) {
			t.Fatalf("record %q: a % x, b % x", k, va, vb)
		}
	}
	want = replicatedRecords(t, refStore)
	sameRecords(t, "node a after the deletes", replicatedRecords(t, l.stores[0]), want)
	sameRecords(t, "node b after the deletes", replicatedRecords(t, l.stores[1]), want)

	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.proposed) != 0 {
		t.Fatalf("%d command entries written with topology commands off", len(l.proposed))
	}
	if len(l.records) < 20 {
		t.Fatalf("only %d records entries written", len(l.records))
	}
}

// TestRecordsOfDeclarationMatchesApply (issue 43): the record RecordsOf
// makes for a declaration is byte-equal, under the same key, to the one a
// node writing its records itself (a node alone; a clustered node before
// its metadata group is attached: what v0.1.0 writes) stores for the same
// declaration, and is a create: so a v0.1.0 member and this build read
// the same record.
func TestRecordsOfDeclarationMatchesApply(t *testing.T) {
	owner := new(int)
	queues := []struct {
		name string
		o    QueueOpts
	}{
		{"durable", QueueOpts{Durable: true, Args: Table{"x-max-length": int64(10)}}},
		{"auto", QueueOpts{Durable: true, AutoDelete: true}},
		{"quorum", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}}},
		{"stream", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream"}}},
		{"transient", QueueOpts{}},
		{"exclusive", QueueOpts{Exclusive: true, Owner: owner}},
	}
	exchanges := []struct {
		name, kind string
		o          ExchangeOpts
	}{
		{"direct", KindDirect, ExchangeOpts{Durable: true}},
		{"ae", KindTopic, ExchangeOpts{Durable: true, AutoDelete: true, Internal: true,
			Args: Table{"alternate-exchange": "direct"}}},
		{"delayed", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "topic"}}},
		{"transient", KindHeaders, ExchangeOpts{}},
	}
	for _, clustered := range []bool{false, true} {
		st := newFakeStore()
		b := newTestBroker(t, st)
		if clustered {
			b.SetCluster(&fakeCluster{name: "n1"})
		}
		v := mustVHost(t, b, "/")
		checked := 0
		check := func(c TopologyCommand, key string) {
			t.Helper()
			written, ok := st.record(key)
			if !clustered && key == "" {
				return // no record for it alone
			}
			if !ok {
				t.Fatalf("clustered %v: the apply wrote no record %q", clustered, key)
			}
			ops, err := b.RecordsOf(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != 1 || ops[0].Key != key || !ops[0].Create || !bytes.Equal(ops[0].Val, written) {
				t.Fatalf("clustered %v: RecordsOf(%v %s) = %+v\nwant a create of %q = % x", clustered, c.Op, c.Name, ops, key, written)
			}
			checked++
		}
		for _, d := range queues {
			q := declareQ(t, v, d.name, d.o)
			v.mu.RLock()
			key := v.queueKey(q)
			v.mu.RUnlock()
			check(TopologyCommand{Op: TopoDeclareQueue, VHost: "/", Name: d.name, Durable: d.o.Durable, Exclusive: d.o.Exclusive,
				AutoDelete: d.o.AutoDelete, Args: d.o.Args, ID: q.ID(), Node: q.Home(), Members: q.Members()}, key)
		}
		for _, d := range exchanges {
			declareX(t, v, d.name, d.kind, d.o)
			x, _ := v.Exchange(d.name)
			c := TopologyCommand{Op: TopoDeclareExchange, VHost: "/", Name: d.name, Type: d.kind, Durable: d.o.Durable,
				AutoDelete: d.o.AutoDelete, Internal: d.o.Internal, Args: d.o.Args, Node: x.home}
			if x.delay != nil {
				c.ID = x.delay.id
			}
			v.mu.RLock()
			key := v.exchangeKey(x)
			v.mu.RUnlock()
			check(c, key)
		}
		if want := map[bool]int{false: 7, true: 10}[clustered]; checked != want {
			t.Fatalf("clustered %v: %d records compared, want %d", clustered, checked, want)
		}
	}
}
