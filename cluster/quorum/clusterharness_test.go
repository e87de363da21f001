package quorum

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/store"
)

// tnode is one member of an in-process Raft group: in-memory stores and
// transport, its own FSM.
type tnode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	trans *raft.InmemTransport
	store *raft.InmemStore // log and stable store; survives restart
	// File snapshots: raft's in-memory store hands out the buffer of a
	// snapshot still being persisted (a data race under -race).
	snaps *raft.FileSnapshotStore
	dir   string        // snaps' directory
	ms    *store.Memory // the node's message store: the FSM's state; survives restart
	fsm   *FSM
	r     *raft.Raft
	down  bool
}

type tcluster struct {
	t     testing.TB
	conf  func(*raft.Config)
	nodes []*tnode
}

// steadyLeader gives a group timeouts that a loaded machine under -race
// does not miss (the 50 ms ones of fastConfig lose leadership when the
// test's producer and the other packages' tests hold both cores): for
// tests whose ops go through one leader's Log and whose subject is not
// failover.
func steadyLeader(rc *raft.Config) {
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = time.Second, time.Second, time.Second
}

func fastConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.Logger = hclog.NewNullLogger()
	return c
}

// newCluster starts n bootstrapped members; conf may adjust each config.
func newCluster(t testing.TB, n int, conf func(*raft.Config)) *tcluster {
	t.Helper()
	c := &tcluster{t: t, conf: conf}
	var servers []raft.Server
	for i := 0; i < n; i++ {
		dir := t.TempDir()
		snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		nd := &tnode{id: raft.ServerID("n" + strconv.Itoa(i)), store: raft.NewInmemStore(), snaps: snaps, dir: dir, ms: store.NewMemory()}
		nd.addr, nd.trans = raft.NewInmemTransport("")
		c.nodes = append(c.nodes, nd)
		servers = append(servers, raft.Server{ID: nd.id, Address: nd.addr})
	}
	c.connectAll()
	for _, nd := range c.nodes {
		c.start(nd)
		if err := nd.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.shutdown)
	return c
}

func (c *tcluster) start(nd *tnode) {
	c.t.Helper()
	rc := fastConfig(nd.id)
	if c.conf != nil {
		c.conf(rc)
	}
	rc.NoSnapshotRestoreOnStart = true // the FSM's state is in nd.ms
	fsm, err := NewFSM(nd.ms, 1, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.fsm = fsm
	r, err := raft.NewRaft(rc, nd.fsm, nd.store, nd.store, fsm.SnapshotStore(nd.snaps, nd.dir), nd.trans)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.r, nd.down = r, false
}

// connectAll links every pair of transports that are up.
func (c *tcluster) connectAll() {
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b && !a.down && !b.down {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// isolate cuts nd off from every other member, both ways.
func (c *tcluster) isolate(nd *tnode) {
	nd.trans.DisconnectAll()
	for _, o := range c.nodes {
		if o != nd {
			o.trans.Disconnect(nd.addr)
		}
	}
}

// kill shuts nd's Raft down (its stores survive for restart).
func (c *tcluster) kill(nd *tnode) {
	c.t.Helper()
	c.isolate(nd)
	if err := nd.r.Shutdown().Error(); err != nil {
		c.t.Fatal(err)
	}
	nd.down = true
}

// restart brings a killed nd back with a fresh FSM and transport over
// its old stores: the FSM reads its state from the message store, and
// Raft replays what came after the state record.
func (c *tcluster) restart(nd *tnode) {
	c.t.Helper()
	_, nd.trans = raft.NewInmemTransport(nd.addr)
	c.start(nd)
	c.connectAll()
}

func (c *tcluster) shutdown() {
	for _, nd := range c.nodes {
		if !nd.down {
			nd.r.Shutdown().Error()
			nd.down = true
		}
	}
}

func (c *tcluster) up() []*tnode {
	var out []*tnode
	for _, nd := range c.nodes {
		if !nd.down {
			out = append(out, nd)
		}
	}
	return out
}

// leader waits for one running member to lead, with a Barrier committed
// in its term, and returns it.
func (c *tcluster) leader() *tnode {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range c.up() {
			if nd.r.State() == raft.Leader && nd.r.Barrier(time.Second).Error() == nil {
				return nd
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader elected")
	return nil
}

// waitEqual waits until every running member's FSM equals the leader's
// (after a Barrier on the leader).
func (c *tcluster) waitEqual(ld *tnode) []entry {
	c.t.Helper()
	if err := ld.r.Barrier(5 * time.Second).Error(); err != nil {
		c.t.Fatal(err)
	}
	want := dump(ld.fsm)
	deadline := time.Now().Add(10 * time.Second)
	for _, nd := range c.up() {
		for {
			err := equalEntries(dump(nd.fsm), want)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s differs from leader %s: %v", nd.id, ld.id, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return want
}

func msg(i int) []byte { return []byte(fmt.Sprintf("%016d", i)) }

// results collects done callbacks: the error per seq and their order.
type results struct {
	mu    sync.Mutex
	wg    sync.WaitGroup
	errs  map[uint64]error
	order []uint64
}

func newResults() *results { return &results{errs: map[uint64]error{}} }

func (rs *results) done(seq uint64) func(error) {
	rs.wg.Add(1)
	return func(err error) {
		rs.mu.Lock()
		if _, dup := rs.errs[seq]; dup {
			panic(fmt.Sprintf("done called twice for %d", seq))
		}
		rs.errs[seq] = err
		rs.order = append(rs.order, seq)
		rs.mu.Unlock()
		rs.wg.Done()
	}
}

func (rs *results) wait(t testing.TB) {
	t.Helper()
	ch := make(chan struct{})
	go func() { rs.wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("done callbacks missing")
	}
}

func (rs *results) acked() []uint64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []uint64
	for _, s := range rs.order {
		if rs.errs[s] == nil {
			out = append(out, s)
		}
	}
	return out
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("in-process Raft cluster: skipped with -short")
	}
}

// watchLog records one member's leadership reports.
type watchLog struct {
	mu     sync.Mutex
	events []bool
	ch     chan bool
}

func watch(t testing.TB, nd *tnode) *watchLog {
	wl := &watchLog{ch: make(chan bool, 100)}
	w := Watch(nd.r, 5*time.Second, func(leader bool) {
		wl.mu.Lock()
		if n := len(wl.events); (n == 0 && !leader) || (n > 0 && wl.events[n-1] == leader) {
			t.Errorf("%s: report %v does not alternate: %v", nd.id, leader, wl.events)
		}
		wl.events = append(wl.events, leader)
		wl.mu.Unlock()
		wl.ch <- leader
	})
	t.Cleanup(w.Stop)
	return wl
}

func (wl *watchLog) await(t testing.TB, leader bool) {
	t.Helper()
	select {
	case got := <-wl.ch:
		if got != leader {
			t.Fatalf("watch reported %v, want %v", got, leader)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch did not report %v", leader)
	}
}
