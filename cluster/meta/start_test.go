package meta

import (
	"slices"
	"strings"
	"testing"
)

func TestChooseStart(t *testing.T) {
	for _, tc := range []struct {
		state           bool
		expect          int
		seeds, discover bool
		want            StartMode
	}{
		{true, 3, true, true, StartRestart},
		{true, 0, false, false, StartRestart},
		{false, 3, false, false, StartExpect},
		{false, 3, true, true, StartExpect},
		{false, 0, false, false, StartAlone},
		{false, 0, true, false, StartWaitAdded},
		{false, 0, false, true, StartWaitAdded},
	} {
		if got := ChooseStart(tc.state, tc.expect, tc.seeds, tc.discover); got != tc.want {
			t.Errorf("ChooseStart(state %v, expect %d, seeds %v, discovery %v) = %v, want %v",
				tc.state, tc.expect, tc.seeds, tc.discover, got, tc.want)
		}
	}
}

// TestRestoreRank: a restore puts a vhost first, then users and their
// permissions, then exchanges and queues, then the bindings between them,
// then everything else.
func TestRestoreRank(t *testing.T) {
	keys := []string{"binding/v/b", "cluster/name", "queue/v/q", "tperm/u/v", "exchange/v/x", "perm/u/v", "user/u", "vhost/v"}
	slices.SortStableFunc(keys, func(a, b string) int { return RestoreRank(a) - RestoreRank(b) })
	want := "vhost/v user/u perm/u/v tperm/u/v exchange/v/x queue/v/q binding/v/b cluster/name"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}
