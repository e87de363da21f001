package exchange

import (
	"slices"
	"testing"
)

// TestRecoveryReplaysCommands (issue 43): a restart reads every durable
// topology record as the command that made it and applies it through the
// apply committed commands take: the vhost with its metadata, a policy
// and an operator policy, a delayed exchange (its store id kept), a
// durable queue (its id kept) and a binding come back, in dependency
// order, and the queue takes both policies and routes again.
func TestRecoveryReplaysCommands(t *testing.T) {
	st := newFakeStore()
	b1 := newTestBroker(t, st)
	v := mustVHost(t, b1, "rv")
	if err := b1.SetVHostMetadata("rv", "replayed", []string{"t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.SetPolicy(Policy{Name: "p", Pattern: "^q", ApplyTo: ApplyToQueues, Definition: Table{"max-length": int64(5)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.SetOperatorPolicy(Policy{Name: "op", Pattern: ".*", ApplyTo: ApplyToQueues, Definition: Table{"max-length": int64(9)}}); err != nil {
		t.Fatal(err)
	}
	if err := v.DeclareExchange("dx", KindDelayed, ExchangeOpts{Durable: true, Args: Table{"x-delayed-type": "direct"}}); err != nil {
		t.Fatal(err)
	}
	if err := v.DeclareExchange("x", KindDirect, ExchangeOpts{Durable: true}); err != nil {
		t.Fatal(err)
	}
	q := declareQ(t, v, "q", QueueOpts{Durable: true})
	if err := v.BindQueue("q", "x", "k", nil, nil); err != nil {
		t.Fatal(err)
	}
	x, _ := v.Exchange("dx")
	delayID := x.delay.id
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	var seen []TopologyCommand
	replayHook = func(c TopologyCommand) {
		if c.VHost == "rv" {
			seen = append(seen, c)
		}
	}
	defer func() { replayHook = nil }()
	b2 := newTestBroker(t, st)
	replayHook = nil
	var ops []TopoOp
	for _, c := range seen {
		ops = append(ops, c.Op)
	}
	want := []TopoOp{TopoDeclareVHost, TopoSetPolicy, TopoSetOperatorPolicy, TopoDeclareExchange, TopoDeclareExchange,
		TopoDeclareQueue, TopoBind}
	if !slices.Equal(ops, want) {
		t.Fatalf("replayed %v, want %v", ops, want)
	}
	if c := seen[0]; c.Description != "replayed" || !slices.Equal(c.Tags, []string{"t1"}) {
		t.Fatalf("vhost command %+v", c)
	}
	v2 := mustVHost(t, b2, "rv")
	q2, err := v2.Queue("q", nil)
	if err != nil || q2.ID() != q.ID() {
		t.Fatalf("queue after the restart: %v, id %d want %d", err, q2.ID(), q.ID())
	}
	if name, _ := q2.Policy(); name != "p" {
		t.Fatalf("queue's policy %q", name)
	}
	if name, _ := q2.OperatorPolicy(); name != "op" {
		t.Fatalf("queue's operator policy %q", name)
	}
	x2, ok := v2.Exchange("dx")
	if !ok || x2.delay == nil || x2.delay.id != delayID {
		t.Fatalf("delayed exchange after the restart: %v", ok)
	}
	if bs := v2.Bindings(); !slices.ContainsFunc(bs, func(b BindingInfo) bool {
		return b.Source == "x" && b.Destination == "q" && b.RoutingKey == "k"
	}) {
		t.Fatalf("bindings after the restart: %+v", bs)
	}
}
