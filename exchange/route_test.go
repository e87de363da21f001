package exchange

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTopicMatching(t *testing.T) {
	tt := []struct {
		pattern, key string
		match        bool
	}{
		{"a.b.c", "a.b.c", true},
		{"a.b.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.c", false},
		{"a.*", "a.b.c", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"*.*", "a", false},
		{"*.*", "a.b", true},
		{"#", "", true},
		{"#", "a", true},
		{"#", "a.b.c", true},
		{"a.#", "a", true},
		{"a.#", "a.b.c", true},
		{"a.#", "b.a", false},
		{"a.#", "ab", false},
		{"#.c", "c", true},
		{"#.c", "a.b.c", true},
		{"#.c", "a.b.cd", false},
		{"a.#.b", "a.b", true},
		{"a.#.b", "a.x.b", true},
		{"a.#.b", "a.x.y.b", true},
		{"a.#.b", "a.b.b", true},
		{"a.#.b", "a.x.y.c", false},
		{"a.#.b", "a", false},
		{"#.#", "", true},
		{"#.#", "a", true},
		{"#.#", "a.b.c", true},
		{"a.#.#", "a", true},
		{"#.b.#", "b", true},
		{"#.b.#", "a.b.c", true},
		{"#.b.#", "a.c", false},
		{"*.#", "a", true},
		{"*.#", "a.b.c", true},
		{"#.*", "a", true},
		{"#.*.c", "c", false},
		{"#.*.c", "b.c", true},
		// Empty words.
		{"a..b", "a..b", true},
		{"a..b", "a.b", false},
		{"a.*.b", "a..b", true},
		{"a.", "a.", true},
		{"a.*", "a.", true},
		{"a.", "a", false},
		{".a", ".a", true},
		{"*.a", ".a", true},
		// The empty routing key is zero words in RabbitMQ: it matches
		// "" and "#" but not "*" (checked against RabbitMQ 3.10).
		{"", "", true},
		{"", "a", false},
		{"*", "", false},
		{"*.#", "", false},
		{"#", "", true},
		// Literal words are compared exactly.
		{"A.b", "a.b", false},
		{"a.b*", "a.bc", false},
		{"a.b#", "a.b", false},
	}
	for _, tc := range tt {
		t.Run(fmt.Sprintf("%q~%q", tc.pattern, tc.key), func(t *testing.T) {
			v, _ := newTestVHost(t)
			declareX(t, v, "t", KindTopic, ExchangeOpts{})
			declareQ(t, v, "q", QueueOpts{})
			bindQ(t, v, "q", "t", tc.pattern, nil)
			r := publish(t, v, "t", tc.key, "m")
			if got := r.Routed == 1; got != tc.match {
				t.Fatalf("pattern %q key %q: routed %d, want match=%v", tc.pattern, tc.key, r.Routed, tc.match)
			}
		})
	}
}

func TestTopicOnceAcrossPatterns(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "t", KindTopic, ExchangeOpts{})
	q1 := declareQ(t, v, "q1", QueueOpts{})
	q2 := declareQ(t, v, "q2", QueueOpts{})
	for _, p := range []string{"a.b", "a.*", "#", "a.#", "*.b", "#.b", "#.#"} {
		bindQ(t, v, "q1", "t", p, nil)
	}
	bindQ(t, v, "q2", "t", "a.#", nil)
	r := publish(t, v, "t", "a.b", "m")
	if r.Routed != 2 {
		t.Fatalf("routed %d, want 2", r.Routed)
	}
	if ready(q1) != 1 || ready(q2) != 1 {
		t.Fatalf("ready q1=%d q2=%d, want 1 and 1", ready(q1), ready(q2))
	}
}

func TestTopicUnbindPrunes(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "t", KindTopic, ExchangeOpts{})
	declareQ(t, v, "q", QueueOpts{})
	bindQ(t, v, "q", "t", "a.b.c", nil)
	bindQ(t, v, "q", "t", "a.#", nil)
	if err := v.UnbindQueue("q", "t", "a.b.c", nil, nil); err != nil {
		t.Fatal(err)
	}
	if r := publish(t, v, "t", "a.b.c", "m"); r.Routed != 1 {
		t.Fatalf("after unbinding a.b.c, a.# should still match: routed %d", r.Routed)
	}
	if err := v.UnbindQueue("q", "t", "a.#", nil, nil); err != nil {
		t.Fatal(err)
	}
	if r := publish(t, v, "t", "a.b.c", "m"); r.Routed != 0 {
		t.Fatalf("after unbinding all: routed %d", r.Routed)
	}
	// Unbinding what is not bound succeeds, as in RabbitMQ.
	if err := v.UnbindQueue("q", "t", "nope", nil, nil); err != nil {
		t.Fatalf("unbind of a missing binding: %v", err)
	}
	tr := v.exchanges["t"].router.(*topicRouter)
	if !tr.root.empty() {
		t.Fatalf("trie not pruned: %+v", tr.root)
	}
}

func TestDirectAndFanout(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "d", KindDirect, ExchangeOpts{})
	declareX(t, v, "f", KindFanout, ExchangeOpts{})
	qa := declareQ(t, v, "qa", QueueOpts{})
	qb := declareQ(t, v, "qb", QueueOpts{})
	bindQ(t, v, "qa", "d", "k1", nil)
	bindQ(t, v, "qa", "d", "k2", nil)
	bindQ(t, v, "qb", "d", "k1", nil)
	bindQ(t, v, "qa", "f", "ignored", nil)
	bindQ(t, v, "qb", "f", "", nil)
	// Binding twice is idempotent.
	bindQ(t, v, "qb", "d", "k1", nil)

	tt := []struct {
		x, key   string
		routed   int
		dqa, dqb int
	}{
		{"d", "k1", 2, 1, 1},
		{"d", "k2", 1, 1, 0},
		{"d", "K1", 0, 0, 0},
		{"d", "", 0, 0, 0},
		{"f", "anything", 2, 1, 1},
		{"f", "", 2, 1, 1},
	}
	for _, tc := range tt {
		t.Run(tc.x+"/"+tc.key, func(t *testing.T) {
			a0, b0 := ready(qa), ready(qb)
			r := publish(t, v, tc.x, tc.key, "m")
			if r.Routed != tc.routed || !r.OK || r.Pending {
				t.Fatalf("result %+v, want routed %d", r, tc.routed)
			}
			if ready(qa)-a0 != tc.dqa || ready(qb)-b0 != tc.dqb {
				t.Fatalf("qa +%d qb +%d, want +%d +%d", ready(qa)-a0, ready(qb)-b0, tc.dqa, tc.dqb)
			}
		})
	}
	if n := len(v.Bindings()); n != 5 {
		t.Fatalf("%d bindings listed, want 5", n)
	}
}

func TestHeadersMatching(t *testing.T) {
	tt := []struct {
		name    string
		args    Table
		headers Table
		match   bool
	}{
		{"all both", Table{"x-match": "all", "a": "1", "b": "2"}, Table{"a": "1", "b": "2", "c": "3"}, true},
		{"all one missing", Table{"x-match": "all", "a": "1", "b": "2"}, Table{"a": "1"}, false},
		{"all one differs", Table{"x-match": "all", "a": "1", "b": "2"}, Table{"a": "1", "b": "3"}, false},
		{"default is all", Table{"a": "1", "b": "2"}, Table{"a": "1"}, false},
		{"default is all, match", Table{"a": "1"}, Table{"a": "1"}, true},
		{"any one", Table{"x-match": "any", "a": "1", "b": "2"}, Table{"b": "2"}, true},
		{"any none", Table{"x-match": "any", "a": "1", "b": "2"}, Table{"a": "2", "c": "1"}, false},
		{"any nil headers", Table{"x-match": "any", "a": "1"}, nil, false},
		{"all nil headers", Table{"x-match": "all", "a": "1"}, nil, false},
		{"all no args matches all", Table{"x-match": "all"}, nil, true},
		{"any no args matches none", Table{"x-match": "any"}, Table{"a": "1"}, false},
		{"all ignores x- args", Table{"x-match": "all", "x-foo": "bar", "a": "1"}, Table{"a": "1"}, true},
		{"any ignores x- args", Table{"x-match": "any", "x-foo": "bar"}, Table{"x-foo": "bar"}, false},
		{"all-with-x needs x- header", Table{"x-match": "all-with-x", "x-foo": "bar", "a": "1"}, Table{"a": "1"}, false},
		{"all-with-x match", Table{"x-match": "all-with-x", "x-foo": "bar", "a": "1"}, Table{"a": "1", "x-foo": "bar"}, true},
		{"any-with-x match on x-", Table{"x-match": "any-with-x", "x-foo": "bar", "a": "1"}, Table{"x-foo": "bar"}, true},
		{"any-with-x none", Table{"x-match": "any-with-x", "x-foo": "bar"}, Table{"x-foo": "baz"}, false},
		{"void matches presence", Table{"x-match": "all", "a": nil}, Table{"a": "whatever"}, true},
		{"void matches void", Table{"x-match": "all", "a": nil}, Table{"a": nil}, true},
		{"void needs presence", Table{"x-match": "all", "a": nil}, Table{"b": "1"}, false},
		{"any void", Table{"x-match": "any", "a": nil, "b": "2"}, Table{"a": int32(7)}, true},
		{"int32 vs int64", Table{"n": int32(5)}, Table{"n": int64(5)}, true},
		{"uint8 vs int16", Table{"n": uint8(5)}, Table{"n": int16(5)}, true},
		{"int8 vs int64 negative", Table{"n": int8(-1)}, Table{"n": int64(-1)}, true},
		{"uint32 vs uint64", Table{"n": uint32(1 << 20)}, Table{"n": uint64(1 << 20)}, true},
		{"numbers differ", Table{"n": int64(5)}, Table{"n": int64(6)}, false},
		{"number vs string", Table{"n": int64(5)}, Table{"n": "5"}, false},
		{"string vs number", Table{"n": "5"}, Table{"n": int32(5)}, false},
		{"bool", Table{"b": true}, Table{"b": true}, true},
		{"bool differs", Table{"b": true}, Table{"b": false}, false},
	}
	for _, tc := range tt {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := newTestVHost(t)
			declareQ(t, v, "q", QueueOpts{})
			bindQ(t, v, "q", "amq.headers", "", tc.args)
			m := &Message{Exchange: "amq.headers", RoutingKey: "ignored", Body: []byte("m")}
			m.Props.Headers = tc.headers
			r := publishM(t, v, m, PublishOpts{})
			if got := r.Routed == 1; got != tc.match {
				t.Fatalf("args %v headers %v: routed %d, want match=%v", tc.args, tc.headers, r.Routed, tc.match)
			}
		})
	}
}

func TestHeadersBadXMatch(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	err := v.BindQueue("q", "amq.match", "", Table{"x-match": "some"}, nil)
	wantKind(t, err, KindPreconditionFailed)
	// x-match is not special on other exchange types.
	if err := v.BindQueue("q", "amq.direct", "k", Table{"x-match": "some"}, nil); err != nil {
		t.Fatalf("x-match on a direct exchange: %v", err)
	}
}

func TestDefaultExchange(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "orders", QueueOpts{})
	if r := publish(t, v, "", "orders", "m"); r.Routed != 1 || ready(q) != 1 {
		t.Fatalf("default exchange: routed %d ready %d", r.Routed, ready(q))
	}
	if r := publish(t, v, "", "nope", "m"); r.Routed != 0 {
		t.Fatalf("default exchange to missing queue: routed %d", r.Routed)
	}
	wantKind(t, v.BindQueue("orders", "", "x", nil, nil), KindAccessRefused)
	wantKind(t, v.DeclareExchange("", KindDirect, ExchangeOpts{}), KindAccessRefused)
	wantKind(t, v.DeleteExchange("", false), KindAccessRefused)
	wantKind(t, v.DeleteExchange("amq.direct", false), KindAccessRefused)
	// The predeclared exchanges exist and can be checked passively.
	for _, n := range []string{"amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} {
		if err := v.DeclareExchange(n, "", ExchangeOpts{Passive: true}); err != nil {
			t.Errorf("passive %s: %v", n, err)
		}
	}
	// An exclusive queue of another connection can still be published to.
	owner := new(int)
	xq := declareQ(t, v, "mine", QueueOpts{Exclusive: true, Owner: owner})
	if r := publish(t, v, "", "mine", "m"); r.Routed != 1 || ready(xq) != 1 {
		t.Fatalf("publish to exclusive queue: routed %d", r.Routed)
	}
}

func TestExchangeToExchange(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "x1", KindDirect, ExchangeOpts{})
	declareX(t, v, "x2", KindFanout, ExchangeOpts{})
	declareX(t, v, "x3", KindTopic, ExchangeOpts{})
	q := declareQ(t, v, "q", QueueOpts{})
	q3 := declareQ(t, v, "q3", QueueOpts{})
	if err := v.BindExchange("x2", "x1", "k", nil); err != nil {
		t.Fatal(err)
	}
	if err := v.BindExchange("x3", "x2", "", nil); err != nil {
		t.Fatal(err)
	}
	bindQ(t, v, "q", "x2", "", nil)
	bindQ(t, v, "q3", "x3", "k.#", nil)
	bindQ(t, v, "q", "x3", "#", nil) // q reachable twice: still one copy

	if r := publish(t, v, "x1", "k", "m"); r.Routed != 2 || ready(q) != 1 || ready(q3) != 1 {
		t.Fatalf("x1 -k-> x2 -> {q, x3 -> {q3, q}}: routed %d, q %d, q3 %d", r.Routed, ready(q), ready(q3))
	}
	if r := publish(t, v, "x1", "other", "m"); r.Routed != 0 {
		t.Fatalf("unmatched e2e: routed %d", r.Routed)
	}
	// A cycle: x3 -> x1 -> x2 -> x3. Routing terminates, each queue once.
	if err := v.BindExchange("x1", "x3", "#", nil); err != nil {
		t.Fatal(err)
	}
	if err := v.BindExchange("x3", "x3", "#", nil); err != nil {
		t.Fatal(err)
	}
	q.Purge()
	q3.Purge()
	if r := publish(t, v, "x3", "k", "m"); r.Routed != 2 || ready(q) != 1 || ready(q3) != 1 {
		t.Fatalf("cycle: routed %d, q %d, q3 %d", r.Routed, ready(q), ready(q3))
	}
	// Unbind and delete of the destination exchange remove the edges.
	if err := v.UnbindExchange("x2", "x1", "k", nil); err != nil {
		t.Fatal(err)
	}
	if err := v.DeleteExchange("x3", false); err != nil {
		t.Fatal(err)
	}
	if r := publish(t, v, "x1", "k", "m"); r.Routed != 0 {
		t.Fatalf("after unbind: routed %d", r.Routed)
	}
	wantKind(t, v.BindExchange("x2", "nope", "", nil), KindNotFound)
	wantKind(t, v.BindExchange("nope", "x2", "", nil), KindNotFound)
	wantKind(t, v.BindQueue("nope", "x2", "", nil, nil), KindNotFound)
}

func TestAlternateExchange(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "ae", KindFanout, ExchangeOpts{})
	declareX(t, v, "x", KindDirect, ExchangeOpts{Args: Table{"alternate-exchange": "ae"}})
	declareX(t, v, "y", KindDirect, ExchangeOpts{Args: Table{"alternate-exchange": "x"}})
	declareX(t, v, "noae", KindDirect, ExchangeOpts{Args: Table{"alternate-exchange": "missing"}})
	declareX(t, v, "sinkx", KindDirect, ExchangeOpts{})
	qa := declareQ(t, v, "qa", QueueOpts{})
	qx := declareQ(t, v, "qx", QueueOpts{})
	bindQ(t, v, "qa", "ae", "", nil)
	bindQ(t, v, "qx", "x", "k", nil)
	if err := v.BindExchange("sinkx", "x", "to-sink", nil); err != nil {
		t.Fatal(err)
	}

	tt := []struct {
		name, x, key string
		routed       int
		dqa, dqx     int
	}{
		{"routable does not use AE", "x", "k", 1, 0, 1},
		{"unroutable goes to AE", "x", "zzz", 1, 1, 0},
		{"AE chain y->x->ae", "y", "zzz", 1, 1, 0},
		{"AE chain y->x routes", "y", "k", 1, 0, 1},
		{"missing AE", "noae", "k", 0, 0, 0},
		// RabbitMQ 3.10: an exchange whose binding matched (here, to an
		// exchange that routes nowhere) does not use its AE.
		{"matched e2e binding does not use AE", "x", "to-sink", 0, 0, 0},
	}
	for _, tc := range tt {
		t.Run(tc.name, func(t *testing.T) {
			a0, x0 := ready(qa), ready(qx)
			r := publish(t, v, tc.x, tc.key, "m")
			if r.Routed != tc.routed || ready(qa)-a0 != tc.dqa || ready(qx)-x0 != tc.dqx {
				t.Fatalf("routed %d qa +%d qx +%d, want %d +%d +%d", r.Routed, ready(qa)-a0, ready(qx)-x0, tc.routed, tc.dqa, tc.dqx)
			}
		})
	}
	// Redeclare with a different AE is inequivalent.
	err := v.DeclareExchange("x", KindDirect, ExchangeOpts{Args: Table{"alternate-exchange": "other"}})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "inequivalent arg 'alternate-exchange' for exchange 'x' in vhost '/'")
}

func TestInternalExchange(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "int", KindFanout, ExchangeOpts{Internal: true})
	declareX(t, v, "pub", KindFanout, ExchangeOpts{})
	q := declareQ(t, v, "q", QueueOpts{})
	bindQ(t, v, "q", "int", "", nil)
	if err := v.BindExchange("int", "pub", "", nil); err != nil {
		t.Fatal(err)
	}
	_, err := v.Publish(&Message{Exchange: "int", Body: []byte("m")}, PublishOpts{})
	wantKind(t, err, KindAccessRefused)
	wantText(t, err, "cannot publish to internal exchange 'int' in vhost '/'")
	if r := publish(t, v, "pub", "", "m"); r.Routed != 1 || ready(q) != 1 {
		t.Fatalf("via e2e into internal: routed %d", r.Routed)
	}
}

func TestUnroutableAndMissingExchange(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "d", KindDirect, ExchangeOpts{})
	r := publish(t, v, "d", "k", "m")
	if r.Routed != 0 || !r.OK || r.Pending {
		t.Fatalf("unroutable: %+v", r)
	}
	_, err := v.Publish(&Message{Exchange: "missing", Body: []byte("m")}, PublishOpts{})
	wantKind(t, err, KindNotFound)
	wantText(t, err, "no exchange 'missing' in vhost '/'")
}

func TestExchangeDeclare(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "x", KindTopic, ExchangeOpts{Durable: true})
	declareX(t, v, "x", KindTopic, ExchangeOpts{Durable: true}) // equivalent redeclare
	err := v.DeclareExchange("x", KindDirect, ExchangeOpts{Durable: true})
	wantKind(t, err, KindPreconditionFailed)
	wantText(t, err, "inequivalent arg 'type' for exchange 'x' in vhost '/': received 'direct' but current is 'topic'")
	err = v.DeclareExchange("x", KindTopic, ExchangeOpts{})
	wantText(t, err, "inequivalent arg 'durable' for exchange 'x' in vhost '/': received 'false' but current is 'true'")
	wantKind(t, v.DeclareExchange("nope", KindTopic, ExchangeOpts{Passive: true}), KindNotFound)
	wantKind(t, v.DeclareExchange("amq.mine", KindTopic, ExchangeOpts{}), KindAccessRefused)
	wantKind(t, v.DeclareExchange("bad", "x-unknown", ExchangeOpts{}), KindCommandInvalid)
	// Redeclaring a predeclared exchange equivalently is allowed.
	if err := v.DeclareExchange("amq.topic", KindTopic, ExchangeOpts{Durable: true}); err != nil {
		t.Fatalf("redeclare amq.topic: %v", err)
	}
	// Delete if-unused; deleting a missing exchange succeeds.
	declareQ(t, v, "q", QueueOpts{})
	bindQ(t, v, "q", "x", "#", nil)
	wantKind(t, v.DeleteExchange("x", true), KindPreconditionFailed)
	if err := v.DeleteExchange("x", false); err != nil {
		t.Fatal(err)
	}
	if err := v.DeleteExchange("x", false); err != nil {
		t.Fatalf("delete missing exchange: %v", err)
	}
	if n := len(v.Bindings()); n != 0 {
		t.Fatalf("bindings left after exchange delete: %d", n)
	}
}

func TestAutoDeleteExchange(t *testing.T) {
	v, _ := newTestVHost(t)
	declareX(t, v, "ad", KindFanout, ExchangeOpts{AutoDelete: true})
	declareQ(t, v, "q1", QueueOpts{})
	declareQ(t, v, "q2", QueueOpts{})
	bindQ(t, v, "q1", "ad", "", nil)
	bindQ(t, v, "q2", "ad", "", nil)
	if err := v.UnbindQueue("q1", "ad", "", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Exchange("ad"); !ok {
		t.Fatal("auto-delete exchange went with a binding still left")
	}
	if _, err := v.DeleteQueue("q2", false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Exchange("ad"); ok {
		t.Fatal("auto-delete exchange survived its last binding")
	}
}

// topicRef is AMQP's topic match by definition: '*' is one word, '#' zero
// or more; the empty key is zero words.
func topicRef(pattern, key []string) bool {
	if len(pattern) == 0 {
		return len(key) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(key); i++ {
			if topicRef(pattern[1:], key[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(key) > 0 && topicRef(pattern[1:], key[1:])
	}
	return len(key) > 0 && key[0] == pattern[0] && topicRef(pattern[1:], key[1:])
}

// TestTopicTrieMatchesDefinition: the trie (wildcards as fields of their
// own) routes every key as the definition says, for random patterns over
// a small alphabet that includes "*" and "#" as words of a routing key,
// while bindings come and go, and prunes to nothing when all are gone.
func TestTopicTrieMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"a", "b", "*", "#"}
	randKey := func() string {
		n := rng.IntN(5)
		ws := make([]string, n)
		for i := range ws {
			ws[i] = words[rng.IntN(len(words))]
		}
		return strings.Join(ws, ".")
	}
	r := newTopicRouter()
	var bound []*binding
	for round := range 400 {
		if len(bound) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(bound))
			r.remove(bound[i])
			bound = append(bound[:i], bound[i+1:]...)
		} else {
			bound = append(bound, &binding{key: randKey()})
			r.add(bound[len(bound)-1])
		}
		for range 20 {
			key := randKey()
			got := map[*binding]int{}
			for _, b := range r.route(key, nil, nil) {
				got[b]++
			}
			for _, b := range bound {
				want := topicRef(splitWords(b.key), splitWords(key))
				if n := got[b]; (n == 1) != want || n > 1 {
					t.Fatalf("round %d: pattern %q key %q: routed %d times, want match=%v", round, b.key, key, n, want)
				}
			}
		}
	}
	for _, b := range bound {
		r.remove(b)
	}
	if !r.root.empty() {
		t.Fatalf("trie not pruned: %+v", r.root)
	}
}
