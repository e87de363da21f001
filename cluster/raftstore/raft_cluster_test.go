package raftstore

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/logbridge"
)

// hashFSM is a deterministic state machine: the count of distinct commands
// applied and a running FNV-64a over them in order. Two replicas with the
// same (count, sum) applied the same commands in the same order. A command
// seen before is skipped, so a client may retry one whose outcome it does
// not know (the leader stepped down before answering) without the count
// running ahead.
type hashFSM struct {
	mu    sync.Mutex
	count uint64
	sum   uint64
	seen  map[string]bool
}

func (f *hashFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	if f.seen[string(l.Data)] {
		return f.count
	}
	f.seen[string(l.Data)] = true
	h := fnv.New64a()
	h.Write(binary.BigEndian.AppendUint64(nil, f.sum))
	h.Write(l.Data)
	f.sum = h.Sum64()
	f.count++
	return f.count
}

func (f *hashFSM) state() (count, sum uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count, f.sum
}

func (f *hashFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := fsmSnap{count: f.count, sum: f.sum}
	for k := range f.seen {
		s.seen = append(s.seen, k)
	}
	return s, nil
}

func (f *hashFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	if len(b) < 16 {
		return io.ErrUnexpectedEOF
	}
	seen := map[string]bool{}
	for r := b[16:]; len(r) > 0; {
		if len(r) < 2 || len(r) < 2+int(binary.BigEndian.Uint16(r)) {
			return io.ErrUnexpectedEOF
		}
		n := int(binary.BigEndian.Uint16(r))
		seen[string(r[2:2+n])] = true
		r = r[2+n:]
	}
	f.mu.Lock()
	f.count, f.sum, f.seen = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:16]), seen
	f.mu.Unlock()
	return nil
}

type fsmSnap struct {
	count, sum uint64
	seen       []string
}

func (s fsmSnap) Persist(sink raft.SnapshotSink) error {
	b := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, s.count), s.sum)
	for _, k := range s.seen {
		b = append(binary.BigEndian.AppendUint16(b, uint16(len(k))), k...)
	}
	if _, err := sink.Write(b); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnap) Release() {}

// testNode is one Raft server of the in-process cluster: its own Badger
// Raft DB and file snapshots under dir, an in-memory transport.
type testNode struct {
	id    raft.ServerID
	dir   string
	db    *DB
	fsm   *hashFSM
	trans *raft.InmemTransport
	raft  *raft.Raft
}

// syncWriter lets goroutines log to the test until the test is over.
type syncWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Logf("%s", p)
	}
	return len(p), nil
}

type testCluster struct {
	t     *testing.T
	log   *slog.Logger
	nodes []*testNode
	conf  raft.Configuration
}

func raftTestConfig(id raft.ServerID, log *slog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 300 * time.Millisecond
	c.ElectionTimeout = 300 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	// Snapshot and truncate during the test, so compaction (DeleteRange)
	// and restore-from-snapshot on restart are exercised too.
	c.SnapshotThreshold = 256
	c.SnapshotInterval = 200 * time.Millisecond
	c.TrailingLogs = 64
	c.Logger = logbridge.NewHCLogger(log.With("node", string(id)), "raft")
	return c
}

func (c *testCluster) start(n *testNode) {
	t := c.t
	var err error
	if n.db, err = Open(filepath.Join(n.dir, "raft"), Options{GCInterval: -1}, c.log); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(n.dir, "snapshots"), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n.fsm = &hashFSM{}
	_, n.trans = raft.NewInmemTransport(raft.ServerAddress(n.id))
	for _, o := range c.nodes {
		if o != n && o.raft != nil {
			n.trans.Connect(o.trans.LocalAddr(), o.trans)
			o.trans.Connect(n.trans.LocalAddr(), n.trans)
		}
	}
	store := n.db.Group("meta")
	cfg := raftTestConfig(n.id, c.log)
	has, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		t.Fatal(err)
	}
	if !has {
		if err := raft.BootstrapCluster(cfg, store, store, snaps, n.trans, c.conf); err != nil {
			t.Fatal(err)
		}
	}
	if n.raft, err = raft.NewRaft(cfg, n.fsm, store, store, snaps, n.trans); err != nil {
		t.Fatal(err)
	}
}

func (c *testCluster) stop(n *testNode) {
	if n.raft == nil {
		return
	}
	if err := n.raft.Shutdown().Error(); err != nil {
		c.t.Errorf("shutdown %s: %v", n.id, err)
	}
	n.raft = nil
	for _, o := range c.nodes {
		if o != n && o.trans != nil {
			o.trans.Disconnect(n.trans.LocalAddr())
		}
	}
	n.trans.DisconnectAll()
	n.trans.Close()
	if err := n.db.Close(); err != nil {
		c.t.Errorf("close db %s: %v", n.id, err)
	}
}

// leader waits until exactly one running node is leader.
func (c *testCluster) leader(timeout time.Duration) *testNode {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var l *testNode
		n := 0
		for _, x := range c.nodes {
			if x.raft != nil && x.raft.State() == raft.Leader {
				l = x
				n++
			}
		}
		if n == 1 {
			return l
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %v", timeout)
	return nil
}

// applyN commits commands cmd-from .. cmd-(from+n-1) through whichever node
// leads. On a loaded machine (CI runs every package under -race on two
// cores) a leader can miss its lease and step down mid-batch; the commands
// whose outcome is unknown are sent again to the next leader, which the
// FSM's de-duplication makes safe.
func (c *testCluster) applyN(from, n int) {
	t := c.t
	t.Helper()
	todo := make([]string, 0, n)
	for i := from; i < from+n; i++ {
		todo = append(todo, fmt.Sprintf("cmd-%d", i))
	}
	c.apply(todo...)
}

func (c *testCluster) apply(cmds ...string) {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(cmds) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d commands not committed within 30s", len(cmds))
		}
		l := c.leader(10 * time.Second)
		fs := make([]raft.ApplyFuture, len(cmds))
		for i, cmd := range cmds {
			fs[i] = l.raft.Apply([]byte(cmd), 5*time.Second)
		}
		var again []string
		for i, f := range fs {
			switch err := f.Error(); err {
			case nil:
			case raft.ErrLeadershipLost, raft.ErrNotLeader, raft.ErrEnqueueTimeout, raft.ErrLeadershipTransferInProgress:
				again = append(again, cmds[i])
			default:
				t.Fatalf("apply %s: %v", cmds[i], err)
			}
		}
		if len(again) > 0 {
			t.Logf("%s stepped down with %d of %d commands unanswered; retrying them", l.id, len(again), len(cmds))
		}
		cmds = again
	}
}

// waitSame waits until every running node's FSM has applied want commands
// and all agree on the state.
func (c *testCluster) waitSame(want uint64, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		var sum0 uint64
		first := true
		for _, n := range c.nodes {
			if n.raft == nil {
				continue
			}
			cnt, sum := n.fsm.state()
			if cnt != want || (!first && sum != sum0) {
				ok = false
				break
			}
			sum0, first = sum, false
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, n := range c.nodes {
				if n.raft != nil {
					cnt, sum := n.fsm.state()
					c.t.Logf("%s: count %d sum %x", n.id, cnt, sum)
				}
			}
			c.t.Fatalf("replicas did not converge on %d commands within %v", want, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRaftClusterOverBadger runs a real three-node hashicorp/raft cluster
// on Badger stores: elect, apply 1000 commands, shut the leader down,
// measure the failover, restart the old leader from its directory and
// check it catches up to the same state.
func TestRaftClusterOverBadger(t *testing.T) {
	w := &syncWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))

	c := &testCluster{t: t, log: log}
	root := t.TempDir()
	for i := range 3 {
		id := raft.ServerID(fmt.Sprintf("node%d", i))
		c.nodes = append(c.nodes, &testNode{id: id, dir: filepath.Join(root, string(id))})
		c.conf.Servers = append(c.conf.Servers, raft.Server{
			Suffrage: raft.Voter, ID: id, Address: raft.ServerAddress(id),
		})
	}
	defer func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
	}()
	for _, n := range c.nodes {
		c.start(n)
	}

	start := time.Now()
	old := c.leader(10 * time.Second)
	t.Logf("first leader %s elected in %v", old.id, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	c.applyN(0, 1000)
	t.Logf("1000 commands applied in %v", time.Since(start).Round(time.Millisecond))
	c.waitSame(1000, 10*time.Second)
	old = c.leader(10 * time.Second) // the leader may have changed under load
	lastBefore, err := old.db.Group("meta").LastIndex()
	if err != nil {
		t.Fatal(err)
	}

	// Kill the leader. Failover: until another node is leader, and until
	// that leader has committed a command.
	killed := time.Now()
	c.stop(old)
	nl := c.leader(10 * time.Second)
	elected := time.Since(killed)
	c.apply("after-failover")
	serving := time.Since(killed)
	t.Logf("leader %s shut down; %s elected after %v, first command committed after %v",
		old.id, nl.id, elected.Round(time.Millisecond), serving.Round(time.Millisecond))
	if elected > 5*time.Second {
		t.Errorf("failover took %v", elected)
	}

	// More writes the old leader misses, then restart it from its dir.
	c.applyN(1001, 200)
	c.start(old)
	first, last := indexes(t, old.db.Group("meta"))
	if last < lastBefore {
		t.Fatalf("old leader's log lost entries: last index %d < %d before shutdown", last, lastBefore)
	}
	t.Logf("%s restarted with log %d..%d", old.id, first, last)
	c.waitSame(1201, 15*time.Second)
	if l := c.leader(5 * time.Second); l == nil {
		t.Fatal("no leader after rejoin")
	}
}
