package meta

import (
	"errors"
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// TestReplicator: before Attach the records go to the local store (a
// batch of several in one store batch); attached, each call is one
// proposal holding its records (nil value: a delete; a prefix delete),
// which the applier writes on commit; after Detach it fails.
func TestReplicator(t *testing.T) {
	local := store.NewMemory()
	var hooked [][]exchange.MetaOp
	a := &StoreApplier{Local: local, Replicated: replicated, Hooks: []func([]exchange.MetaOp) error{
		func(ops []exchange.MetaOp) error { hooked = append(hooked, ops); return nil }}}
	r := NewReplicator(local)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Before Attach: local.
	must(r.ReplicateMeta([]string{"vhost/a", "user/x"}, [][]byte{[]byte("1"), []byte("x")}))
	if got := load(t, local); got["vhost/a"] != "1" || got["user/x"] != "x" {
		t.Fatalf("before Attach: local = %v", got)
	}
	g := &fakeGroup{a: a}
	r.attach(g)
	must(r.ReplicateMeta([]string{"vhost/b", "user/u"}, [][]byte{[]byte("2"), []byte("u")}))
	must(r.ReplicateMeta([]string{"vhost/a"}, [][]byte{nil}))
	must(r.ReplicateDeletePrefix("user/"))
	if len(g.got) != 3 || len(g.got[0]) != 2 || g.got[0][1].Key != "user/u" || g.got[1][0].Val != nil ||
		g.got[2][0].Key != "user/" || !g.got[2][0].Prefix {
		t.Fatalf("proposed %+v", g.got)
	}
	if len(hooked) != 3 {
		t.Fatalf("hooks saw %d batches", len(hooked))
	}
	if got := load(t, local); len(got) != 1 || got["vhost/b"] != "2" {
		t.Fatalf("local = %v", got)
	}
	if err := r.ReplicateMeta([]string{"k"}, nil); err == nil {
		t.Fatal("keys without values accepted")
	}
	g.err = ErrNotCommitted
	if err := r.ReplicateMeta([]string{"vhost/c"}, [][]byte{[]byte("3")}); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("no quorum: %v", err)
	}
	r.Detach()
	if err := r.ReplicateMeta([]string{"vhost/c"}, [][]byte{[]byte("3")}); !errors.Is(err, ErrDetached) {
		t.Fatalf("detached: %v", err)
	}
	if err := r.ReplicateDeletePrefix("vhost/"); !errors.Is(err, ErrDetached) {
		t.Fatalf("detached prefix delete: %v", err)
	}
}
