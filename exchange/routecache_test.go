package exchange

import "testing"

// TestRouteCacheFollowsTopology: a publisher's RouteCache answers only
// while the route table it was filled from is current. A run of publishes
// through one cache follows the topology as the uncached path does: a
// queue deleted and declared again gets the messages, a topic binding
// moved from one queue to another moves them, and a headers exchange
// (routing by the message, not the key) is routed per message.
func TestRouteCacheFollowsTopology(t *testing.T) {
	v, _ := newTestVHost(t)
	var rc RouteCache
	pub := func(x, key string, h Table) PublishResult {
		t.Helper()
		m := &Message{Exchange: x, RoutingKey: key, Body: []byte("m")}
		m.Props.Headers = h
		res, err := v.Publish(m, PublishOpts{Route: &rc})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Enough publishes that the vhost builds its route table (it routes
	// under its lock for a while after a change) and the cache fills.
	burst := func(x, key string, h Table) {
		t.Helper()
		for range 200 {
			if r := pub(x, key, h); r.Routed != 1 {
				t.Fatalf("%s/%s routed %d", x, key, r.Routed)
			}
		}
	}

	q1 := declareQ(t, v, "q1", QueueOpts{})
	burst("", "q1", nil)
	if rc.q != q1 {
		t.Fatalf("the cache holds %v, not q1 after a run to it", rc.q)
	}
	if _, err := v.DeleteQueue("q1", false, false, nil); err != nil {
		t.Fatal(err)
	}
	q1b := declareQ(t, v, "q1", QueueOpts{})
	burst("", "q1", nil)
	if n := ready(q1b); n != 200 {
		t.Fatalf("the queue declared again got %d of 200", n)
	}

	declareX(t, v, "tx", KindTopic, ExchangeOpts{})
	a := declareQ(t, v, "a", QueueOpts{})
	b := declareQ(t, v, "b", QueueOpts{})
	bindQ(t, v, "a", "tx", "k.*", nil)
	burst("tx", "k.x", nil)
	if err := v.UnbindQueue("a", "tx", "k.*", nil, nil); err != nil {
		t.Fatal(err)
	}
	bindQ(t, v, "b", "tx", "k.#", nil)
	burst("tx", "k.x", nil)
	if ra, rb := ready(a), ready(b); ra != 200 || rb != 200 {
		t.Fatalf("after the binding moved: a %d, b %d, want 200 and 200", ra, rb)
	}

	declareX(t, v, "hx", KindHeaders, ExchangeOpts{})
	h1 := declareQ(t, v, "h1", QueueOpts{})
	h2 := declareQ(t, v, "h2", QueueOpts{})
	bindQ(t, v, "h1", "hx", "", Table{"x-match": "all", "to": "1"})
	bindQ(t, v, "h2", "hx", "", Table{"x-match": "all", "to": "2"})
	for i := range 400 {
		to := []string{"1", "2"}[i%2]
		if r := pub("hx", "same", Table{"to": to}); r.Routed != 1 {
			t.Fatalf("headers publish %d routed %d", i, r.Routed)
		}
	}
	if r1, r2 := ready(h1), ready(h2); r1 != 200 || r2 != 200 {
		t.Fatalf("headers exchange through a cache: h1 %d, h2 %d, want 200 each", r1, r2)
	}
}
