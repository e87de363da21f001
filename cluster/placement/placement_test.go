package placement

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/store"
)

func TestQuorumMembers(t *testing.T) {
	var ms fakeMembers
	ms.set("a", "addr-a", discovery.StatusAlive)
	ms.set("b", "addr-b", discovery.StatusAlive)
	ms.set("d", "addr-d", discovery.StatusAlive)
	ms.set("e", "addr-e", discovery.StatusDead)
	ms.set("f", "", discovery.StatusAlive) // no Raft address yet
	p := New(Config{Self: "c", Addr: func() string { return "addr-c" }, Members: ms.Members})
	for _, tc := range []struct {
		size int
		want []string
	}{
		{0, []string{"c", "d", "a"}},
		{1, []string{"c"}},
		{2, []string{"c", "d"}},
		{5, []string{"c", "d", "a", "b"}},
	} {
		if got := p.QuorumMembers(tc.size); !slices.Equal(got, tc.want) {
			t.Errorf("QuorumMembers(%d) = %v, want %v", tc.size, got, tc.want)
		}
	}
	if a, err := p.addrOf("e"); err == nil {
		t.Errorf("addrOf(dead node) = %q, want an error", a)
	}
	if a, _ := p.addrOf("c"); a != "addr-c" {
		t.Errorf("addrOf(self) = %q", a)
	}
}

// TestQuorumMembersAvoidDrained: a drained node (maintenance mode) is
// neither a new queue's first member (its first leader) nor taken while
// enough others are alive; a drained declaring node is still a member.
func TestQuorumMembersAvoidDrained(t *testing.T) {
	var ms fakeMembers
	for _, n := range []string{"a", "b", "c", "d"} {
		ms.set(n, "addr-"+n, discovery.StatusAlive)
	}
	ms.drain("d")
	self := "c"
	p := New(Config{Self: self, Addr: func() string { return "addr-" + self }, Members: ms.Members})
	for _, tc := range []struct {
		size int
		want []string
	}{
		{3, []string{"c", "a", "b"}},
		{4, []string{"c", "a", "b", "d"}},
	} {
		if got := p.QuorumMembers(tc.size); !slices.Equal(got, tc.want) {
			t.Errorf("QuorumMembers(%d) with d drained = %v, want %v", tc.size, got, tc.want)
		}
	}
	ms.drain("c")
	for _, tc := range []struct {
		size int
		want []string
	}{
		{1, []string{"c"}},
		{2, []string{"a", "c"}},
		{3, []string{"a", "b", "c"}},
		{4, []string{"a", "b", "c", "d"}},
	} {
		if got := p.QuorumMembers(tc.size); !slices.Equal(got, tc.want) {
			t.Errorf("QuorumMembers(%d) with c (self) and d drained = %v, want %v", tc.size, got, tc.want)
		}
	}
}

func TestClassicQueueProxiesToHome(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	a := c.node("a")
	home := &fakeQueue{id: 1, vhost: "v", name: "classic", home: "a"}
	a.placer.attach(home)
	if st, _ := home.get(); st != "" {
		t.Fatalf("a classic queue at home became %q", st)
	}
	away := &fakeQueue{id: 1, vhost: "v", name: "classic", home: "b"}
	a.placer.attach(away)
	st, r := away.get()
	if st != "proxy" {
		t.Fatalf("a classic queue of another node is %q, want a proxy", st)
	}
	if addr, err := r.locate(); err != nil || addr != "addr-b" {
		t.Fatalf("its proxy goes to %q, %v; want addr-b", addr, err)
	}
}

// A group's leadership moving is followed: the new leader's queue goes
// local, the old one's becomes a proxy to it.
func TestLeadershipSwitchesQueue(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.declare(1, []string{"a", "b", "c"})
	lead := c.leader(1)
	for _, n := range c.all() {
		if err := n.placer.waitReady(1); err != nil {
			t.Fatalf("%s: WaitReady: %v", n.name, err)
		}
		want := []string(nil)
		if n == lead {
			want = []string{"v/q1"}
		}
		if got := n.placer.Leaders(); !slices.Equal(got, want) {
			t.Fatalf("%s: Leaders() = %v, want %v", n.name, got, want)
		}
		if n == lead {
			continue
		}
		_, r := n.queue(1).get()
		if addr, err := r.locate(); err != nil || addr != lead.addr {
			t.Fatalf("%s: proxy goes to %q, %v; want %s", n.name, addr, err, lead.addr)
		}
	}
	if _, r := lead.queue(1).get(); r != nil {
		t.Fatal("the leader's queue kept a proxy")
	}

	if err := lead.placer.queue(1).raft().LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	var next *tnode
	eventually(t, 10*time.Second, func() bool {
		next = c.leader(1)
		return next != lead
	}, "leadership to move off %s", lead.name)
	if st, r := lead.queue(1).get(); st != "proxy" {
		t.Fatalf("old leader's queue is %q", st)
	} else if addr, err := r.locate(); err != nil || addr != next.addr {
		t.Fatalf("old leader's proxy goes to %q, %v; want %s", addr, err, next.addr)
	}
	if got := lead.placer.Leaders(); len(got) != 0 {
		t.Fatalf("old leader still lists %v", got)
	}
}

// A non-member's proxy aims at an alive member, and WaitReady does not
// wait for a group it has no member of.
func TestNonMemberProxiesToAMember(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c", "d")
	c.declare(1, []string{"a", "b", "c"})
	c.leader(1)
	d := c.node("d")
	if err := d.placer.waitReady(1); err != nil {
		t.Fatal(err)
	}
	if d.groups.raft(GroupName(1)) != nil {
		t.Fatal("a group member runs on a node that is not one")
	}
	_, r := d.queue(1).get()
	addr, err := r.locate()
	if err != nil || !slices.Contains([]string{"addr-a", "addr-b", "addr-c"}, addr) {
		t.Fatalf("non-member's proxy goes to %q, %v", addr, err)
	}
}

// A member that leaves the cluster is removed from the group at once
// (no timer: the Placers' retries and resyncs are an hour away); the
// group, smaller than declared, grows when another node joins.
func TestMembershipReconciledOnEvents(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.declare(1, []string{"a", "b", "c"})
	lead := c.leader(1)
	var gone *tnode
	for _, n := range c.all() {
		if n != lead {
			gone = n
			break
		}
	}
	var rest []string
	for _, n := range c.all() {
		if n != gone {
			rest = append(rest, n.name)
		}
	}

	c.members.set(gone.name, gone.addr, discovery.StatusLeft)
	eventually(t, 10*time.Second, func() bool {
		return slices.Equal(config(t, lead, 1), rest) && slices.Equal(sorted(lead.queue(1).Members()), rest)
	}, "%s removed from the group and the recorded members", gone.name)
	// The node that was removed leaves the group and drops its data.
	eventually(t, 10*time.Second, func() bool {
		st, _ := gone.queue(1).get()
		return gone.groups.dropped(GroupName(1)) && gone.groups.raft(GroupName(1)) == nil && st == "proxy"
	}, "%s to leave the group", gone.name)

	// A new node joins: the leader grows the group onto it, and its
	// Placer starts its member.
	d := c.add("d")
	c.declare(1, nil, "d")
	want := sorted(append(slices.Clone(rest), "d"))
	eventually(t, 10*time.Second, func() bool {
		return slices.Equal(config(t, lead, 1), want) && slices.Equal(config(t, d, 1), want) &&
			slices.Equal(sorted(d.queue(1).Members()), want)
	}, "the group grown onto d")
	if st, r := d.queue(1).get(); st != "proxy" {
		t.Fatalf("d's queue is %q", st)
	} else if addr, err := r.locate(); err != nil || addr != lead.addr {
		t.Fatalf("d's proxy goes to %q, %v; want %s", addr, err, lead.addr)
	}
}

// A member that failed (dead, not left) stays in the group: it may come
// back.
func TestDeadMemberKept(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c", "d")
	c.declare(1, []string{"a", "b", "c"}, "a", "b", "c", "d")
	lead := c.leader(1)
	var dead *tnode
	for _, name := range []string{"a", "b", "c"} {
		if n := c.node(name); n != lead {
			dead = n
			break
		}
	}
	c.members.set(dead.name, dead.addr, discovery.StatusDead)
	// Let the event be handled; then nothing changed.
	time.Sleep(300 * time.Millisecond)
	if got := config(t, lead, 1); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("group after a member failed: %v", got)
	}
}

// Deleting the queue stops and drops its group everywhere; closing the
// Placer stops the groups and keeps their data.
func TestDetachDropsAndCloseKeeps(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.declare(1, []string{"a", "b", "c"})
	c.declare(2, []string{"a", "b", "c"})
	c.leader(1)
	c.leader(2)
	for _, n := range c.all() {
		n.placer.detach(n.queue(1))
	}
	for _, n := range c.all() {
		eventually(t, 10*time.Second, func() bool {
			return n.groups.dropped(GroupName(1)) && n.groups.raft(GroupName(1)) == nil
		}, "%s to drop the deleted queue's group", n.name)
		if n.placer.queue(1) != nil {
			t.Fatalf("%s still places the deleted queue", n.name)
		}
	}
	for _, n := range c.all() {
		n.placer.Close()
		if !n.groups.stopped(GroupName(2)) || n.groups.dropped(GroupName(2)) {
			t.Fatalf("%s: Close must stop the group and keep its data", n.name)
		}
		if has, err := n.groups.HasState(GroupName(2)); err != nil || !has {
			t.Fatalf("%s: group state after Close: %v, %v", n.name, has, err)
		}
		if !n.remotes.closed.Load() {
			t.Fatalf("%s: Close left the forwarder open", n.name)
		}
	}
}

// A group restarted from its state (a node restarting) does not
// bootstrap again and elects a leader.
func TestRestartFromState(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.declare(1, []string{"a", "b", "c"})
	c.leader(1)
	for _, n := range c.all() {
		n.placer.Close()
	}
	// New Placers over the same groups, stores and membership.
	for _, n := range c.all() {
		n.remotes = &fakeRemotes{}
		n.placer = New(Config{Self: n.name, Addr: func() string { return n.addr }, Members: c.members.Members,
			Groups: n.groups, Remotes: n.remotes, Store: store.NewMemory(), Topology: c,
			RetryEvery: time.Hour, ResyncEvery: time.Hour})
		c.members.subscribe(n.placer.Notify)
		t.Cleanup(n.placer.Close)
		n.mu.Lock()
		n.queues = map[uint64]*fakeQueue{}
		n.mu.Unlock()
	}
	c.declare(1, []string{"a", "b", "c"})
	lead := c.leader(1)
	if got := config(t, lead, 1); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("restarted group: %v", got)
	}
}

// forgetRecorder is the Forgetter's fake core.
type forgetRecorder struct {
	mu     sync.Mutex
	leader string
	forgot []string
}

func (f *forgetRecorder) metaLeader() string { f.mu.Lock(); defer f.mu.Unlock(); return f.leader }
func (f *forgetRecorder) forget(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, node)
	return 1
}
func (f *forgetRecorder) count(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, x := range f.forgot {
		if x == node {
			n++
		}
	}
	return n
}

func TestForgetterForgetsGoneNodesOnLeader(t *testing.T) {
	var ms fakeMembers
	ms.set("a", "addr-a", discovery.StatusAlive)
	ms.set("b", "addr-b", discovery.StatusAlive)
	rec := &forgetRecorder{leader: "b"}
	f := StartForgetter(ForgetConfig{Self: "a", Members: ms.Members, MetaLeader: rec.metaLeader, Forget: rec.forget,
		SweepEvery: 50 * time.Millisecond})
	t.Cleanup(f.Close)
	ms.subscribe(f.Notify)

	ms.set("c", "addr-c", discovery.StatusDead)
	time.Sleep(200 * time.Millisecond)
	if n := rec.count("c"); n != 0 {
		t.Fatalf("a node not leading the metadata group forgot c %d times", n)
	}
	rec.mu.Lock()
	rec.leader = "a"
	rec.mu.Unlock()
	eventually(t, 5*time.Second, func() bool { return rec.count("c") > 0 }, "c forgotten once a leads")
	if n := rec.count("a") + rec.count("b"); n != 0 {
		t.Fatal("an alive node (or itself) was forgotten")
	}
}

// Without a member gone the Forgetter sleeps until an event: a node
// leaving is forgotten at once even with the periodic sweep far away.
func TestForgetterWakesOnEvent(t *testing.T) {
	var ms fakeMembers
	ms.set("a", "addr-a", discovery.StatusAlive)
	ms.set("b", "addr-b", discovery.StatusAlive)
	rec := &forgetRecorder{leader: "a"}
	members, swept := countCalls(ms.Members)
	f := StartForgetter(ForgetConfig{Self: "a", Members: members, MetaLeader: rec.metaLeader, Forget: rec.forget,
		SweepEvery: time.Hour})
	t.Cleanup(f.Close)
	ms.subscribe(f.Notify)
	eventually(t, 5*time.Second, func() bool { return swept() > 0 }, "the first sweep")
	ms.set("b", "addr-b", discovery.StatusLeft)
	eventually(t, 5*time.Second, func() bool { return rec.count("b") > 0 }, "b forgotten on its leave event")
}

// The Forgetter of a node that comes to lead the metadata group sweeps at
// once, woken by the group's leader observation.
func TestForgetterWakesOnMetaLeadership(t *testing.T) {
	var ms fakeMembers
	ms.set("a", "addr-a", discovery.StatusAlive)
	ms.set("x", "addr-x", discovery.StatusLeft)
	rc := raft.DefaultConfig()
	rc.LocalID = "a"
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	addr, tr := raft.NewInmemTransport("")
	st := raft.NewInmemStore()
	r, err := raft.NewRaft(rc, &raft.MockFSM{}, st, st, raft.NewInmemSnapshotStore(), tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown().Error() })
	leader := func() string { _, id := r.LeaderWithID(); return string(id) }
	rec := &forgetRecorder{}
	members, swept := countCalls(ms.Members)
	f := StartForgetter(ForgetConfig{Self: "a", Members: members, MetaLeader: leader, MetaRaft: r,
		Forget: rec.forget, SweepEvery: time.Hour})
	t.Cleanup(f.Close)
	eventually(t, 5*time.Second, func() bool { return swept() > 0 }, "the first sweep")
	if rec.count("x") != 0 {
		t.Fatal("x forgotten before this node led the metadata group")
	}
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "a", Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool { return rec.count("x") > 0 }, "x forgotten when a became the metadata leader")
}

// countCalls wraps members to count its calls (a sweep's first step).
func countCalls(members func() []discovery.Member) (func() []discovery.Member, func() int64) {
	var n atomic.Int64
	return func() []discovery.Member { n.Add(1); return members() }, n.Load
}

// A seed bootstraps the group once every seed's address is known: it
// waits for the membership event that brings the last one.
func TestBootstrapWaitsForSeedAddress(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	cn := c.node("c")
	c.members.set("c", "", discovery.StatusAlive) // its Raft address not gossiped yet
	// c has not learnt of the queue yet; a and b wait for its address.
	c.declare(1, []string{"a", "b", "c"}, "a", "b")
	time.Sleep(200 * time.Millisecond)
	for _, name := range []string{"a", "b"} {
		if r := c.node(name).groups.raft(GroupName(1)); r == nil {
			t.Fatalf("%s's member did not start", name)
		} else if addr, _ := r.LeaderWithID(); addr != "" {
			t.Fatal("the group elected a leader before every seed was known")
		}
	}
	c.members.set("c", cn.addr, discovery.StatusAlive)
	c.leader(1) // a and b bootstrapped: a majority
	c.declare(1, nil, "c")
	lead := c.leader(1)
	if got := config(t, lead, 1); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("bootstrapped group: %v", got)
	}
}

// A queue is quorum-critical on a node when its group has no majority
// without that node.
func TestQuorumCritical(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.declare(1, []string{"a", "b", "c"})
	c.leader(1)
	a := c.node("a")
	if got := a.placer.QuorumCritical(); len(got) != 0 {
		t.Fatalf("critical with every member alive: %+v", got)
	}
	c.members.set("c", "addr-c", discovery.StatusDead)
	got := a.placer.QuorumCritical()
	if len(got) != 1 || got[0].Name != "q1" || !slices.Equal(got[0].Members, []string{"a", "b", "c"}) ||
		!slices.Equal(got[0].Online, []string{"a", "b"}) {
		t.Fatalf("critical with c dead: %+v", got)
	}
}

// Three queues led by one node: the plan moves two leaders off it, and
// applying it leaves one leader on each node.
func TestRebalance(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	for id := uint64(1); id <= 3; id++ {
		c.declare(id, []string{"a", "b", "c"})
	}
	a := c.node("a")
	for id := uint64(1); id <= 3; id++ {
		eventually(t, 10*time.Second, func() bool {
			lead := c.leader(id)
			if lead == a {
				return true
			}
			_ = lead.placer.queue(id).raft().LeadershipTransferToServer("a", raft.ServerAddress(a.addr)).Error()
			return false
		}, "a to lead queue %d", id)
	}
	moves := a.placer.PlanRebalance()
	if len(moves) != 2 {
		t.Fatalf("plan: %+v", moves)
	}
	for _, m := range moves {
		if m.From != "a" || m.To == "a" {
			t.Fatalf("move %+v", m)
		}
	}
	a.placer.ApplyRebalance(moves)
	for _, m := range moves {
		eventually(t, 10*time.Second, func() bool {
			return slices.Equal(c.node(m.To).placer.Leaders(), []string{"v/" + m.Name})
		}, "%s to lead %s", m.To, m.Name)
	}
}

// A member that is alive but has not caught up with the leader's log (a
// member just added back, being sent what it lacks) does not count as
// online: the leader sees it from the follower's answers, the other
// members from what the leader gossips (CatchingUpMetaKey).
func TestQuorumCriticalCatchingUp(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.declare(1, []string{"a", "b", "c"})
	ld := c.leader(1)
	var behind, other *tnode
	for _, n := range c.all() {
		switch {
		case n == ld:
		case behind == nil:
			behind = n
		default:
			other = n
		}
	}
	group := GroupName(1)
	for _, n := range c.all() {
		if got := n.placer.QuorumCritical(); len(got) != 0 {
			t.Fatalf("%s: critical with every member caught up: %+v", n.name, got)
		}
	}
	if got := ld.placer.CatchingUp(); len(got) != 0 {
		t.Fatalf("catching up with every member caught up: %v", got)
	}

	// 13,000 entries behind.
	ld.groups.setLag(group, behind.addr, 13000, time.Now())
	got := ld.placer.QuorumCritical()
	want := sorted([]string{ld.name, other.name})
	if len(got) != 1 || got[0].Name != "q1" || !slices.Equal(got[0].Online, want) {
		t.Fatalf("leader, with %s catching up: %+v, want q1 online %v", behind.name, got, want)
	}
	if got := ld.placer.CatchingUp(); !slices.Equal(got, []string{behind.name}) {
		t.Fatalf("catching up: %v, want [%s]", got, behind.name)
	}
	if got := other.placer.QuorumCritical(); len(got) != 0 {
		t.Fatalf("%s, before the leader gossiped: %+v", other.name, got)
	}
	c.members.setMeta(ld.name, CatchingUpMetaKey, EncodeCatchingUp(ld.placer.CatchingUp()))
	got = other.placer.QuorumCritical()
	if len(got) != 1 || !slices.Equal(got[0].Online, want) {
		t.Fatalf("%s, with the leader gossiping %s catching up: %+v, want q1 online %v", other.name, behind.name, got, want)
	}
	// The lagging member itself may stop: the others are a majority.
	if got := behind.placer.QuorumCritical(); len(got) != 0 {
		t.Fatalf("%s (catching up itself): %+v", behind.name, got)
	}

	// An answer too old to tell is not caught up either.
	ld.groups.setLag(group, behind.addr, 0, time.Now().Add(-time.Minute))
	if got := ld.placer.QuorumCritical(); len(got) != 1 {
		t.Fatalf("leader, with %s's last answer a minute old: %+v", behind.name, got)
	}
	// Caught up (within the slack of a pipeline).
	ld.groups.setLag(group, behind.addr, 10, time.Now())
	if got := ld.placer.QuorumCritical(); len(got) != 0 {
		t.Fatalf("leader, with %s caught up: %+v", behind.name, got)
	}
	c.members.setMeta(ld.name, CatchingUpMetaKey, EncodeCatchingUp(ld.placer.CatchingUp()))
	if got := other.placer.QuorumCritical(); len(got) != 0 {
		t.Fatalf("%s, with the leader gossiping nothing behind: %+v", other.name, got)
	}
}

// A member this node is about to add is announced as catching up before
// the add, so that no member counts it online from the moment it sees
// it in the configuration.
func TestCatchingUpAnnouncedBeforeAdd(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	a := c.node("a")
	var mu sync.Mutex
	var got [][]string
	a.placer.WatchCatchingUp(time.Hour, func(names []string) {
		mu.Lock()
		got = append(got, names)
		mu.Unlock()
	})
	done := a.placer.adding("c")
	mu.Lock()
	if len(got) != 1 || !slices.Equal(got[0], []string{"c"}) {
		mu.Unlock()
		t.Fatalf("announced %v before the add, want [[c]]", got)
	}
	mu.Unlock()
	if cu := a.placer.CatchingUp(); !slices.Equal(cu, []string{"c"}) {
		t.Fatalf("catching up during the add: %v", cu)
	}
	done()
	if cu := a.placer.CatchingUp(); len(cu) != 0 {
		t.Fatalf("catching up after an add of a member that leads no group here: %v", cu)
	}
}
