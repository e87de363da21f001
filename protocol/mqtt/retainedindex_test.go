package mqtt

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// indexTopics are topics over a small alphabet of levels, so that
// filters match some of them: empty levels, leading and trailing "/",
// "$" topics.
func indexTopics(rng *rand.Rand, n int) []string {
	words := []string{"a", "b", "c", "", "$x", "dev", "1", "22"}
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		l := 1 + rng.IntN(4)
		t := ""
		for i := range l {
			if i > 0 {
				t += "/"
			}
			t += words[rng.IntN(len(words))]
		}
		if wire.ValidTopic(t) && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

var indexFilters = []string{"#", "+", "a/#", "a/+/c", "+/b/#", "a/b", "a", "/#", "+/+", "/+", "a/+", "+/#",
	"$x/#", "$x/+", "+/+/+/+", "a//c", "dev/1/#", "#/", "a/b/c/22", "22/#", "", "$x", "+/$x/#"}

func bruteMatch(topics []string, filter string) []string {
	var out []string
	for _, t := range topics {
		if wire.Match(filter, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

func indexMatch(x *retainedIndex, filter string) []string {
	var out []string
	x.match(filter, func(topic []byte, ref retainedRef) {
		if !ref.set() {
			panic("match of an unset node")
		}
		out = append(out, string(topic))
	})
	slices.Sort(out)
	return out
}

// TestRetainedIndexMatch: the trie matches exactly what wire.Match
// matches against every topic, as topics come and go ("$" topics not
// matched by a leading wildcard, "a/#" matching "a", empty levels).
func TestRetainedIndexMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	topics := indexTopics(rng, 600)
	x := &retainedIndex{}
	for _, tp := range topics {
		x.set(tp, makeRef(10, 1, 0))
	}
	check := func(topics []string) {
		t.Helper()
		if x.n != len(topics) {
			t.Fatalf("index counts %d topics, want %d", x.n, len(topics))
		}
		for _, f := range indexFilters {
			if !wire.ValidFilter(f) {
				continue
			}
			if got, want := indexMatch(x, f), bruteMatch(topics, f); !slices.Equal(got, want) {
				t.Fatalf("filter %q: index %d topics %q, brute force %d %q", f, len(got), got, len(want), want)
			}
		}
		for _, tp := range topics {
			if got := indexMatch(x, tp); len(got) != 1 || got[0] != tp {
				t.Fatalf("exact %q: %q", tp, got)
			}
		}
	}
	check(topics)
	// Delete every other topic (a second delete of one changes nothing).
	var kept []string
	for i, tp := range topics {
		if i%2 == 0 {
			x.del(tp)
			x.del(tp)
		} else {
			kept = append(kept, tp)
		}
	}
	check(kept)
	// Random sets and clears, which split and merge chains.
	live := map[string]bool{}
	for _, tp := range kept {
		live[tp] = true
	}
	pool := indexTopics(rng, 900)
	for i := range 3000 {
		tp := pool[rng.IntN(len(pool))]
		if rng.IntN(2) == 0 {
			x.set(tp, makeRef(10, 1, 0))
			live[tp] = true
		} else {
			x.del(tp)
			delete(live, tp)
		}
		if i%300 == 299 {
			var l []string
			for tp := range live {
				l = append(l, tp)
			}
			check(l)
		}
	}
	for tp := range live {
		x.del(tp)
	}
	if x.n != 0 || x.root.numKids() != 0 {
		t.Fatalf("empty index keeps %d topics, %d nodes under the root", x.n, x.root.numKids())
	}
}

// TestRetainedIndexPrunes: clearing topics removes their nodes, and a
// node whose many children are mostly gone gets a smaller map.
func TestRetainedIndexPrunes(t *testing.T) {
	x := &retainedIndex{}
	x.set("a/b/c/d", makeRef(10, 0, 0))
	x.set("a/b", makeRef(10, 0, 0))
	x.del("a/b/c/d")
	if b := x.root.kid("a").kid("b"); b == nil || b.numKids() != 0 || !b.ref.set() {
		t.Fatalf("a/b after clearing a/b/c/d: %+v", b)
	}
	x.del("a/b")
	if x.root.numKids() != 0 {
		t.Fatal("a left after clearing every topic")
	}
	// A chain that ends in one message is one node; a branch splits it
	// and its clearing merges it back.
	x.set("x/1/s", makeRef(10, 0, 0))
	if c := x.root.kid("x"); c == nil || c.text != "x/1/s" || c.numKids() != 0 {
		t.Fatalf("x/1/s alone: %+v", c)
	}
	x.set("x/2/s", makeRef(10, 0, 0))
	if c := x.root.kid("x"); c.text != "x" || c.numKids() != 2 || c.ref.set() {
		t.Fatalf("x/1/s and x/2/s: %+v", c)
	}
	x.del("x/2/s")
	if c := x.root.kid("x"); c.text != "x/1/s" || c.numKids() != 0 || !c.ref.set() {
		t.Fatalf("x/2/s cleared: %+v", c)
	}
	x.del("x/1/s")
	if x.root.numKids() != 0 || x.n != 0 {
		t.Fatal("x left after clearing every topic")
	}
	for i := range 1000 {
		x.set(fmt.Sprintf("dev/%d", i), makeRef(10, 0, 0))
	}
	dev := x.root.kid("dev")
	if dev.kids.m == nil || dev.kids.peak != 1000 {
		t.Fatalf("1000 children: %+v", dev.kids)
	}
	for i := range 990 {
		x.del(fmt.Sprintf("dev/%d", i))
	}
	if dev.kids.m == nil || dev.kids.peak > 250 || len(dev.kids.m) != 10 {
		t.Fatalf("10 of 1000 children left: map rebuilt? %+v", dev.kids)
	}
	for i := 990; i < 998; i++ {
		x.del(fmt.Sprintf("dev/%d", i))
	}
	if dev.kids.m != nil || len(dev.kids.list) != 2 {
		t.Fatalf("2 children left: map %v, %d in the slice", dev.kids.m != nil, len(dev.kids.list))
	}
}

// retainedRecord is the stored record of a retained message with a
// payload of size bytes.
func retainedRecord(tb testing.TB, topic string, size int) []byte {
	b, err := json.Marshal(&retainedMsg{Topic: topic, Payload: make([]byte, size), QoS: 1,
		Props: packets.Properties{ContentType: "text/plain"}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestRetainedIndexMemory: the index holds no bodies (its memory per
// retained message is the same for 64-byte and 4 KiB payloads, and
// small), and clearing every topic gives it back.
func TestRetainedIndexMemory(t *testing.T) {
	const n = 50_000
	perMsg := func(size int) float64 {
		topics := make([]string, n)
		for i := range topics {
			topics[i] = fmt.Sprintf("dev/%d/%d/t", i/100, i%100)
		}
		st := &memStore{m: map[string][]byte{}}
		for _, tp := range topics {
			st.m[retainedKey("/", tp)] = retainedRecord(t, tp, size)
		}
		before := heapInUse()
		r, err := loadRetained(st)
		if err != nil {
			t.Fatal(err)
		}
		after := heapInUse()
		if r.count() != n {
			t.Fatalf("%d loaded", r.count())
		}
		for _, tp := range topics {
			r.apply(retainedKey("/", tp), nil)
		}
		cleared := heapInUse()
		if r.count() != 0 || len(r.m) != 0 {
			t.Fatalf("after clearing: %d messages, %d vhosts", r.count(), len(r.m))
		}
		if cleared > before+64<<10 {
			t.Errorf("clearing every topic keeps %d bytes", cleared-before)
		}
		runtime.KeepAlive(r)
		runtime.KeepAlive(st) // the store's copy is not the index's
		return float64(after-before) / n
	}
	small, large := perMsg(64), perMsg(4096)
	t.Logf("index memory per retained message: %.0f B (64-byte payloads), %.0f B (4 KiB payloads)", small, large)
	// 1,000,000 retained messages within the queues' default memory
	// budget (128 MiB).
	if small > 128 || large > 128 {
		t.Fatalf("index memory per retained message: %.0f B and %.0f B, want at most 128 B whatever the payload", small, large)
	}
}
