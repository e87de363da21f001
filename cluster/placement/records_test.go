package placement

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/exchange"
)

func TestOpsKey(t *testing.T) {
	for key, want := range map[string]bool{
		"cluster/forget/trident@b": true,
		"cluster/rebalance":        true,
		"cluster/name":             true,
		"cluster/other":            false,
		"queue/v/q":                false,
		"cluster/rebalance/x":      false,
	} {
		if got := OpsKey(key); got != want {
			t.Errorf("OpsKey(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestForgetRecord(t *testing.T) {
	members := []discovery.Member{
		{Name: "a", Status: discovery.StatusAlive},
		{Name: "b", Status: discovery.StatusDead},
		{Name: "c", Status: discovery.StatusLeft},
		{Name: "d", Status: discovery.StatusAlive},
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		node string
		err  error
	}{
		{"a", ErrForgetSelf},
		{"b", nil},
		{"c", nil},
		{"d", ErrForgetRunning},
		{"e", ErrForgetUnknown},
	} {
		key, val, err := ForgetRecord("a", members, tc.node, now)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("forget %s: err %v, want %v", tc.node, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if key != ForgetPrefix+tc.node || string(val) != "2026-01-02T03:04:05Z" {
			t.Errorf("forget %s: record %q = %q", tc.node, key, val)
		}
	}
}

// fakeForgetting records what the applier asked of membership; alive
// names the members whose Forget fails (still alive here).
type fakeForgetting struct {
	alive    map[string]bool
	forgot   []string
	whenDown []string
	kicks    int
}

func (f *fakeForgetting) Forget(node string) error {
	if f.alive[node] {
		return errors.New("alive")
	}
	f.forgot = append(f.forgot, node)
	return nil
}

func (f *fakeForgetting) ForgetWhenDown(node string) bool {
	f.whenDown = append(f.whenDown, node)
	return true
}

func TestOpsApplierForget(t *testing.T) {
	f := &fakeForgetting{alive: map[string]bool{"up": true}}
	a := &OpsApplier{Members: f, Kick: func() { f.kicks++ }}
	err := a.ApplyMeta([]exchange.MetaOp{
		{Key: ForgetPrefix + "gone", Val: []byte("t")},
		{Key: ForgetPrefix + "up", Val: []byte("t")},
		{Key: ForgetPrefix + "deleted"},           // a delete: nothing to do
		{Key: ForgetPrefix, Prefix: true},         // a prefix delete: nothing
		{Key: "queue/v/q", Val: []byte("record")}, // not ours
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.forgot, []string{"gone"}) || !slices.Equal(f.whenDown, []string{"up"}) || f.kicks != 1 {
		t.Fatalf("forgot %v, when down %v, kicks %d", f.forgot, f.whenDown, f.kicks)
	}
}

func TestOpsApplierRebalance(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	moves := []Move{{VHost: "/", Name: "q", From: "a", To: "b"}}
	got := make(chan []Move, 2)
	a := &OpsApplier{Members: &fakeForgetting{}, Rebalance: func(m []Move) { got <- m },
		Now: func() time.Time { return now }}

	_, fresh, err := RebalanceRecord(moves, now.Add(-RebalanceFresh/2))
	if err != nil {
		t.Fatal(err)
	}
	old := []Move{{VHost: "/", Name: "old", From: "a", To: "c"}}
	key, stale, err := RebalanceRecord(old, now.Add(-RebalanceFresh-time.Second))
	if err != nil || key != RebalanceKey {
		t.Fatal(key, err)
	}
	// A stale plan (replayed from the log long after) is ignored.
	if err := a.ApplyMeta([]exchange.MetaOp{{Key: RebalanceKey, Val: stale}}); err != nil {
		t.Fatal(err)
	}
	if err := a.ApplyMeta([]exchange.MetaOp{{Key: RebalanceKey, Val: fresh}}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if !slices.Equal(m, moves) {
			t.Fatalf("moves %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fresh plan was not applied")
	}
	select {
	case m := <-got:
		t.Fatalf("a second plan applied: %v", m)
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.ApplyMeta([]exchange.MetaOp{{Key: RebalanceKey, Val: []byte("{")}}); err == nil {
		t.Fatal("an unreadable plan applied without an error")
	}
}
