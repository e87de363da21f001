package exchange

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBindingsAgainstModel: random binds and unbinds (and queue and
// exchange deletes) on exchanges of every type, with duplicate binds and
// unbinds of what is not bound, leave exactly the bindings a plain set
// says, and route to exactly the queues that set says, however the lists
// were reordered by removals.
func TestBindingsAgainstModel(t *testing.T) { bindingsAgainstModel(t) }

// TestBindingsAgainstModelColliding is TestBindingsAgainstModel with an
// index whose hash puts every binding of an exchange in one chain: a
// lookup that trusted the hash, not the binding's own destination, key
// and arguments, would find, refuse or remove the wrong binding.
func TestBindingsAgainstModelColliding(t *testing.T) {
	old := bindHash
	bindHash = func(*Queue, *Exchange, string) uint64 { return 1 }
	defer func() { bindHash = old }()
	bindingsAgainstModel(t)
}

func bindingsAgainstModel(t *testing.T) {
	v, _ := newTestVHost(t)
	kinds := map[string]string{"d": KindDirect, "t": KindTopic, "f": KindFanout, "h": KindHeaders}
	for x, k := range kinds {
		declareX(t, v, x, k, ExchangeOpts{})
	}
	const nq = 40
	for i := range nq {
		declareQ(t, v, fmt.Sprintf("q%d", i), QueueOpts{})
	}
	type bkey struct{ x, q, key, arg string }
	model := map[bkey]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c", "a.b", "a.*", "#", "a.#", "*.b"}
	argsOf := func(arg string) Table {
		if arg == "" {
			return nil
		}
		return Table{"x-match": "any", "k": arg}
	}
	for step := range 20000 {
		x := []string{"d", "t", "f", "h"}[rng.IntN(4)]
		q := fmt.Sprintf("q%d", rng.IntN(nq))
		key := keys[rng.IntN(len(keys))]
		arg := ""
		if x == "h" {
			arg = []string{"1", "2"}[rng.IntN(2)]
		}
		bk := bkey{x, q, key, arg}
		if rng.IntN(2) == 0 {
			if err := v.BindQueue(q, x, key, argsOf(arg), nil); err != nil {
				t.Fatal(err)
			}
			model[bk] = true
		} else {
			if err := v.UnbindQueue(q, x, key, argsOf(arg), nil); err != nil {
				t.Fatal(err)
			}
			delete(model, bk)
		}
		if step%1000 != 999 {
			continue
		}
		var got, want []string
		for _, b := range v.Bindings() {
			arg, _ := b.Args["k"].(string)
			got = append(got, fmt.Sprint(bkey{b.Source, b.Destination, b.RoutingKey, arg}))
		}
		for bk := range model {
			want = append(want, fmt.Sprint(bk))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: %d bindings listed, model has %d", step, len(got), len(want))
		}
		// Routing: the direct exchange by key "a", the fan-out.
		for _, tc := range []struct{ x, key string }{{"d", "a"}, {"f", "zzz"}} {
			wantQ := map[string]bool{}
			for bk := range model {
				if bk.x == tc.x && (tc.x == "f" || bk.key == tc.key) {
					wantQ[bk.q] = true
				}
			}
			sc := routePool.Get().(*routeScratch)
			rv := v.routes()
			xr, _ := rv.exchange(tc.x)
			qs := rv.route(xr, &Message{Exchange: tc.x, RoutingKey: tc.key}, sc)
			rv.release()
			gotQ := map[string]bool{}
			for _, q := range qs {
				if gotQ[q.name] {
					t.Fatalf("step %d: %s routed to %s twice", step, tc.x, q.name)
				}
				gotQ[q.name] = true
			}
			sc.qs = qs[:0]
			routePool.Put(sc)
			if len(gotQ) != len(wantQ) {
				t.Fatalf("step %d: %s/%s routed to %d queues, want %d", step, tc.x, tc.key, len(gotQ), len(wantQ))
			}
			for q := range wantQ {
				if !gotQ[q] {
					t.Fatalf("step %d: %s/%s did not route to %s", step, tc.x, tc.key, q)
				}
			}
		}
	}
	// Deleting queues takes their bindings out of every list.
	for i := range nq / 2 {
		if _, err := v.DeleteQueue(fmt.Sprintf("q%d", i), false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for bk := range model {
		var i int
		fmt.Sscanf(bk.q, "q%d", &i)
		if i >= nq/2 {
			n++
		}
	}
	if got := len(v.Bindings()); got != n {
		t.Fatalf("%d bindings after deleting half the queues, want %d", got, n)
	}
	for x := range kinds {
		if err := v.DeleteExchange(x, false); err != nil {
			t.Fatal(err)
		}
	}
	for i := nq / 2; i < nq; i++ {
		q, err := v.Queue(fmt.Sprintf("q%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(q.bindings) != 0 {
			t.Fatalf("%s keeps %d bindings after its exchanges went", q.name, len(q.bindings))
		}
	}
}

// TestTopicFanOutOnce: a message that matches many bindings, some through
// several paths ("#.#"), reaches each queue once.
func TestTopicFanOutOnce(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "t", KindTopic, ExchangeOpts{})
	qs := make([]*Queue, 100)
	for i := range qs {
		qs[i] = declareQ(t, v, fmt.Sprintf("q%d", i), QueueOpts{})
		bindQ(t, v, qs[i].name, "t", "#.#", nil)
		if i%2 == 0 {
			bindQ(t, v, qs[i].name, "t", "a.#", nil)
		}
	}
	r := newTopicRouter()
	for i := range 40 {
		r.add(&binding{key: "#.#", q: qs[i]})
	}
	if got := len(r.route("a.b.c", nil, nil)); got != 40 {
		t.Fatalf("the router matched %d bindings, want 40 (each once)", got)
	}
	res := publish(t, v, "t", "a.b.c", "m")
	if res.Routed != len(qs) {
		t.Fatalf("routed %d, want %d", res.Routed, len(qs))
	}
	for _, q := range qs {
		if ready(q) != 1 {
			t.Fatalf("%s has %d messages, want 1", q.name, ready(q))
		}
	}
}

// TestBindingByRecordKey: every binding is found by its record key
// through the index, whatever its destination and arguments; a key of no
// binding finds nothing.
func TestBindingByRecordKey(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "src", KindHeaders, ExchangeOpts{Durable: true})
	declareX(t, v, "dst", KindFanout, ExchangeOpts{Durable: true})
	declareQ(t, v, "q", QueueOpts{Durable: true})
	bindQ(t, v, "q", "src", "k", Table{"x-match": "any", "a": "1"})
	bindQ(t, v, "q", "src", "k", Table{"x-match": "any", "a": "2"})
	if err := v.BindExchange("dst", "src", "k", nil); err != nil {
		t.Fatal(err)
	}
	sx, _ := v.Exchange("src")
	if len(sx.bindings) != 3 {
		t.Fatalf("%d bindings", len(sx.bindings))
	}
	for _, b := range sx.bindings {
		k := v.recordKeyOf(b)
		if k == "" {
			t.Fatal("no record key for a durable binding")
		}
		if got := v.bindingByRecordKey(k); got != b {
			t.Fatalf("record key %q found %v, want its binding", k, got)
		}
	}
	if got := v.bindingByRecordKey(v.recordKeyOf(sx.bindings[0]) + "x"); got != nil {
		t.Fatal("a key of no binding found one")
	}
}

// TestCloseOwnerIndex: closing a connection deletes exactly its exclusive
// queues, found through the owner index (not a scan of the vhost's
// queues); the index forgets queues deleted otherwise.
func TestCloseOwnerIndex(t *testing.T) {
	v, _ := newTestVHost(t)
	a, b := new(int), new(int)
	for i := range 50 {
		declareQ(t, v, fmt.Sprintf("a%d", i), QueueOpts{Exclusive: true, Owner: a})
		declareQ(t, v, fmt.Sprintf("b%d", i), QueueOpts{Exclusive: true, Owner: b})
		declareQ(t, v, fmt.Sprintf("s%d", i), QueueOpts{Durable: true})
	}
	if _, err := v.DeleteQueue("a0", false, false, a); err != nil {
		t.Fatal(err)
	}
	v.CloseOwner(a)
	for i := range 50 {
		if _, err := v.Queue(fmt.Sprintf("a%d", i), a); err == nil {
			t.Fatalf("a%d survived its owner's close", i)
		}
		if _, err := v.Queue(fmt.Sprintf("b%d", i), b); err != nil {
			t.Fatalf("b%d: %v", i, err)
		}
		if _, err := v.Queue(fmt.Sprintf("s%d", i), nil); err != nil {
			t.Fatalf("s%d: %v", i, err)
		}
	}
	v.CloseOwner(b)
	v.mu.RLock()
	n := len(v.owned)
	v.mu.RUnlock()
	if n != 0 {
		t.Fatalf("the owner index keeps %d owners after both closed", n)
	}
}
