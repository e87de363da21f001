package meta

import (
	"fmt"
	"slices"
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// brokerTopology is a comparable picture of a broker's topology: vhosts,
// exchanges with their type, queues with their id, bindings, policies.
func brokerTopology(b *exchange.Broker) []string {
	var out []string
	for _, vn := range b.VHosts() {
		v, _ := b.VHost(vn)
		out = append(out, "vhost "+vn)
		for _, x := range v.Exchanges() {
			out = append(out, fmt.Sprintf("exchange %s %s %s", vn, x.Name(), x.Kind()))
		}
		for _, q := range v.Queues() {
			out = append(out, fmt.Sprintf("queue %s %s %d", vn, q.Name(), q.ID()))
		}
		for _, bi := range v.Bindings() {
			out = append(out, fmt.Sprintf("binding %s %s %s %s", vn, bi.Source, bi.Destination, bi.RoutingKey))
		}
		for _, p := range v.Policies() {
			out = append(out, fmt.Sprintf("policy %s %s %s", vn, p.Name, p.Pattern))
		}
	}
	slices.Sort(out)
	return out
}

// TestRestoreIntoBroker: a snapshot restore turns the node's records into
// the snapshot's and the core follows through ApplyMeta, each record
// applied as the command it stands for: what the snapshot lacks is
// deleted (a queue, a binding, an exchange, a policy, a vhost), what it
// holds is declared, and a queue whose record names another id than the
// node's queue of that name replaces it.
func TestRestoreIntoBroker(t *testing.T) {
	build := func(st exchange.Store, f func(b *exchange.Broker, v *exchange.VHost)) *exchange.Broker {
		t.Helper()
		b, err := exchange.New(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.EnsureVHost("/"); err != nil {
			t.Fatal(err)
		}
		v, _ := b.VHost("/")
		f(b, v)
		return b
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	declare := func(v *exchange.VHost, q string) {
		t.Helper()
		_, err := v.DeclareQueue(q, exchange.QueueOpts{Durable: true})
		must(err)
	}
	// The node: topology the snapshot does not have, and a queue "q"
	// declared before "shared" (so with another id than the snapshot's).
	local := store.NewMemory()
	b := build(local, func(b *exchange.Broker, v *exchange.VHost) {
		must(b.EnsureVHost("old"))
		must(v.DeclareExchange("oldx", exchange.KindFanout, exchange.ExchangeOpts{Durable: true}))
		declare(v, "oldq")
		declare(v, "q")
		must(v.BindQueue("oldq", "oldx", "", nil, nil))
		_, err := v.SetPolicy(exchange.Policy{Name: "oldp", Pattern: "^old", ApplyTo: exchange.ApplyToQueues, Definition: exchange.Table{"max-length": int64(1)}})
		must(err)
	})
	// The snapshot: another node's records.
	snap := store.NewMemory()
	a := build(snap, func(b *exchange.Broker, v *exchange.VHost) {
		must(b.EnsureVHost("new"))
		must(v.DeclareExchange("x", exchange.KindTopic, exchange.ExchangeOpts{Durable: true}))
		declare(v, "pad")
		declare(v, "pad2")
		declare(v, "q")
		must(v.BindQueue("q", "x", "k.#", nil, nil))
		_, err := v.SetPolicy(exchange.Policy{Name: "p", Pattern: "^q$", ApplyTo: exchange.ApplyToQueues, Definition: exchange.Table{"max-length": int64(5)}})
		must(err)
	})
	records := map[string][]byte{}
	must(snap.LoadMeta("", func(k string, v []byte) error {
		if exchange.ReplicatedKey(k) {
			records[k] = append([]byte(nil), v...)
		}
		return nil
	}))
	qa, _ := a.VHost("/")
	qb, _ := b.VHost("/")
	aq, _ := qa.Queue("q", nil)
	bq, _ := qb.Queue("q", nil)
	if aq.ID() == bq.ID() {
		t.Fatalf("queue q has id %d on both: the test needs them to differ", aq.ID())
	}

	ap := &StoreApplier{Local: local, Replicated: exchange.ReplicatedKey, Rank: RestoreRank,
		Hooks: []func([]exchange.MetaOp) error{b.ApplyMeta}}
	must(ap.RestoreMeta(records))
	if got, want := brokerTopology(b), brokerTopology(a); !slices.Equal(got, want) {
		t.Fatalf("after the restore\n got %v\nwant %v", got, want)
	}
}
