package connreg

import "testing"

type fake struct {
	name string
	open bool
}

func info(f *fake) (string, bool) { return f.name, f.open }

func TestSortedAndNamed(t *testing.T) {
	a, b, c := &fake{"b", true}, &fake{"a", true}, &fake{"c", false}
	set := map[*fake]struct{}{a: {}, b: {}, c: {}}
	conns := Snapshot(set)
	if len(conns) != 3 {
		t.Fatalf("snapshot of %d", len(conns))
	}
	got := Sorted(conns, info, func(s string) string { return s })
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("Sorted = %v, want [a b] (c is still in its handshake)", got)
	}
	name := func(f *fake) string { return f.name }
	if f, ok := Named(conns, name, "c"); !ok || f != c {
		t.Fatalf("Named(c) = %v %v", f, ok)
	}
	if _, ok := Named(conns, name, "zz"); ok {
		t.Fatal("Named found a missing connection")
	}
}
