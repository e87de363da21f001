package hashring

import (
	"fmt"
	"testing"
)

// ring builds a ring of the named destinations (weights w) in the order
// given, one binding each.
func ring(names []string, w map[string]uint64) Ring[string, string] {
	r := New[string, string]()
	for _, n := range names {
		d, created := r.Take(n, func() Dest[string, string] { return NewDest(n, n, true, n) })
		if !created {
			panic("taken twice")
		}
		d.N++
		d.Weight += w[n]
	}
	r.Reweigh()
	return r
}

// A key's destination is a function of the set of (destination, weight)
// pairs alone: the order they were added in, a clone and a destination
// removed and added again change nothing; removing one moves only its
// keys.
func TestRingPickOrderIndependent(t *testing.T) {
	w := map[string]uint64{"a": 1, "b": 2, "c": 1, "d": 5}
	r1 := ring([]string{"a", "b", "c", "d"}, w)
	r2 := ring([]string{"d", "c", "b", "a"}, w)
	c := r1.Clone()
	for k := range 2000 {
		kh := Key(fmt.Sprint(k))
		if p1, p2, p3 := r1.Pick(kh), r2.Pick(kh), c.Pick(kh); p1.Val != p2.Val || p1.Val != p3.Val {
			t.Fatalf("key %d: %s, %s, clone %s", k, p1.Val, p2.Val, p3.Val)
		}
	}
	before := map[int]string{}
	for k := range 2000 {
		before[k] = r1.Pick(Key(fmt.Sprint(k))).Val
	}
	if d, ok := r1.Release("b"); !ok || d != nil {
		t.Fatalf("release of b's only binding: %v %v", d, ok)
	}
	r1.Reweigh()
	for k := range 2000 {
		got := r1.Pick(Key(fmt.Sprint(k))).Val
		if before[k] != "b" && got != before[k] {
			t.Fatalf("key %d moved from %s to %s though b was removed", k, before[k], got)
		}
		if got == "b" {
			t.Fatalf("key %d still on the removed b", k)
		}
	}
	// The swapped-in last destination is found by its key again.
	if d, ok := r1.Release("d"); !ok || d != nil {
		t.Fatalf("release of d after the swap: %v %v", d, ok)
	}
}

// Modulus takes the hash modulo the destinations in name order,
// exchanges first.
func TestRingModulus(t *testing.T) {
	r := New[string, string]()
	for _, n := range []string{"q2", "x1", "q1"} {
		d, _ := r.Take(n, func() Dest[string, string] { return NewDest(n, n, n[0] == 'q', n) })
		d.N++
	}
	r.SortByName()
	order := []string{"x1", "q1", "q2"}
	for k := range 100 {
		kh := Key(fmt.Sprint(k))
		if got := r.Modulus(kh).Val; got != order[kh%3] {
			t.Fatalf("key %d: %s, want %s", k, got, order[kh%3])
		}
	}
	if e := New[string, string](); e.Modulus(1) != nil {
		t.Fatal("an empty ring routes")
	}
}
