package groups

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestPeerDownElects: when the leader's node goes away (its connections
// closed, its address refusing), a group whose raft timers would wait
// 10-20 s gets a new leader among the others long before: they stand for
// election as soon as they see the node gone.
func TestPeerDownElects(t *testing.T) {
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
	if err := Campaign(rafts[0]); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, rafts[0])
	if err := rafts[0].Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, r := range rafts[1:] {
		for {
			if l, _ := r.LeaderWithID(); l == servers[0].Address {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("followers do not know the leader")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Node a heartbeats b and c (every 1-2 s here).
	for nodes[1].host.hb.served.Load() == 0 || nodes[2].host.hb.served.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat reached the followers")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Node a's process "dies": its heartbeat connections close and its
	// mux closes its listener and connections (its raft still thinks it
	// leads for a moment).
	killed := time.Now()
	nodes[0].host.hb.close()
	nodes[0].mux.Close()
	deadline = time.Now().Add(slow.HeartbeatTimeout / 2)
	for rafts[1].State() != raft.Leader && rafts[2].State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatalf("no new leader %v after the leader's node went (raft's own timers: 10-20 s)", time.Since(killed))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("new leader %v after the leader's node went", time.Since(killed))
}

// TestPeerLostProbe: a closed heartbeat connection makes the node's
// groups elect only if the peer's address refuses a dial or runs no
// groups (no heartbeat stream): a live peer, or one that does not
// answer, does not.
func TestPeerLostProbe(t *testing.T) {
	a := startNode(t, "a", t.TempDir(), "127.0.0.1:0")
	b := startNode(t, "b", t.TempDir(), "127.0.0.1:0")
	defer a.stop(t)
	defer b.stop(t)
	if _, err := a.host.Start("q/1", &listFSM{}, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.host.Start("q/1", &listFSM{}, Options{}); err != nil {
		t.Fatal(err)
	}
	var down []string
	a.host.hb.down = func(addr string) { down = append(down, addr) }
	a.host.hb.lost(b.mux.Addr())
	if len(down) != 0 {
		t.Fatalf("a live peer reported down: %v", down)
	}
	// An address nothing listens on refuses.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	a.host.hb.lost(gone)
	if len(down) != 1 || down[0] != gone {
		t.Fatalf("a refused address: down %v, want [%s]", down, gone)
	}
	// A node whose groups are closed (its mux has no heartbeat stream).
	c := startNode(t, "c", t.TempDir(), "127.0.0.1:0")
	defer c.stop(t)
	a.host.hb.lost(c.mux.Addr())
	if len(down) != 2 || down[1] != c.mux.Addr() {
		t.Fatalf("a node without groups: down %v, want it reported", down)
	}
	// A listener that takes the connection and never answers is not
	// a dead process (a frozen or overloaded one is left to raft).
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	a.host.hb.lost(ln.Addr().String())
	if len(down) != 2 {
		t.Fatalf("a peer that does not answer reported down: %v", down)
	}
}
