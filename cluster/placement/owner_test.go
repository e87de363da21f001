package placement

import (
	"fmt"
	"testing"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/meta"
)

func member(name string, st discovery.Status, raft bool) discovery.Member {
	m := discovery.Member{Name: name, Status: st, Meta: map[string]string{}}
	if raft {
		m.Meta[meta.RaftMetaKey] = name + ":25673"
	}
	return m
}

// TestOwner: every node computes the same owner whatever the order of the
// members; only alive members with Raft up own; the singletons spread; a
// node's going moves only the singletons it owned.
func TestOwner(t *testing.T) {
	alive := []discovery.Member{
		member("a", discovery.StatusAlive, true),
		member("b", discovery.StatusAlive, true),
		member("c", discovery.StatusAlive, true),
	}
	reversed := []discovery.Member{alive[2], alive[1], alive[0]}
	owned := map[string]int{}
	before := map[string]string{}
	for i := range 300 {
		key := fmt.Sprintf("shovel/%d", i)
		o := Owner(alive, key, true)
		if o == "" || o != Owner(reversed, key, true) {
			t.Fatalf("%s: owner %q, reversed %q", key, o, Owner(reversed, key, true))
		}
		owned[o]++
		before[key] = o
	}
	for _, m := range alive {
		if owned[m.Name] < 80 { // a third is 100
			t.Fatalf("owners %v: not spread over the nodes", owned)
		}
	}
	// c is gone (suspect, then left), a is alive without Raft yet: b alone.
	gone := []discovery.Member{member("a", discovery.StatusAlive, false), alive[1], member("c", discovery.StatusSuspect, true)}
	for key := range before {
		if o := Owner(gone, key, true); o != "b" {
			t.Fatalf("%s: owner %q without a and c, want b", key, o)
		}
	}
	// Only c's singletons move when c goes.
	ab := alive[:2]
	for key, o := range before {
		if n := Owner(ab, key, true); o != "c" && n != o {
			t.Fatalf("%s moved from %s to %s when c went", key, o, n)
		}
	}
	if o := Owner(nil, "x", true); o != "" {
		t.Fatalf("no members: owner %q", o)
	}
}

// TestOwnerUnmixed: without the flag the score is v0.1.0's, so that a
// cluster with a node of v0.1.0 agrees on every owner (keys and owners
// computed by v0.1.0's code).
func TestOwnerUnmixed(t *testing.T) {
	ms := []discovery.Member{
		member("a", discovery.StatusAlive, true),
		member("b", discovery.StatusAlive, true),
		member("c", discovery.StatusAlive, true),
	}
	owned := map[string]int{}
	for i := range 3000 {
		owned[Owner(ms, fmt.Sprintf("shovel/%%2F/s%d", i), false)]++
	}
	if want := map[string]int{"a": 110, "b": 1230, "c": 1660}; fmt.Sprint(owned) != fmt.Sprint(want) {
		t.Fatalf("unmixed owners %v, v0.1.0 gave %v", owned, want)
	}
}

// TestOwnerFunc: a node runs a key when it is Owner's choice, scored as
// the feature flag says; nobody runs anything before the members are known.
func TestOwnerFunc(t *testing.T) {
	ms := []discovery.Member{
		member("a", discovery.StatusAlive, true),
		member("b", discovery.StatusAlive, true),
		member("c", discovery.StatusAlive, true),
	}
	var members []discovery.Member // nil until the cluster is up
	mixed := false
	fn := func(self string) func(string) (bool, string) {
		return OwnerFunc(self, func() []discovery.Member { return members }, func() bool { return mixed })
	}
	if self, node := fn("a")("k"); self || node != "" {
		t.Fatalf("before the members are known: %v %q", self, node)
	}
	if self, node := OwnerFunc("a", nil, nil)("k"); self || node != "" {
		t.Fatalf("without members: %v %q", self, node)
	}
	members = ms
	for _, m := range []bool{false, true} {
		mixed = m
		for i := range 50 {
			key := fmt.Sprintf("/shovel/s%d", i)
			want := Owner(ms, key, m)
			runs := 0
			for _, self := range []string{"a", "b", "c"} {
				isSelf, node := fn(self)(key)
				if node != want {
					t.Fatalf("mixed %v, %s on %s: owner %q, want %q", m, key, self, node, want)
				}
				if isSelf {
					runs++
				}
			}
			if runs != 1 {
				t.Fatalf("mixed %v, %s runs on %d nodes", m, key, runs)
			}
		}
	}
	// The flag decides the score: some key moves between the two.
	moved := false
	for i := range 50 {
		key := fmt.Sprintf("/shovel/s%d", i)
		moved = moved || Owner(ms, key, false) != Owner(ms, key, true)
	}
	if !moved {
		t.Fatal("the mixed score chose as FNV-1a alone for every key")
	}
}
