package exchange

import (
	"fmt"
	"sync"
	"testing"
)

// warmRoutes publishes enough to v that its routing table is built again
// after the last topology change, and checks that it was.
func warmRoutes(t *testing.T, v *VHost) {
	t.Helper()
	for i := 0; i < 10_000 && v.mu.table.Load() == nil; i++ {
		publish(t, v, "amq.direct", "rt-warm-nowhere", "w")
	}
	if v.mu.table.Load() == nil {
		t.Fatal("the routing table was not built")
	}
}

// TestRouteTableFollowsTopology: a change made while publishers route
// through the lock-free table is seen by the very next publish.
func TestRouteTableFollowsTopology(t *testing.T) {
	v, _ := newTestVHost(t)
	q1 := declareQ(t, v, "rt-q1", QueueOpts{})
	q2 := declareQ(t, v, "rt-q2", QueueOpts{})
	declareX(t, v, "rt-topic", KindTopic, ExchangeOpts{})
	declareX(t, v, "rt-fan", KindFanout, ExchangeOpts{})
	declareX(t, v, "rt-ae", KindFanout, ExchangeOpts{})
	bindQ(t, v, "rt-q1", "rt-topic", "a.*", nil)

	step := func(name, x, key string, want1, want2 int) {
		t.Helper()
		warmRoutes(t, v)
		publish(t, v, x, key, name)
		if r1, r2 := ready(q1), ready(q2); r1 != want1 || r2 != want2 {
			t.Fatalf("%s: queues hold %d, %d; want %d, %d", name, r1, r2, want1, want2)
		}
	}
	step("bound", "rt-topic", "a.b", 1, 0)
	step("unmatched", "rt-topic", "b.b", 1, 0)
	bindQ(t, v, "rt-q2", "rt-topic", "#", nil)
	step("second binding", "rt-topic", "a.c", 2, 1)
	if err := v.UnbindQueue("rt-q1", "rt-topic", "a.*", nil, nil); err != nil {
		t.Fatal(err)
	}
	step("unbound", "rt-topic", "a.d", 2, 2)
	if err := v.BindExchange("rt-fan", "rt-topic", "x.#", nil); err != nil {
		t.Fatal(err)
	}
	bindQ(t, v, "rt-q1", "rt-fan", "", nil)
	step("exchange to exchange", "rt-topic", "x.y", 3, 3)
	step("default exchange", "", "rt-q1", 4, 3)
	if _, err := v.SetPolicy(Policy{Name: "rt-ae", Pattern: "^rt-fan$", ApplyTo: ApplyToExchanges,
		Definition: Table{"alternate-exchange": "rt-ae"}}); err != nil {
		t.Fatal(err)
	}
	if err := v.UnbindQueue("rt-q1", "rt-fan", "", nil, nil); err != nil {
		t.Fatal(err)
	}
	bindQ(t, v, "rt-q2", "rt-ae", "", nil)
	step("alternate exchange by policy", "rt-fan", "any", 4, 4)
	if _, err := v.DeleteQueue("rt-q2", false, false, nil); err != nil {
		t.Fatal(err)
	}
	step("deleted queue", "rt-fan", "any", 4, 0)
	if err := v.DeleteExchange("rt-topic", false); err != nil {
		t.Fatal(err)
	}
	warmRoutes(t, v)
	if _, err := v.Publish(&Message{Exchange: "rt-topic", RoutingKey: "a.b"}, PublishOpts{}); err == nil {
		t.Fatal("publish to a deleted exchange: no error")
	}
}

// TestRouteTableConcurrentTopology runs publishers against binds and
// unbinds (for -race), and checks that a publish after a bind returned
// reaches the queue.
func TestRouteTableConcurrentTopology(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "rt-c", KindDirect, ExchangeOpts{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = v.Publish(&Message{Exchange: "rt-c", RoutingKey: fmt.Sprintf("k%d", (i+p)%4)}, PublishOpts{})
			}
		}()
	}
	for i := range 200 {
		name := fmt.Sprintf("rt-c-%d", i)
		q := declareQ(t, v, name, QueueOpts{})
		bindQ(t, v, name, "rt-c", "only-"+name, nil)
		publish(t, v, "rt-c", "only-"+name, "x")
		if ready(q) != 1 {
			t.Fatalf("%s: a publish after its bind did not reach it", name)
		}
		if err := v.UnbindQueue(name, "rt-c", "only-"+name, nil, nil); err != nil {
			t.Fatal(err)
		}
		publish(t, v, "rt-c", "only-"+name, "y")
		if ready(q) != 1 {
			t.Fatalf("%s: a publish after its unbind reached it", name)
		}
	}
	close(stop)
	wg.Wait()
}
