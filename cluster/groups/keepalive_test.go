package groups

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func testPeer() *hbPeer {
	return &hbPeer{pending: map[uint64]func(hbResp){}, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

func testHeartbeat(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a"), Addr: []byte("127.0.0.1:1")},
		Term:      term,
		Leader:    []byte("127.0.0.1:1"),
	}
}

// TestHBBeatFresh: an answer stands for a heartbeat only while it is a
// success for the same term, younger than hbKeepFresh, and its
// connection has not failed since.
func TestHBBeatFresh(t *testing.T) {
	p := testPeer()
	now := time.Now()
	b := &hbBeat{peer: p, req: *testHeartbeat(3)}
	ok := &raft.AppendEntriesResponse{Term: 3, Success: true}
	b.answered(true, ok, now, p.gen.Load())
	if !b.fresh(now.Add(hbKeepFresh - time.Millisecond)) {
		t.Fatal("a young success is not fresh")
	}
	if b.fresh(now.Add(hbKeepFresh)) {
		t.Fatal("an old answer is fresh")
	}
	b.answered(true, ok, now.Add(-time.Second), p.gen.Load())
	if !b.at.Equal(now) {
		t.Fatal("an older answer replaced a newer one")
	}
	p.failAll(errors.New("broken"))
	if b.fresh(now) {
		t.Fatal("an answer from before the connection failed is fresh")
	}
	b.answered(true, ok, now, p.gen.Load())
	for name, resp := range map[string]*raft.AppendEntriesResponse{
		"failure":     {Term: 3},
		"higher term": {Term: 4, Success: true},
	} {
		c := *b
		c.answered(true, resp, now, p.gen.Load())
		if c.fresh(now) {
			t.Errorf("%s: fresh", name)
		}
	}
	c := *b
	c.answered(false, ok, now, p.gen.Load())
	if c.fresh(now) {
		t.Error("an error: fresh")
	}
}

// TestKeepaliveOnlyWhileRaftAsks: a follower's keepalive goes out while
// raft sent that heartbeat within keepFor, one at a time, and not once
// raft stopped sending it.
func TestKeepaliveOnlyWhileRaftAsks(t *testing.T) {
	p := testPeer()
	tr := &groupTransport{group: "q/1", keepFor: time.Second, beats: map[raft.ServerAddress]*hbBeat{}}
	now := time.Now()
	b := &hbBeat{peer: p, req: *testHeartbeat(2), asked: now}
	tr.beats["b"] = b
	tr.keepalive(now.Add(hbKeepEvery))
	if len(p.pending) != 1 || b.posted.IsZero() {
		t.Fatalf("raft asked just now: %d keepalives pending", len(p.pending))
	}
	tr.keepalive(now.Add(2 * hbKeepEvery))
	if len(p.pending) != 1 {
		t.Fatalf("a second keepalive while one is in flight: %d pending", len(p.pending))
	}
	for seq, done := range p.pending { // the follower answers
		delete(p.pending, seq)
		done(hbResp{seq: seq, resp: raft.AppendEntriesResponse{Term: 2, Success: true}})
	}
	if !b.fresh(now.Add(hbKeepEvery)) || !b.posted.IsZero() {
		t.Fatal("the keepalive's answer was not kept")
	}
	tr.keepalive(now.Add(tr.keepFor))
	if len(p.pending) != 0 {
		t.Fatalf("raft stopped asking %v ago: %d keepalives pending", tr.keepFor, len(p.pending))
	}
	// A keepalive whose answer never comes is given up on.
	later := now.Add(2 * hbTimeout)
	b.asked = later
	tr.keepalive(later)
	b.asked = later.Add(hbTimeout)
	tr.keepalive(b.asked)
	if len(p.pending) != 1 {
		t.Fatalf("after a lost keepalive: %d pending, want the new one", len(p.pending))
	}
}

// TestKeepalives: a quorum queue's group on three nodes. Its leader's
// raft switches to the leader's heartbeat timeout, its heartbeats are
// answered from the keepalives, and the group keeps its leader and term
// while the keepalives alone reach the followers between raft's rare
// heartbeats; when the leader's node dies the others elect a leader,
// which switches too.
func TestKeepalives(t *testing.T) {
	qt := QuorumTiming()
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
	var rafts []*raft.Raft
	for _, n := range nodes {
		r, err := n.host.Start("q/1", &listFSM{}, Options{Timing: qt})
		if err != nil {
			t.Fatal(err)
		}
		if err := Bootstrap(r, servers); err != nil {
			t.Fatal(err)
		}
		rafts = append(rafts, r)
	}
	if err := nodes[0].host.CampaignWhenReady("q/1", rafts[0], servers, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l := waitLeader(t, rafts...)
	term := l.CurrentTerm()
	waitTimeouts := func(rs []*raft.Raft, l *raft.Raft) {
		t.Helper()
		deadline := time.Now().Add(2 * tuneSweep)
		for {
			bad := ""
			for _, r := range rs {
				want := qt.HeartbeatTimeout
				if r == l {
					want = qt.LeaderHeartbeatTimeout
				}
				if got := r.ReloadableConfig().HeartbeatTimeout; got != want {
					bad = got.String() + " want " + want.String()
				}
			}
			if bad == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("heartbeat timeouts: %s", bad)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitTimeouts(rafts, l)
	// Two of the leader's heartbeat timeouts: raft alone would not
	// reach the followers in time (it heartbeats every 300-600 ms, the
	// followers elect after 1 s), nor keep its lease.
	served := make([]uint64, len(nodes))
	for i, n := range nodes {
		served[i] = n.host.hb.served.Load()
	}
	time.Sleep(2 * qt.LeaderHeartbeatTimeout)
	for i, r := range rafts {
		if got := r.CurrentTerm(); got != term {
			t.Fatalf("node %d: term %d, want %d: an election while the leader lived", i, got, term)
		}
		if r != l {
			// 2.5 keepalives a second
			if n := nodes[i].host.hb.served.Load() - served[i]; n < 10 {
				t.Fatalf("node %d answered %d heartbeats in %v", i, n, 2*qt.LeaderHeartbeatTimeout)
			}
		}
	}
	if l.State() != raft.Leader {
		t.Fatal("the leader stepped down")
	}
	if err := l.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}

	dead := -1
	for i, r := range rafts {
		if r == l {
			dead = i
		}
	}
	nodes[dead].stop(t)
	nodes[dead] = nil
	var rest []*raft.Raft
	for i, r := range rafts {
		if i != dead {
			rest = append(rest, r)
		}
	}
	l = waitLeader(t, rest...)
	waitTimeouts(rest, l)
}
