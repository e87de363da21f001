package meta

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// fakeGroup commits every proposal by applying it to an Applier.
type fakeGroup struct {
	mu  sync.Mutex
	a   Applier
	err error
	got [][]exchange.MetaOp
}

func (f *fakeGroup) Propose(_ context.Context, ops []exchange.MetaOp) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, ops)
	if f.err != nil {
		return f.err
	}
	return f.a.ApplyMeta(ops)
}

func replicated(k string) bool {
	return strings.HasPrefix(k, "vhost/") || strings.HasPrefix(k, "user/") || featureflags.ReplicatedKey(k)
}

func load(t *testing.T, st exchange.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := st.LoadMeta("", func(k string, v []byte) error { out[k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStoreApplierRestore(t *testing.T) {
	local := store.NewMemory()
	for k, v := range map[string]string{"vhost/a": "1", "vhost/b": "2", "user/u": "old", "clean-shutdown": "x"} {
		if err := local.PutMeta(k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	var hooked []exchange.MetaOp
	a := &StoreApplier{Local: local, Replicated: replicated,
		Rank: func(k string) int {
			if strings.HasPrefix(k, "vhost/") {
				return 0
			}
			return 1
		},
		Hooks: []func([]exchange.MetaOp) error{func(ops []exchange.MetaOp) error { hooked = ops; return nil }}}
	var exported []string
	if err := a.ExportMeta(func(k string, _ []byte) error { exported = append(exported, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(exported, ",") != "user/u,vhost/a,vhost/b" {
		t.Fatalf("exported %v", exported)
	}
	if err := a.RestoreMeta(map[string][]byte{"vhost/a": []byte("1"), "vhost/c": []byte("3"), "user/u": []byte("new"), "user/v": []byte("v")}); err != nil {
		t.Fatal(err)
	}
	got := load(t, local)
	if len(got) != 5 || got["vhost/b"] != "" || got["user/u"] != "new" || got["vhost/c"] != "3" || got["clean-shutdown"] != "x" {
		t.Fatalf("after restore: %v", got)
	}
	var order []string
	for _, op := range hooked {
		order = append(order, op.Key)
	}
	if strings.Join(order, ",") != "vhost/b,vhost/c,user/u,user/v" {
		t.Fatalf("restore ops %v", order)
	}
}

// TestStoreCreate: of two creates of one key (two declarations' records,
// exchange.Broker.RecordsOf), the first applied wins on every node: the
// second writes nothing and reaches no hook; a create of the record
// already there (a replayed entry) is applied again; a batch whose create
// loses still applies its other ops.
func TestStoreCreate(t *testing.T) {
	local := store.NewMemory()
	var hooked []string
	a := &StoreApplier{Local: local, Replicated: replicated, Hooks: []func([]exchange.MetaOp) error{
		func(ops []exchange.MetaOp) error {
			for _, op := range ops {
				hooked = append(hooked, op.Key+"="+string(op.Val))
			}
			return nil
		}}}
	g := &fakeGroup{a: a}
	create := func(val string) {
		t.Helper()
		if err := g.Propose(context.Background(), []exchange.MetaOp{{Key: "vhost/q", Val: []byte(val), Create: true}}); err != nil {
			t.Fatal(err)
		}
	}
	create("first")
	create("second")
	if got := load(t, local)["vhost/q"]; got != "first" {
		t.Fatalf("record = %q", got)
	}
	if err := a.ApplyMeta([]exchange.MetaOp{{Key: "vhost/q", Val: []byte("third"), Create: true}, {Key: "vhost/r", Val: []byte("r")}}); err != nil {
		t.Fatal(err)
	}
	create("first")
	if strings.Join(hooked, ",") != "vhost/q=first,vhost/r=r,vhost/q=first" {
		t.Fatalf("hooks saw %v", hooked)
	}
	// Deleted, the key is free again.
	if err := a.ApplyMeta([]exchange.MetaOp{{Key: "vhost/q"}}); err != nil {
		t.Fatal(err)
	}
	create("second")
	if got := load(t, local)["vhost/q"]; got != "second" {
		t.Fatalf("record after delete and create = %q", got)
	}
}

// TestStoreStamped: a put of an ordered key that orders before the
// stored record (a write proposed earlier that committed later; an older
// epoch, or the same epoch and a lower seq) is left out: not written, no
// hook; an equal one (a replayed entry) and a later one are applied;
// other keys are plain puts.
func TestStoreStamped(t *testing.T) {
	local := store.NewMemory()
	var hooked []string
	num := func(s string) uint64 {
		n := uint64(0)
		for _, c := range s {
			n = n*10 + uint64(c-'0')
		}
		return n
	}
	a := &StoreApplier{Local: local, Replicated: replicated,
		Stamp: func(k string, v []byte) (uint64, uint64, bool) {
			if !strings.HasPrefix(k, "user/s") {
				return 0, 0, false
			}
			f := strings.Split(string(v), ":") // epoch:seq
			return num(f[0]), num(f[1]), true
		},
		Hooks: []func([]exchange.MetaOp) error{func(ops []exchange.MetaOp) error {
			for _, op := range ops {
				hooked = append(hooked, op.Key+"="+string(op.Val))
			}
			return nil
		}}}
	put := func(k, v string) {
		t.Helper()
		if err := a.ApplyMeta([]exchange.MetaOp{{Key: k, Val: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	put("user/s", "5:20")
	put("user/s", "5:10") // the same epoch's older seq, committed later
	put("user/s", "4:90") // an older epoch
	put("user/x", "9")
	put("user/x", "1") // not ordered
	if got := load(t, local); got["user/s"] != "5:20" || got["user/x"] != "1" {
		t.Fatalf("stored %v", got)
	}
	put("user/s", "5:20") // replayed
	put("user/s", "6:0")  // a later epoch, lower seq
	if got := load(t, local); got["user/s"] != "6:0" {
		t.Fatalf("stored %v", got)
	}
	if want := "user/s=5:20,user/x=9,user/x=1,user/s=5:20,user/s=6:0"; strings.Join(hooked, ",") != want {
		t.Fatalf("hooked %v, want %s", hooked, want)
	}
}
