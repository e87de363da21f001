package meta

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/groups"
	"github.com/trident-broker/trident/cluster/mux"
	"github.com/trident-broker/trident/cluster/raftstore"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// testNode is one member of an in-process cluster: a real mux on
// 127.0.0.1, a Raft DB and snapshots in dir, and a local store in memory
// that survives restarts (as the node's Badger store would).
type testNode struct {
	id     string
	dir    string
	cookie string // "" means "c00kie"
	addr   string
	local  *store.Memory
	// members, if set, is the group's Config.Members (featureflags_test.go).
	members func() []discovery.Member
	// enableFlags is Config.EnableFlagsOnBootstrap.
	enableFlags bool
	// records is Config.TopologyRecords.
	records func(exchange.TopologyCommand) ([]exchange.MetaOp, error)
	// users, if set, is the node's user database over local: it applies
	// the group's users commands (StoreApplier.Users; users_test.go).
	users *auth.Users
	mux   *mux.Mux
	db    *raftstore.DB
	host  *groups.Host
	g     *Group

	mu      sync.Mutex
	applied []string // keys the hook saw, in order
}

var testOptions = groups.Options{TrailingLogs: 4, SnapshotThreshold: 1 << 20}

func (n *testNode) start(t *testing.T) {
	t.Helper()
	bind := n.addr
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	var err error
	cookie := n.cookie
	if cookie == "" {
		cookie = "c00kie"
	}
	if n.mux, err = mux.Listen(bind, "", cookie, nil); err != nil {
		t.Fatal(err)
	}
	n.addr = n.mux.Addr()
	if n.db, err = raftstore.Open(filepath.Join(n.dir, "badger"), raftstore.Options{}, nil); err != nil {
		t.Fatal(err)
	}
	n.host = groups.New(groups.Config{DB: n.db, Mux: n.mux, Dir: filepath.Join(n.dir, "snapshots"), NodeID: n.id})
	a := &StoreApplier{Local: n.local, Replicated: replicated, Hooks: []func([]exchange.MetaOp) error{n.hook}}
	if n.users != nil {
		a.Users = usersApply(n.users)
		a.Hooks = append(a.Hooks, func(ops []exchange.MetaOp) error {
			keys := make([]string, len(ops))
			for i, op := range ops {
				keys[i] = op.Key
			}
			n.users.ApplyMeta(keys)
			return nil
		})
	}
	if n.g, err = Start(Config{Host: n.host, Mux: n.mux, Applier: a, Index: n.local, Options: testOptions, Members: n.members,
		EnableFlagsOnBootstrap: n.enableFlags, TopologyRecords: n.records}); err != nil {
		t.Fatal(err)
	}
}

func (n *testNode) hook(ops []exchange.MetaOp) error {
	n.mu.Lock()
	for _, op := range ops {
		n.applied = append(n.applied, op.Key)
	}
	n.mu.Unlock()
	return nil
}

func (n *testNode) hooked() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.applied...)
}

// stop shuts the node down (Raft shut down, mux and DB closed); its
// directory and local store stay for a restart.
func (n *testNode) stop(t *testing.T) {
	t.Helper()
	if n.g == nil {
		return
	}
	if err := n.g.Close(); err != nil {
		t.Error(err)
	}
	n.host.Close()
	n.mux.Close()
	if err := n.db.Close(); err != nil {
		t.Error(err)
	}
	n.g = nil
}

func (n *testNode) server() raft.Server {
	return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.addr)}
}

func (n *testNode) get(key string) (string, bool) {
	var v string
	found := false
	_ = n.local.LoadMeta(key, func(k string, val []byte) error {
		if k == key {
			v, found = string(val), true
		}
		return nil
	})
	return v, found
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitValue(t *testing.T, n *testNode, key, want string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s: %s=%q", n.id, key, want), func() bool {
		v, ok := n.get(key)
		return ok && v == want
	})
}

func leaderOf(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var l *testNode
	waitFor(t, "a leader", func() bool {
		for _, n := range nodes {
			if n.g != nil && n.g.IsLeader() {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

func put(key, val string) []exchange.MetaOp {
	return []exchange.MetaOp{{Key: key, Val: []byte(val)}}
}

func propose(t *testing.T, n *testNode, ops []exchange.MetaOp) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.g.Propose(ctx, ops); err != nil {
		t.Fatalf("%s: propose: %v", n.id, err)
	}
}

func others(nodes []*testNode, x *testNode) []*testNode {
	var out []*testNode
	for _, n := range nodes {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

// TestCluster runs three metadata group members over three real muxes:
// a proposal on a follower is applied everywhere; the leader dies and
// the others go on; it restarts from its directory and catches up,
// skipping what its local store already has; a partitioned node cannot
// commit while the other two can, and catches up (by snapshot) once
// healed; a fourth node is added by reconciliation and removed when it
// leaves.
func TestCluster(t *testing.T) {
	nodes := make([]*testNode, 3)
	for i := range nodes {
		nodes[i] = &testNode{id: fmt.Sprintf("n%d", i), dir: t.TempDir(), local: store.NewMemory()}
		nodes[i].start(t)
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

	// 1. Propose on a follower: applied on all three by the time Propose
	// returns (a declaration is visible on every node, as in RabbitMQ).
	f := others(nodes, leader)[0]
	propose(t, f, put("vhost/one", "1"))
	for _, n := range nodes {
		if v, ok := n.get("vhost/one"); !ok || v != "1" {
			t.Fatalf("%s: not applied when Propose returned (%q %v)", n.id, v, ok)
		}
	}

	// 2. Kill the leader; the two others elect one and commit.
	leader.stop(t)
	rest := others(nodes, leader)
	propose(t, rest[1], put("vhost/two", "2"))
	for _, n := range rest {
		waitValue(t, n, "vhost/two", "2")
	}
	if _, ok := leader.get("vhost/two"); ok {
		t.Fatal("dead node applied")
	}

	// 3. Restart it from its directory: it catches up and does not
	// re-apply what its store has (the hook sees only the new entry).
	before := len(leader.hooked())
	leader.start(t)
	waitValue(t, leader, "vhost/two", "2")
	if got := leader.hooked()[before:]; len(got) != 1 || got[0] != "vhost/two" {
		t.Fatalf("restarted node re-applied %v", got)
	}

	// 4. Partition one node (the current leader, the hardest case).
	x := leaderOf(t, nodes)
	maj := others(nodes, x)
	var addrs []string
	for _, n := range maj {
		addrs = append(addrs, n.addr)
		n.mux.SetBlocked([]string{x.addr})
	}
	x.mux.SetBlocked(addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := x.g.Propose(ctx, put("vhost/lost", "x"))
	cancel()
	if !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("isolated node's propose: %v", err)
	}
	for i := range 10 {
		propose(t, maj[i%2], put(fmt.Sprintf("vhost/p%d", i), "p"))
	}
	// Compact the majority's logs so the isolated node needs a snapshot.
	for _, n := range maj {
		if err := n.g.Raft().Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	propose(t, maj[0], []exchange.MetaOp{{Key: "vhost/one"}, {Key: "user/", Prefix: true}})
	if _, ok := x.get("vhost/p9"); ok {
		t.Fatal("isolated node applied")
	}

	// Heal: it catches up.
	for _, n := range nodes {
		n.mux.SetBlocked(nil)
	}
	waitValue(t, x, "vhost/p9", "p")
	waitFor(t, "vhost/one deleted on the healed node", func() bool { _, ok := x.get("vhost/one"); return !ok })
	for _, n := range nodes {
		waitFor(t, n.id+" in step", func() bool { return n.g.Applied() == maj[0].g.Applied() })
	}
	if _, ok := x.get("vhost/lost"); ok {
		t.Fatal("the isolated node's uncommitted entry was applied")
	}
	if r := x.g.fsm.restores.Load(); r == 0 {
		t.Fatal("the healed node caught up without a snapshot")
	}
	same := func(a, b *testNode) bool {
		ma, mb := load(t, a.local), load(t, b.local)
		delete(ma, AppliedKey)
		delete(mb, AppliedKey)
		return fmt.Sprint(ma) == fmt.Sprint(mb)
	}
	for _, n := range maj {
		if !same(n, x) {
			t.Fatalf("stores differ:\n%v\n%v", load(t, n.local), load(t, x.local))
		}
	}

	// 5. Reconciliation: a fourth node joins, then leaves.
	n4 := &testNode{id: "n3", dir: t.TempDir(), local: store.NewMemory()}
	n4.start(t)
	defer n4.stop(t)
	members := func(status4 discovery.Status) []discovery.Member {
		var ms []discovery.Member
		for _, n := range append(nodes, n4) {
			st := discovery.StatusAlive
			if n == n4 {
				st = status4
			}
			ms = append(ms, discovery.Member{Name: n.id, Status: st, Meta: map[string]string{RaftMetaKey: n.addr}})
		}
		return ms
	}
	l := leaderOf(t, nodes)
	for _, n := range others(nodes, l) {
		if c := n.g.Reconcile(members(discovery.StatusAlive)); c != 0 {
			t.Fatalf("follower reconciled %d", c)
		}
	}
	if c := l.g.Reconcile(members(discovery.StatusAlive)); c != 1 {
		t.Fatalf("leader made %d changes, want 1", c)
	}
	if c := l.g.Reconcile(members(discovery.StatusAlive)); c != 0 {
		t.Fatalf("second reconcile made %d changes", c)
	}
	waitValue(t, n4, "vhost/p9", "p")
	propose(t, n4, put("vhost/four", "4"))
	for _, n := range nodes {
		waitValue(t, n, "vhost/four", "4")
	}
	if c := l.g.Reconcile(members(discovery.StatusDead)); c != 0 {
		t.Fatalf("dead member: %d changes", c)
	}
	if c := l.g.Reconcile(members(discovery.StatusLeft)); c != 1 {
		t.Fatalf("left member: %d changes, want 1", c)
	}
	cf := l.g.Raft().GetConfiguration()
	if err := cf.Error(); err != nil || len(cf.Configuration().Servers) != 3 {
		t.Fatalf("configuration %+v, %v", cf.Configuration(), err)
	}
}

// TestBootstrapExpect: three nodes wait for three members with a Raft
// address, then form one group with the same configuration.
func TestBootstrapExpect(t *testing.T) {
	nodes := make([]*testNode, 3)
	for i := range nodes {
		nodes[i] = &testNode{id: fmt.Sprintf("b%d", i), dir: t.TempDir(), local: store.NewMemory()}
		nodes[i].start(t)
		defer nodes[i].stop(t)
	}
	var mu sync.Mutex
	visible := 1
	members := func() []discovery.Member {
		mu.Lock()
		defer mu.Unlock()
		var ms []discovery.Member
		for _, n := range nodes[:visible] {
			ms = append(ms, discovery.Member{Name: n.id, Meta: map[string]string{RaftMetaKey: n.addr}})
		}
		return ms
	}
	errs := make(chan error, 3)
	for _, n := range nodes {
		go func() { errs <- n.g.BootstrapExpect(context.Background(), 3, members) }()
	}
	time.Sleep(500 * time.Millisecond)
	if nodes[0].g.Raft().LastIndex() != 0 {
		t.Fatal("bootstrapped with one member of three")
	}
	mu.Lock()
	visible = 3
	mu.Unlock()
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	propose(t, leaderOf(t, nodes), put("vhost/x", "x"))
	for _, n := range nodes {
		waitValue(t, n, "vhost/x", "x")
	}
	// A cancelled wait returns ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := &testNode{id: "lonely", dir: t.TempDir(), local: store.NewMemory()}
	n.start(t)
	defer n.stop(t)
	if err := n.g.BootstrapExpect(ctx, 5, members); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestRogueNotAdmitted (issue 38, F1/F9): a node in the member list whose
// cookie differs is never counted by BootstrapExpect, never added by
// Reconcile, never gets a record, and neither Admitted nor (while alive)
// Placeable lists it; nor a node that gossips a member's name with
// another address.
func TestRogueNotAdmitted(t *testing.T) {
	good := []*testNode{
		{id: "g0", dir: t.TempDir(), local: store.NewMemory()},
		{id: "g1", dir: t.TempDir(), local: store.NewMemory()},
	}
	rogue := &testNode{id: "r", dir: t.TempDir(), local: store.NewMemory(), cookie: "another"}
	for _, n := range append(good, rogue) {
		n.start(t)
		defer n.stop(t)
	}
	member := func(n *testNode, st discovery.Status) discovery.Member {
		return discovery.Member{Name: n.id, Status: st, Meta: map[string]string{RaftMetaKey: n.addr}}
	}
	all := []discovery.Member{member(good[0], discovery.StatusAlive), member(good[1], discovery.StatusAlive), member(rogue, discovery.StatusAlive)}
	members := func() []discovery.Member { return all }
	errs := make(chan error, 2)
	for _, n := range good {
		go func() { errs <- n.g.BootstrapExpect(context.Background(), 3, members) }()
	}
	time.Sleep(time.Second)
	if good[0].g.Raft().LastIndex() != 0 {
		t.Fatal("bootstrapped counting the node with another cookie")
	}
	for _, n := range good {
		go func() { errs <- n.g.BootstrapExpect(context.Background(), 2, members) }()
	}
	for range 4 {
		if err := <-errs; err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			t.Fatal(err)
		}
	}
	leader := leaderOf(t, good)
	if n := leader.g.Reconcile(all); n != 0 {
		t.Fatalf("Reconcile made %d changes with the rogue alive", n)
	}
	propose(t, leader, put("user/alice", "hash"))
	for _, n := range good {
		waitValue(t, n, "user/alice", "hash")
		var names []string
		for _, m := range n.g.Admitted(all) {
			names = append(names, m.Name)
		}
		if fmt.Sprint(names) != "[g0 g1]" {
			t.Fatalf("%s admits %v", n.id, names)
		}
		if got := n.g.Placeable(all); len(got) != 2 {
			t.Fatalf("%s places on %v", n.id, got)
		}
		gone := []discovery.Member{member(rogue, discovery.StatusLeft)}
		if got := n.g.Placeable(gone); len(got) != 1 {
			t.Fatalf("a member that left is hidden from placement: %v", got)
		}
		impostor := []discovery.Member{{Name: others(good, n)[0].id, Status: discovery.StatusAlive, Meta: map[string]string{RaftMetaKey: rogue.addr}}}
		if got := n.g.Admitted(impostor); len(got) != 0 {
			t.Fatalf("%s admits a member's name at another address: %v", n.id, got)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if _, ok := rogue.get("user/alice"); ok || rogue.g.Raft().LastIndex() != 0 {
		t.Fatal("the node with another cookie got a record")
	}
}
