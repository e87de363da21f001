package exchange

import (
	"fmt"
	"github.com/trident-broker/trident/exchange/hashring"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// routedTo is the queue m routes to from its exchange ("" for none), by
// the publish path's own routing (table or locked view).
func routedTo(t testing.TB, v *VHost, m *Message) string {
	t.Helper()
	rv := v.routes()
	defer rv.release()
	xr, ok := rv.exchange(m.Exchange)
	if !ok {
		t.Fatalf("no exchange %q", m.Exchange)
	}
	qs := rv.route(xr, m, &routeScratch{})
	switch len(qs) {
	case 0:
		return ""
	case 1:
		return qs[0].name
	}
	t.Fatalf("%q routed to %d queues, want at most 1", m.RoutingKey, len(qs))
	return ""
}

func randomKeys(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.FormatUint(r.Uint64(), 36)
	}
	return keys
}

// assignment maps each key to the queue it routes to through x.
func assignment(t testing.TB, v *VHost, x string, keys []string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = routedTo(t, v, &Message{Exchange: x, RoutingKey: k})
	}
	return out
}

func TestConsistentHashSpread(t *testing.T) {
	keys := randomKeys(100000, 7)
	for _, weights := range [][]int{{1, 2, 1}, {1, 1, 1, 1, 1}, {1, 10}, {3, 5, 7, 100}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2}} {
		t.Run(fmt.Sprint(weights), func(t *testing.T) {
			v, _ := newTestVHost(t)
			declareX(t, v, "h", KindConsistentHash, ExchangeOpts{})
			total := 0
			for i, w := range weights {
				declareQ(t, v, fmt.Sprint("q", i), QueueOpts{})
				bindQ(t, v, fmt.Sprint("q", i), "h", strconv.Itoa(w), nil)
				total += w
			}
			got := map[string]int{}
			for _, q := range assignment(t, v, "h", keys) {
				got[q]++
			}
			for i, w := range weights {
				want := float64(len(keys)) * float64(w) / float64(total)
				n := float64(got[fmt.Sprint("q", i)])
				if math.Abs(n-want) > 0.05*want {
					t.Errorf("q%d (weight %d): %v keys, want %.0f ±5%%", i, w, n, want)
				}
			}
		})
	}
}

// The choice is a function of the set of (destination, weight) pairs,
// not of the order the bindings were made in (a restart or another node
// may apply them in another order).
func TestConsistentHashOrderIndependent(t *testing.T) {
	keys := randomKeys(20000, 3)
	build := func(order []int) map[string]string {
		v, _ := newTestVHost(t)
		declareX(t, v, "h", KindConsistentHash, ExchangeOpts{})
		weights := []string{"1", "2", "1", "5"}
		for _, i := range order {
			declareQ(t, v, fmt.Sprint("q", i), QueueOpts{})
			bindQ(t, v, fmt.Sprint("q", i), "h", weights[i], nil)
		}
		return assignment(t, v, "h", keys)
	}
	a, b := build([]int{0, 1, 2, 3}), build([]int{3, 1, 0, 2})
	for k, q := range a {
		if b[k] != q {
			t.Fatalf("key %q: %s in one order, %s in another", k, q, b[k])
		}
	}
}

func TestConsistentHashMovesOnlyChangedQueue(t *testing.T) {
	keys := randomKeys(20000, 11)
	v, _ := newTestVHost(t)
	declareX(t, v, "h", KindConsistentHash, ExchangeOpts{})
	for i, w := range []string{"1", "2", "1", "3"} {
		declareQ(t, v, fmt.Sprint("q", i), QueueOpts{})
		bindQ(t, v, fmt.Sprint("q", i), "h", w, nil)
	}
	before := assignment(t, v, "h", keys)

	// Unbind q1: only q1's keys move.
	if err := v.UnbindQueue("q1", "h", "2", nil, nil); err != nil {
		t.Fatal(err)
	}
	after := assignment(t, v, "h", keys)
	moved := 0
	for k, q := range before {
		if q != "q1" && after[k] != q {
			t.Fatalf("key %q moved from %s to %s when q1 was unbound", k, q, after[k])
		}
		if q == "q1" {
			moved++
			if after[k] == "q1" || after[k] == "" {
				t.Fatalf("key %q still routed to %q", k, after[k])
			}
		}
	}
	if moved == 0 {
		t.Fatal("q1 had no keys")
	}

	// Bind it back: the same keys return to it, and only those.
	bindQ(t, v, "q1", "h", "2", nil)
	if again := assignment(t, v, "h", keys); !mapsEqual(again, before) {
		t.Fatal("re-binding q1 did not restore the assignment")
	}

	// Raise q2's weight (a second binding adds to it): keys only move to q2.
	bindQ(t, v, "q2", "h", "4", nil)
	heavier := assignment(t, v, "h", keys)
	gained := 0
	for k, q := range before {
		if heavier[k] != q {
			if heavier[k] != "q2" {
				t.Fatalf("key %q moved from %s to %s when q2 got heavier", k, q, heavier[k])
			}
			gained++
		}
	}
	if gained == 0 {
		t.Fatal("q2 gained no key")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestConsistentHashOnHeaderAndProperty(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "hh", KindConsistentHash, ExchangeOpts{Args: Table{"hash-header": "user"}})
	declareX(t, v, "hm", KindConsistentHash, ExchangeOpts{Args: Table{"hash-property": "message_id"}})
	declareX(t, v, "ht", KindConsistentHash, ExchangeOpts{Args: Table{"hash-property": "timestamp"}})
	for i := range 8 {
		declareQ(t, v, fmt.Sprint("q", i), QueueOpts{})
		for _, x := range []string{"hh", "hm", "ht"} {
			bindQ(t, v, fmt.Sprint("q", i), x, "1", nil)
		}
	}
	spread := func(x string, mk func(i int) *Message) {
		t.Helper()
		seen := map[string]bool{}
		for i := range 200 {
			m := mk(i)
			m.Exchange = x
			first := routedTo(t, v, m)
			for j := range 5 {
				m.RoutingKey = fmt.Sprint("rk", j, i)
				if q := routedTo(t, v, m); q != first {
					t.Fatalf("%s: message %d went to %s, then %s with another routing key", x, i, first, q)
				}
			}
			seen[first] = true
		}
		if len(seen) < 6 {
			t.Fatalf("%s: 200 values reached %d of 8 queues", x, len(seen))
		}
	}
	spread("hh", func(i int) *Message {
		return &Message{Props: Properties{Headers: Table{"user": fmt.Sprint("u", i)}}}
	})
	spread("hm", func(i int) *Message { return &Message{Props: Properties{MessageID: fmt.Sprint("id", i)}} })
	spread("ht", func(i int) *Message {
		return &Message{Props: Properties{Timestamp: time.Unix(int64(1_700_000_000+i), 0)}}
	})

	// An integer header hashes as its text (MQTT and STOMP send text).
	if a, b := routedTo(t, v, &Message{Exchange: "hh", Props: Properties{Headers: Table{"user": int32(42)}}}),
		routedTo(t, v, &Message{Exchange: "hh", Props: Properties{Headers: Table{"user": "42"}}}); a != b {
		t.Fatalf("42 went to %s, \"42\" to %s", a, b)
	}
	// Without the header or property, every message goes to one queue.
	want := routedTo(t, v, &Message{Exchange: "hh", RoutingKey: "a"})
	for i := range 50 {
		if q := routedTo(t, v, &Message{Exchange: "hh", RoutingKey: fmt.Sprint(i)}); q != want || q == "" {
			t.Fatalf("no header: %s, then %s", want, q)
		}
	}
}

func TestHashExchangeErrors(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	for _, tc := range []struct {
		args Table
		text string
	}{
		{Table{"hash-header": "a", "hash-property": "message_id"}, "hash-header and hash-property are mutually exclusive"},
		{Table{"hash-property": "app_id"}, "Unsupported property: app_id"},
		{Table{"hash-header": int32(3)}, "Invalid argument, 'hash-header' must be a string"},
	} {
		err := v.DeclareExchange("bad", KindConsistentHash, ExchangeOpts{Args: tc.args})
		wantKind(t, err, KindPreconditionFailed)
		wantText(t, err, tc.text)
	}
	declareX(t, v, "h", KindConsistentHash, ExchangeOpts{})
	for key, text := range map[string]string{
		"abc": `The binding key must be an integer: <<"abc">>`,
		"":    `The binding key must be an integer: <<"">>`,
		"1.5": `The binding key must be an integer: <<"1.5">>`,
		" 1":  `The binding key must be an integer: <<" 1">>`,
		"0":   "The binding key must be greater than 0",
		"-3":  "The binding key must be greater than 0",
	} {
		err := v.BindQueue("q", "h", key, nil, nil)
		wantKind(t, err, KindPreconditionFailed)
		wantText(t, err, text)
	}
	bindQ(t, v, "q", "h", "+3", nil)
	bindQ(t, v, "q", "h", "99999999999999999999999", nil) // any positive integer, as Erlang's
	// A delayed exchange routing as x-consistent-hash checks the same.
	declareX(t, v, "d", KindDelayed, ExchangeOpts{Args: Table{"x-delayed-type": KindConsistentHash}})
	wantKind(t, v.BindQueue("q", "d", "x", nil, nil), KindPreconditionFailed)
	bindQ(t, v, "q", "d", "2", nil)
	if q := routedTo(t, v, &Message{Exchange: "d", RoutingKey: "k"}); q != "q" {
		t.Fatalf("delayed consistent-hash routed to %q", q)
	}
	// x-modulus-hash takes any binding key.
	declareX(t, v, "m", KindModulusHash, ExchangeOpts{})
	bindQ(t, v, "q", "m", "anything", nil)
}

func TestModulusHash(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "m", KindModulusHash, ExchangeOpts{})
	names := []string{"c", "a", "b"}
	for _, n := range names {
		declareQ(t, v, n, QueueOpts{})
		bindQ(t, v, n, "m", "k-"+n, nil)
	}
	bindQ(t, v, "a", "m", "second", nil) // a queue bound twice counts once
	check := func(sorted []string) {
		t.Helper()
		for _, k := range randomKeys(3000, 5) {
			want := sorted[hashring.Key(k)%uint64(len(sorted))]
			if got := routedTo(t, v, &Message{Exchange: "m", RoutingKey: k}); got != want {
				t.Fatalf("key %q: %s, want %s of %v", k, got, want, sorted)
			}
		}
	}
	check([]string{"a", "b", "c"})
	if err := v.UnbindQueue("b", "m", "k-b", nil, nil); err != nil {
		t.Fatal(err)
	}
	check([]string{"a", "c"})
	if err := v.UnbindQueue("a", "m", "k-a", nil, nil); err != nil {
		t.Fatal(err)
	}
	check([]string{"a", "c"}) // still bound by "second"
}

// Routing a message through a hash exchange allocates nothing.
func TestHashRouteAllocs(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "h", KindConsistentHash, ExchangeOpts{})
	declareX(t, v, "p", KindConsistentHash, ExchangeOpts{Args: Table{"hash-property": "timestamp"}})
	declareX(t, v, "m", KindModulusHash, ExchangeOpts{})
	for i := range 5 {
		declareQ(t, v, fmt.Sprint("q", i), QueueOpts{})
		for _, x := range []string{"h", "p", "m"} {
			bindQ(t, v, fmt.Sprint("q", i), x, strconv.Itoa(i+1), nil)
		}
	}
	m := &Message{RoutingKey: "some.key", Props: Properties{Timestamp: time.Unix(1e9, 0)}}
	for _, x := range []string{"h", "p", "m"} {
		v.mu.RLock()
		r := v.exchanges[x].router
		v.mu.RUnlock()
		out := make([]*binding, 0, 4)
		allocs := testing.AllocsPerRun(1000, func() {
			if mr, ok := r.(messageRouter); ok {
				out = mr.routeMessage(m, out[:0])
			} else {
				out = r.route(m.RoutingKey, nil, out[:0])
			}
		})
		if allocs != 0 || len(out) != 1 {
			t.Fatalf("%s: %v allocations, %d routes", x, allocs, len(out))
		}
	}
}

// BenchmarkConsistentHashRoute is the per-message cost of the choice, by
// number of destinations (weights 1..n, so the weighted path).
func BenchmarkConsistentHashRoute(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			v, _ := newTestVHost(b)
			declareX(b, v, "h", KindConsistentHash, ExchangeOpts{})
			for i := range n {
				declareQ(b, v, fmt.Sprint("q", i), QueueOpts{})
				bindQ(b, v, fmt.Sprint("q", i), "h", strconv.Itoa(i+1), nil)
			}
			r := v.exchanges["h"].router.(messageRouter)
			keys := randomKeys(1024, 1)
			m := &Message{}
			out := make([]*binding, 0, 4)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.RoutingKey = keys[i&1023]
				out = r.routeMessage(m, out[:0])
			}
		})
	}
}

// BenchmarkPublishConsistentHash publishes through an x-consistent-hash
// exchange to 3 queues with weights 1, 2, 1 whose consumers drop.
func BenchmarkPublishConsistentHash(b *testing.B) {
	v, _ := newTestVHost(b)
	declareX(b, v, "h", KindConsistentHash, ExchangeOpts{})
	for i, w := range []string{"1", "2", "1"} {
		declareQ(b, v, fmt.Sprint("q", i), QueueOpts{})
		bindQ(b, v, fmt.Sprint("q", i), "h", w, nil)
		if _, err := v.Consume(fmt.Sprint("q", i), ConsumeOpts{NoAck: true, Sink: dropSink{}}); err != nil {
			b.Fatal(err)
		}
	}
	keys := randomKeys(1024, 2)
	body := make([]byte, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := &Message{Exchange: "h", RoutingKey: keys[i&1023], Body: body}
		if _, err := v.Publish(m, PublishOpts{}); err != nil {
			b.Fatal(err)
		}
	}
}

// gatedCluster is a fakeCluster whose feature flags are all off or on.
type gatedCluster struct {
	fakeCluster
	on bool
}

func (c *gatedCluster) FeatureEnabled(name string) bool {
	return c.on && (name == hashExchangesFlag || name == streamWritersFlag || name == streamChunksFlag)
}

// In a cluster, the hash types are unknown until their feature flag is
// enabled (a node of an older release could not rebuild such an exchange).
func TestHashExchangeFeatureFlag(t *testing.T) {
	v, _ := newTestVHost(t)
	c := &gatedCluster{fakeCluster: fakeCluster{name: "a"}}
	v.b.SetCluster(c)
	for _, kind := range []string{KindConsistentHash, KindModulusHash} {
		err := v.DeclareExchange("h-"+kind, kind, ExchangeOpts{})
		wantKind(t, err, KindCommandInvalid)
		wantText(t, err, "unknown exchange type '"+kind+"'")
	}
	err := v.DeclareExchange("d", KindDelayed, ExchangeOpts{Args: Table{"x-delayed-type": KindModulusHash}})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "'x-delayed-type' must be an existing exchange type")
	declareX(t, v, "direct", KindDirect, ExchangeOpts{})
	c.on = true
	declareX(t, v, "h", KindConsistentHash, ExchangeOpts{})
	declareX(t, v, "m", KindModulusHash, ExchangeOpts{})
}

// A destination may be an exchange; a queue bound twice adds its weights,
// and keeps its keys while one of its bindings remains.
func TestConsistentHashExchangeDestination(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "h", KindConsistentHash, ExchangeOpts{})
	declareX(t, v, "f", KindFanout, ExchangeOpts{})
	declareQ(t, v, "viaf", QueueOpts{})
	declareQ(t, v, "q", QueueOpts{})
	bindQ(t, v, "viaf", "f", "", nil)
	if err := v.BindExchange("f", "h", "1", nil); err != nil {
		t.Fatal(err)
	}
	wantKind(t, v.BindExchange("f", "h", "x", nil), KindPreconditionFailed)
	bindQ(t, v, "q", "h", "1", nil)
	bindQ(t, v, "q", "h", "2", nil) // q weighs 3
	keys := randomKeys(20000, 13)
	before := assignment(t, v, "h", keys)
	n := 0
	for _, q := range before {
		if q == "q" {
			n++
		}
	}
	if want := 15000.0; math.Abs(float64(n)-want) > 0.05*want {
		t.Fatalf("q (weight 3 of 4) had %d of 20000 keys", n)
	}
	// Dropping q's weight-2 binding moves some of q's keys to f, none of f's.
	if err := v.UnbindQueue("q", "h", "2", nil, nil); err != nil {
		t.Fatal(err)
	}
	for k, q := range assignment(t, v, "h", keys) {
		if before[k] == "viaf" && q != "viaf" {
			t.Fatalf("key %q left the exchange destination", k)
		}
	}
}
