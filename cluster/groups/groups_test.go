package groups

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/mux"
	"github.com/trident-broker/trident/cluster/raftstore"
)

// listFSM records the commands applied, in order.
type listFSM struct {
	mu  sync.Mutex
	cmd []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	f.cmd = append(f.cmd, string(l.Data))
	f.mu.Unlock()
	return nil
}

func (f *listFSM) applied() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmd...)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	return snap(strings.Join(f.applied(), "\n")), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.cmd = nil
	if len(b) > 0 {
		f.cmd = strings.Split(string(b), "\n")
	}
	f.mu.Unlock()
	return nil
}

type snap string

func (s snap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write([]byte(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}
func (snap) Release() {}

type node struct {
	id   string
	dir  string
	mux  *mux.Mux
	db   *raftstore.DB
	host *Host
}

func startNode(t *testing.T, id, dir, bind string) *node {
	t.Helper()
	m, err := mux.Listen(bind, "", "cookie", nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := raftstore.Open(filepath.Join(dir, "badger"), raftstore.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &node{id: id, dir: dir, mux: m, db: db,
		host: New(Config{DB: db, Mux: m, Dir: filepath.Join(dir, "snapshots"), NodeID: id})}
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	if err := n.host.Close(); err != nil {
		t.Error(err)
	}
	n.mux.Close()
	if err := n.db.Close(); err != nil {
		t.Error(err)
	}
}

func waitLeader(t *testing.T, rs ...*raft.Raft) *raft.Raft {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rs {
			if r != nil && r.State() == raft.Leader {
				return r
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no leader")
	return nil
}

func waitApplied(t *testing.T, f *listFSM, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.applied()) < want {
		if time.Now().After(deadline) {
			t.Fatalf("applied %v, want %d entries", f.applied(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestThreeNodes: three hosts over three muxes run two groups side by
// side; a leader's death is repaired, a stopped node restarts from disk
// and catches up, a dropped group leaves nothing behind.
func TestThreeNodes(t *testing.T) {
	nodes := make([]*node, 3)
	var servers []raft.Server
	for i := range nodes {
		nodes[i] = startNode(t, string(rune('a'+i)), t.TempDir(), "127.0.0.1:0")
		servers = append(servers, nodes[i].host.Self())
	}
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.stop(t)
			}
		}
	}()
	groupNames := []string{"meta", "q/%2F/orders"}
	fsms := map[string][]*listFSM{}
	rafts := map[string][]*raft.Raft{}
	for _, g := range groupNames {
		for _, n := range nodes {
			f := &listFSM{}
			r, err := n.host.Start(g, f, Options{SnapshotThreshold: 4, TrailingLogs: 2})
			if err != nil {
				t.Fatal(err)
			}
			if err := Bootstrap(r, servers); err != nil {
				t.Fatal(err)
			}
			fsms[g] = append(fsms[g], f)
			rafts[g] = append(rafts[g], r)
		}
	}
	if _, err := nodes[0].host.Start("meta", &listFSM{}, Options{}); !errors.Is(err, ErrRunning) {
		t.Fatalf("second start: %v", err)
	}
	for _, g := range groupNames {
		l := waitLeader(t, rafts[g]...)
		for _, c := range []string{g + "1", g + "2"} {
			if err := l.Apply([]byte(c), 5*time.Second).Error(); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range fsms[g] {
			waitApplied(t, f, 2)
		}
	}
	// Heartbeats go over the coalesced stream (every 50-100 ms here).
	deadline := time.Now().Add(5 * time.Second)
	for served := uint64(0); served < 10; {
		served = 0
		for _, n := range nodes {
			served += n.host.hb.served.Load()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d coalesced heartbeats answered", served)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Kill the meta leader's node; the other two elect a new leader.
	l := waitLeader(t, rafts["meta"]...)
	dead := -1
	for i, r := range rafts["meta"] {
		if r == l {
			dead = i
		}
	}
	start := time.Now()
	nodes[dead].stop(t)
	rest := []*raft.Raft{}
	for i, r := range rafts["meta"] {
		if i != dead {
			rest = append(rest, r)
		}
	}
	l = waitLeader(t, rest...)
	t.Logf("new leader after %v", time.Since(start))
	for i := range 6 { // past SnapshotThreshold: the restarted node may need a snapshot
		if err := l.Apply([]byte("after"+string(rune('0'+i))), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}

	// Restart the dead node from its directory, on the same address.
	addr := nodes[dead].mux.Addr()
	nodes[dead] = startNode(t, nodes[dead].id, nodes[dead].dir, addr)
	if has, err := nodes[dead].host.HasState("meta"); err != nil || !has {
		t.Fatalf("HasState = %v, %v", has, err)
	}
	f := &listFSM{}
	if _, err := nodes[dead].host.Start("meta", f, Options{}); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, f, 8)
	if got := f.applied(); got[len(got)-1] != "after5" {
		t.Fatalf("restarted node applied %v", got)
	}

	// Drop: no state, no snapshot directory left.
	for _, n := range nodes {
		if err := n.host.Drop("q/%2F/orders"); err != nil {
			t.Fatal(err)
		}
		if has, err := n.host.HasState("q/%2F/orders"); err != nil || has {
			t.Fatalf("after Drop: HasState = %v, %v", has, err)
		}
		if _, err := os.Stat(n.host.SnapshotDir("q/%2F/orders")); !os.IsNotExist(err) {
			t.Fatalf("snapshot dir: %v", err)
		}
		if got := n.host.Names(); len(got) != 1 || got[0] != "meta" {
			t.Fatalf("Names = %v", got)
		}
	}
}

func TestSnapshotDir(t *testing.T) {
	h := New(Config{Dir: "/d"})
	for _, tc := range []struct{ name, want string }{
		{"meta", "/d/meta"},
		{"q/%2F/orders", "/d/q%2F%252F%2Forders"},
		{"..", "/d/%2E."},
	} {
		if got := h.SnapshotDir(tc.name); got != tc.want {
			t.Errorf("SnapshotDir(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	long := h.SnapshotDir("q/" + strings.Repeat("x", 600))
	if b := filepath.Base(long); len(b) > 200 || filepath.Dir(long) != "/d" {
		t.Errorf("long name: %q", long)
	}
}

func TestDefaultTiming(t *testing.T) {
	c := raft.DefaultConfig()
	d := DefaultTiming()
	c.LocalID = "x"
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout, d.CommitTimeout
	if err := raft.ValidateConfig(c); err != nil {
		t.Fatal(err)
	}
}

// TestQuorumTiming: raft takes a quorum queue's timers as a follower's,
// as a leader's (Timing.leading) and as Campaign's nudge (a heartbeat
// timeout 1 ms shorter, still no shorter than the lease); the leader's
// heartbeats (at most a fifth of its timeout apart) come well inside
// its lease, and the keepalives well inside a follower's timeout.
func TestQuorumTiming(t *testing.T) {
	q := QuorumTiming()
	for name, tm := range map[string]Timing{
		"follower": q,
		"leader":   q.leading(),
		"campaign": {HeartbeatTimeout: q.HeartbeatTimeout - time.Millisecond, ElectionTimeout: q.ElectionTimeout, LeaderLeaseTimeout: q.LeaderLeaseTimeout, CommitTimeout: q.CommitTimeout},
	} {
		c := raft.DefaultConfig()
		c.LocalID = "x"
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout = tm.HeartbeatTimeout, tm.ElectionTimeout, tm.LeaderLeaseTimeout, tm.CommitTimeout
		if err := raft.ValidateConfig(c); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if l := q.leading(); l.HeartbeatTimeout != q.LeaderHeartbeatTimeout || l.HeartbeatTimeout/5 > q.LeaderLeaseTimeout*2/3 {
		t.Errorf("leader's heartbeat timeout %v, lease %v", l.HeartbeatTimeout, q.LeaderLeaseTimeout)
	}
	if hbKeepEvery > q.HeartbeatTimeout/2 || q.keepFor() < q.LeaderHeartbeatTimeout/5 {
		t.Errorf("keepalives every %v for %v; follower timeout %v", hbKeepEvery, q.keepFor(), q.HeartbeatTimeout)
	}
}

// TestCampaign: with timers that would hold the first election back for
// 10-20 s, the node that campaigns right after the bootstrap leads the
// group within a few round trips, and a group's own Timing replaces the
// host's.
func TestCampaign(t *testing.T) {
	slow := Timing{HeartbeatTimeout: 10 * time.Second, ElectionTimeout: 10 * time.Second, LeaderLeaseTimeout: time.Second}
	nodes := make([]*node, 3)
	var servers []raft.Server
	for i := range nodes {
		nodes[i] = startNode(t, string(rune('a'+i)), t.TempDir(), "127.0.0.1:0")
		servers = append(servers, nodes[i].host.Self())
	}
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	var rafts []*raft.Raft
	for _, n := range nodes {
		r, err := n.host.Start("q/1", &listFSM{}, Options{Timing: slow})
		if err != nil {
			t.Fatal(err)
		}
		if err := Bootstrap(r, servers); err != nil {
			t.Fatal(err)
		}
		rafts = append(rafts, r)
	}
	if got := rafts[1].ReloadableConfig().HeartbeatTimeout; got != slow.HeartbeatTimeout {
		t.Fatalf("group heartbeat timeout %v, want %v", got, slow.HeartbeatTimeout)
	}
	start := time.Now()
	if err := Campaign(rafts[1]); err != nil {
		t.Fatal(err)
	}
	if got := rafts[1].ReloadableConfig().HeartbeatTimeout; got != slow.HeartbeatTimeout {
		t.Fatalf("heartbeat timeout after Campaign %v, want %v", got, slow.HeartbeatTimeout)
	}
	deadline := time.Now().Add(slow.HeartbeatTimeout / 2)
	for rafts[1].State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatalf("no leader %v after Campaign (state %v)", time.Since(start), rafts[1].State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("leader %v after Campaign", time.Since(start))
	// A follower that hears from a leader does not stand for election.
	if err := Campaign(rafts[2]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if rafts[1].State() != raft.Leader || rafts[2].State() != raft.Follower {
		t.Fatalf("after a follower's Campaign: states %v, %v", rafts[1].State(), rafts[2].State())
	}
}

// TestProbe: a probe over the heartbeat stream says whether a group runs
// on a peer.
func TestProbe(t *testing.T) {
	a := startNode(t, "a", t.TempDir(), "127.0.0.1:0")
	b := startNode(t, "b", t.TempDir(), "127.0.0.1:0")
	defer a.stop(t)
	defer b.stop(t)
	if _, err := a.host.Start("q/1", &listFSM{}, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := a.host.hb.probe(b.mux.Addr(), "q/1"); err == nil {
		t.Fatal("probe of a peer that runs no group: no error")
	}
	if _, err := b.host.Start("q/2", &listFSM{}, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := a.host.hb.probe(b.mux.Addr(), "q/1"); err == nil {
		t.Fatal("probe of a group not running on the peer: no error")
	}
	if _, err := b.host.Start("q/1", &listFSM{}, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := a.host.hb.probe(b.mux.Addr(), "q/1"); err != nil {
		t.Fatalf("probe of a running group: %v", err)
	}
	if err := b.host.Stop("q/1"); err != nil {
		t.Fatal(err)
	}
	if err := a.host.hb.probe(b.mux.Addr(), "q/1"); err == nil {
		t.Fatal("probe of a stopped group: no error")
	}
}
