package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// fakeMembers is discovery's view shared by the test nodes: which nodes
// are alive and which flags each gossips.
type fakeMembers struct {
	mu    sync.Mutex
	nodes []*testNode
	old   map[string]bool // gossips no flags (a v0.1.0 node)
}

func (f *fakeMembers) list() []discovery.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []discovery.Member
	for _, n := range f.nodes {
		meta := map[string]string{RaftMetaKey: n.addr}
		if !f.old[n.id] {
			meta[featureflags.GossipKey] = featureflags.EncodeSupport(featureflags.Supported())
		}
		out = append(out, discovery.Member{Name: n.id, Status: discovery.StatusAlive, Meta: meta})
	}
	return out
}

func (f *fakeMembers) setOld(id string, old bool) {
	f.mu.Lock()
	f.old[id] = old
	f.mu.Unlock()
}

func flagState(g *Group, name string) featureflags.Status {
	for _, s := range g.FeatureFlags() {
		if s.Name == name {
			return s
		}
	}
	return featureflags.Status{}
}

// TestFeatureFlagEnable: while a member gossips no support (a v0.1.0
// node), feature_flags is unavailable and enabling it is refused, naming
// that member; once it supports it, enabling on a follower commits on
// every member, the record survives a restart, and the leader does not
// add a new node that lacks the enabled flag (but adds it once it has).
func TestFeatureFlagEnable(t *testing.T) {
	fm := &fakeMembers{old: map[string]bool{"n2": true}}
	nodes := make([]*testNode, 3)
	for i := range nodes {
		nodes[i] = &testNode{id: fmt.Sprintf("n%d", i), dir: t.TempDir(), local: store.NewMemory(), members: func() []discovery.Member { return nil }}
		nodes[i].start(t)
	}
	fm.nodes = nodes
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	for _, n := range nodes {
		n.members = fm.list
		// The records of a topology command, as the core's RecordsOf.
		n.records = func(c exchange.TopologyCommand) ([]exchange.MetaOp, error) {
			return []exchange.MetaOp{{Key: "vhost/" + c.Name, Val: []byte("declared"), Create: true}}, nil
		}
	}
	// Restart so Config.Members is the fake (start read it).
	for _, n := range nodes {
		n.stop(t)
		n.start(t)
	}
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, n.server())
	}
	for _, n := range nodes {
		if err := n.g.Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
	}
	leader := leaderOf(t, nodes)
	f := others(nodes, leader)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	st := flagState(f.g, featureflags.FeatureFlags)
	if st.State != featureflags.StateUnavailable || len(st.Missing) != 1 {
		t.Fatalf("with n2 old: %+v, want unavailable, missing n2", st)
	}
	err := f.g.EnableFeatureFlag(ctx, featureflags.FeatureFlags)
	var ue *featureflags.UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, featureflags.ErrUnsupported) || len(ue.Members) != 1 || ue.Members[0][:2] != "n2" {
		t.Fatalf("enable with an old member: %v, want refused naming n2", err)
	}
	if err := f.g.EnableFeatureFlag(ctx, "no_such_flag"); !errors.Is(err, featureflags.ErrUnknown) {
		t.Fatalf("unknown flag: %v", err)
	}
	if err := f.g.gate(Command{Kind: KindEnableFlag, Flag: "other"}); !errors.Is(err, featureflags.ErrDisabled) {
		t.Fatalf("a typed command before feature_flags is enabled: %v, want ErrDisabled", err)
	}

	fm.setOld("n2", false) // n2 upgraded
	if st := flagState(f.g, featureflags.FeatureFlags); st.State != featureflags.StateDisabled {
		t.Fatalf("all support it: %+v, want disabled", st)
	}
	if err := f.g.EnableFeatureFlag(ctx, featureflags.FeatureFlags); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		waitFor(t, n.id+" has feature_flags enabled", func() bool { return n.g.Flags().Enabled(featureflags.FeatureFlags) })
		if v, ok := n.get(featureflags.RecordKey(featureflags.FeatureFlags)); !ok || v != featureflags.StateEnabled {
			t.Fatalf("%s: flag record %q %v", n.id, v, ok)
		}
	}
	if st := flagState(f.g, featureflags.FeatureFlags); st.State != featureflags.StateEnabled {
		t.Fatalf("after enable: %+v", st)
	}
	if err := f.g.gate(Command{Kind: KindEnableFlag, Flag: "other"}); err != nil {
		t.Fatal(err)
	}
	// topology_commands is not enabled: no topology command is written
	// (the gate refuses one); a topology change is proposed as the
	// records it makes (Config.TopologyRecords), a version 1 entry that
	// every member applies (these appliers take no topology command: one
	// would halt them).
	if f.g.TopologyCommands() {
		t.Fatal("topology commands on before their flag is enabled")
	}
	if err := f.g.gate(Command{Kind: KindTopology}); !errors.Is(err, featureflags.ErrDisabled) {
		t.Fatalf("a topology command before topology_commands is enabled: %v, want ErrDisabled", err)
	}
	if err := f.g.ProposeTopology(exchange.TopologyCommand{Op: exchange.TopoDeclareQueue, VHost: "/", Name: "q"}); err != nil {
		t.Fatalf("a topology change before topology_commands is enabled: %v", err)
	}
	for _, n := range nodes {
		waitFor(t, n.id+" applied the records", func() bool { v, ok := n.get("vhost/q"); return ok && v == "declared" })
		if err := n.g.Halted(); err != nil {
			t.Fatalf("%s halted: %v", n.id, err)
		}
	}
	f.stop(t)
	f.start(t)
	if !f.g.Flags().Enabled(featureflags.FeatureFlags) {
		t.Fatal("the enabled flag did not survive a restart")
	}

	// A new node of an older release is not added; upgraded, it is.
	n3 := &testNode{id: "n3", dir: t.TempDir(), local: store.NewMemory()}
	n3.start(t)
	defer n3.stop(t)
	fm.mu.Lock()
	fm.nodes = append(fm.nodes, n3)
	fm.old["n3"] = true
	fm.mu.Unlock()
	leader = leaderOf(t, nodes)
	if got := leader.g.Reconcile(fm.list()); got != 0 {
		t.Fatalf("reconcile added %d members, want the old node refused", got)
	}
	if _, in := leader.g.servers()["n3"]; in {
		t.Fatal("an old node became a member with feature_flags enabled")
	}
	fm.setOld("n3", false)
	if got := leader.g.Reconcile(fm.list()); got != 1 {
		t.Fatalf("reconcile added %d members, want the upgraded node", got)
	}
	waitFor(t, "n3 has feature_flags", func() bool { return n3.g.Flags().Enabled(featureflags.FeatureFlags) })
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestFSM is a lone FSM over a local store.
func newTestFSM(t *testing.T, local *store.Memory) (*fsm, error) {
	t.Helper()
	a := &StoreApplier{Local: local, Replicated: replicated}
	return newFSM(a, local, featureflags.NewSet(), nil)
}

// TestFSMHaltsOnNewerFormat: an entry of a version or kind this node does
// not know, or the enabling of a flag it does not know, stops the FSM:
// neither it nor any later entry is applied, and the applied index stays
// before it (the upgraded node applies them from there). A snapshot or a
// local store with an unknown flag is refused.
func TestFSMHaltsOnNewerFormat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry []byte
	}{
		{"version 3", []byte{3, 0}},
		{"unknown kind", EncodeCommand(Command{Kind: 99})},
		{"unknown flag", EncodeCommand(Command{Kind: KindEnableFlag, Flag: "from_the_future"})},
		{"topology command of a newer version", []byte{commandVersion, byte(KindTopology), 9, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := store.NewMemory()
			f, err := newTestFSM(t, local)
			if err != nil {
				t.Fatal(err)
			}
			f.log = discardLog()
			if err := f.Apply(&raft.Log{Index: 1, Data: put2("vhost/a")}); err != nil {
				t.Fatal(err)
			}
			if err, _ := f.Apply(&raft.Log{Index: 2, Data: tc.entry}).(error); !errors.Is(err, ErrUnreadable) {
				t.Fatalf("apply: %v, want ErrUnreadable", err)
			}
			if err, _ := f.Apply(&raft.Log{Index: 3, Data: put2("vhost/b")}).(error); !errors.Is(err, ErrUnreadable) {
				t.Fatalf("entry after the unreadable one: %v", err)
			}
			if f.Applied() != 1 {
				t.Fatalf("applied = %d, want 1", f.Applied())
			}
			if _, ok := get(local, "vhost/b"); ok {
				t.Fatal("an entry after the unreadable one was applied")
			}
		})
	}

	local := store.NewMemory()
	if err := local.PutMeta(featureflags.RecordKey("from_the_future"), []byte("enabled")); err != nil {
		t.Fatal(err)
	}
	if _, err := newTestFSM(t, local); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("start with an unknown flag in the local store: %v", err)
	}
	_ = local.DeleteMeta(featureflags.RecordKey("from_the_future"))
	if err := local.PutMeta(featureflags.RecordKey(featureflags.FeatureFlags), []byte("enabled")); err != nil {
		t.Fatal(err)
	}
	f, err := newTestFSM(t, local)
	if err != nil {
		t.Fatal(err)
	}
	if !f.flags.Enabled(featureflags.FeatureFlags) {
		t.Fatal("the local store's enabled flag was not loaded")
	}
	f.log = discardLog()
	snap := appendRecord(appendSnapshotHeader(nil, 7), featureflags.RecordKey("from_the_future"), []byte("enabled"))
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("restore of a snapshot with an unknown flag: %v", err)
	}
}

func put2(key string) []byte { return EncodeOps([]exchange.MetaOp{{Key: key, Val: []byte("1")}}) }

func get(local *store.Memory, key string) (string, bool) {
	var v string
	found := false
	_ = local.LoadMeta(key, func(k string, val []byte) error {
		if k == key {
			v, found = string(val), true
		}
		return nil
	})
	return v, found
}

// TestCommandCodec: a typed command round-trips; a version 1 entry still
// decodes as ops.
func TestCommandCodec(t *testing.T) {
	c := Command{Kind: KindEnableFlag, Flag: featureflags.FeatureFlags}
	ops, got, err := DecodeEntry(EncodeCommand(c))
	if err != nil || ops != nil || got == nil || !reflect.DeepEqual(*got, c) {
		t.Fatalf("round trip: %v %v %v", ops, got, err)
	}
	ops, got, err = DecodeEntry(put2("vhost/x"))
	if err != nil || got != nil || !slices.EqualFunc(ops, []exchange.MetaOp{{Key: "vhost/x", Val: []byte("1")}},
		func(a, b exchange.MetaOp) bool { return a.Key == b.Key && string(a.Val) == string(b.Val) }) {
		t.Fatalf("v1: %v %v %v", ops, got, err)
	}
	for _, bad := range [][]byte{{2}, {2, 1}, {2, 1, 0}, append(EncodeCommand(c), 0)} {
		if _, _, err := DecodeEntry(bad); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%x: %v, want ErrBadEntry", bad, err)
		}
	}
	if _, ok := commandFlag[KindEnableFlag]; !ok {
		t.Fatal("every kind has a flag")
	}
}

// TestFeatureFlagsOnBootstrap: a new cluster whose members all support
// the stable flags starts with them enabled (as RabbitMQ); one with a
// member of an older release leaves them disabled.
func TestFeatureFlagsOnBootstrap(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  map[string]bool
		want bool
	}{
		{"all new", map[string]bool{}, true},
		{"one old", map[string]bool{"n1": true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fm := &fakeMembers{old: tc.old}
			nodes := make([]*testNode, 3)
			for i := range nodes {
				nodes[i] = &testNode{id: fmt.Sprintf("n%d", i), dir: t.TempDir(), local: store.NewMemory(), members: fm.list,
					enableFlags: !tc.old[fmt.Sprintf("n%d", i)]} // an old node has no such code
			}
			fm.nodes = nodes
			for _, n := range nodes {
				n.start(t)
			}
			defer func() {
				for _, n := range nodes {
					n.stop(t)
				}
			}()
			var servers []raft.Server
			for _, n := range nodes {
				servers = append(servers, n.server())
			}
			for _, n := range nodes {
				if err := n.g.Bootstrap(servers); err != nil {
					t.Fatal(err)
				}
			}
			leader := leaderOf(t, nodes)
			if tc.want {
				for _, n := range nodes {
					waitFor(t, n.id+": feature_flags enabled", func() bool { return n.g.Flags().Enabled(featureflags.FeatureFlags) })
				}
				return
			}
			// The bootstrap's attempt is over once a later entry is
			// applied everywhere after it (Propose waits for the peers).
			propose(t, leader, put("vhost/after", "1"))
			time.Sleep(time.Second)
			for _, n := range nodes {
				if n.g.Flags().Enabled(featureflags.FeatureFlags) {
					t.Fatalf("%s: feature_flags enabled with an old member", n.id)
				}
			}
		})
	}
}
