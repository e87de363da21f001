package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/forward"
	"github.com/trident-broker/trident/cluster/groups"
	"github.com/trident-broker/trident/cluster/mux"
	"github.com/trident-broker/trident/cluster/quorum"
	"github.com/trident-broker/trident/exchange"
)

// Where a durable queue's messages live in a cluster (exchange.Cluster):
//
//   - A classic queue lives on its home node, the node it was declared
//     on. Every other node holds a proxy that reaches it over the home
//     node's internal AMQP listener (cluster/forward, mux stream "amqp").
//   - A quorum queue is a Raft group ("q/<id>") over the members chosen
//     when it was declared. The member that leads it holds the live queue,
//     whose messages go through the group's log (cluster/quorum); the
//     other nodes, members or not, hold proxies to the leader. On a change
//     of leader the new leader rebuilds the queue from its replica of the
//     state (every message flagged redelivered) and the others re-aim
//     their proxies.

// amqpStream is the mux stream of the internal AMQP listener.
const amqpStream = "amqp"

// quorumDefaultSize is x-quorum-initial-group-size's default, as RabbitMQ.
const quorumDefaultSize = 3

// membershipEvery is how often a quorum queue's leader checks its group's
// members against the cluster's.
const membershipEvery = 2 * time.Second

// readyTimeout bounds how long a declare waits for a new quorum queue's
// group to start and elect its first leader.
const readyTimeout = 15 * time.Second

// clusterQueues is the node's exchange.Cluster.
type clusterQueues struct {
	self    string
	log     *slog.Logger
	members func() []discovery.Member
	vhost   func(string) (*exchange.VHost, bool)
	mux     *mux.Mux
	groups  *groups.Host
	fwd     *forward.Forwarder
	store   quorum.Store // the node's message store: quorum FSMs keep their messages there

	mu     sync.Mutex
	quorum map[uint64]*quorumQueue // by queue id
	done   chan struct{}           // closed by close
}

// quorumQueue is a quorum queue's group on this node.
type quorumQueue struct {
	c     *clusterQueues
	q     *exchange.Queue
	group string

	mu     sync.Mutex
	r      *raft.Raft
	fsm    *quorum.FSM
	watch  *quorum.Watcher
	qlog   *quorum.Log // while leading
	ready  chan struct{}
	once   sync.Once
	closed bool
	// stopReconcile ends the membership loop of a leadership term.
	stopReconcile chan struct{}
	run           sync.Mutex // serialises follow
}

func newClusterQueues(self string, log *slog.Logger, members func() []discovery.Member, b *exchange.Broker, m *mux.Mux, h *groups.Host) *clusterQueues {
	c := &clusterQueues{self: self, log: log.With("component", "cluster-queues"), members: members, vhost: b.VHost, mux: m, groups: h,
		store: b.MessageStore(), quorum: map[uint64]*quorumQueue{}, done: make(chan struct{})}
	c.fwd = forward.New(func(ctx context.Context, addr string) (net.Conn, error) {
		d := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			d = time.Until(dl)
		}
		return m.Dial(addr, amqpStream, d)
	}, log)
	return c
}

func (c *clusterQueues) NodeName() string { return c.self }

// alive lists the alive members' names, sorted.
func (c *clusterQueues) alive() []string {
	var out []string
	for _, m := range c.members() {
		if m.Status == discovery.StatusAlive && m.Meta["raft"] != "" {
			out = append(out, m.Name)
		}
	}
	sort.Strings(out)
	return out
}

// QuorumMembers picks this node and the next alive nodes in name order.
func (c *clusterQueues) QuorumMembers(size int) []string {
	if size <= 0 {
		size = quorumDefaultSize
	}
	all := c.alive()
	out := []string{c.self}
	start := sort.SearchStrings(all, c.self)
	for i := 0; i < len(all) && len(out) < size; i++ {
		n := all[(start+i)%len(all)]
		if n != c.self {
			out = append(out, n)
		}
	}
	return out
}

// addrOf is a node's mux address, from its gossiped metadata.
func (c *clusterQueues) addrOf(node string) (string, error) {
	if node == c.self {
		return c.mux.Addr(), nil
	}
	for _, m := range c.members() {
		if m.Name == node && m.Meta["raft"] != "" {
			if m.Status != discovery.StatusAlive {
				return "", fmt.Errorf("node %s is %s", node, m.Status)
			}
			return m.Meta["raft"], nil
		}
	}
	return "", fmt.Errorf("node %s is unknown", node)
}

func (c *clusterQueues) Attach(q *exchange.Queue) {
	if !q.Replicated() {
		if q.Home() == c.self || q.Home() == "" {
			return
		}
		home := q.Home()
		q.BecomeProxy(c.fwd.Remote(q.VHost(), q.Name(), func() (string, error) { return c.addrOf(home) }))
		return
	}
	c.mu.Lock()
	qq, ok := c.quorum[q.ID()]
	if !ok {
		qq = &quorumQueue{c: c, q: q, group: "q/" + strconv.FormatUint(q.ID(), 16), ready: make(chan struct{})}
		c.quorum[q.ID()] = qq
	}
	c.mu.Unlock()
	if !ok {
		// Until a leader is known, and whenever another node leads, the
		// queue is a proxy to the leader.
		q.BecomeProxy(c.fwd.Remote(q.VHost(), q.Name(), qq.leaderAddr))
	}
	// Declared, recovered, or its members changed: run or stop this
	// node's member of the group accordingly.
	go qq.follow()
}

// leaderAddr is the Locator of a quorum queue's proxy: the leader's mux
// address if this node is a member and knows it, else any alive member
// (whose own proxy forwards on).
func (qq *quorumQueue) leaderAddr() (string, error) {
	qq.mu.Lock()
	r := qq.r
	qq.mu.Unlock()
	if r != nil {
		addr, id := r.LeaderWithID()
		if addr == "" {
			return "", errors.New("quorum queue has no leader")
		}
		if string(id) == qq.c.self {
			return "", errors.New("this node leads the queue")
		}
		return string(addr), nil
	}
	if slices.Contains(qq.q.Members(), qq.c.self) {
		// This node's member is starting: wait for it to learn the leader.
		return "", errors.New("quorum queue group starting here")
	}
	var last error
	for _, m := range qq.q.Members() {
		if m == qq.c.self {
			continue
		}
		a, err := qq.c.addrOf(m)
		if err == nil {
			return a, nil
		}
		last = err
	}
	if last == nil {
		last = errors.New("quorum queue has no members")
	}
	return "", last
}

// follow makes this node a member of the queue's group or not, as the
// queue's current members say. Calls are serialised.
func (qq *quorumQueue) follow() {
	qq.run.Lock()
	defer qq.run.Unlock()
	member := slices.Contains(qq.q.Members(), qq.c.self)
	qq.mu.Lock()
	running, closed := qq.r != nil, qq.closed
	qq.mu.Unlock()
	switch {
	case closed:
	case member && !running:
		qq.start()
	case !member && running:
		// Removed from the group by its leader: leave and drop the log.
		qq.c.log.Info("quorum queue member removed here", "queue", qq.q.Name())
		qq.leave(true)
		qq.q.BecomeProxy(qq.c.fwd.Remote(qq.q.VHost(), qq.q.Name(), qq.leaderAddr))
	case !member:
		qq.once.Do(func() { close(qq.ready) })
	}
}

// start runs this node's member of the group. A seed member bootstraps
// the group (once every seed's address is known, so that all seeds
// bootstrap the same configuration); a member added later waits for the
// leader to replicate to it.
func (qq *quorumQueue) start() {
	fsm, err := quorum.NewFSM(qq.c.store, qq.q.ID(), qq.c.log)
	if err != nil {
		qq.c.log.Error("quorum queue state unreadable; the group is not started", "queue", qq.q.Name(), "err", err)
		return
	}
	if fsm.Applied() == 0 {
		// No state record: a member upgraded from the builds that kept
		// the messages in memory (their snapshots are still read), or
		// whose store lost the queue. Raft will not restore its snapshot
		// (NoSnapshotRestoreOnStart), so the FSM does.
		err := restoreLocalSnapshot(qq.c.groups.SnapshotDir(qq.group), fsm)
		if errors.Is(err, quorum.ErrStateOnly) {
			// The snapshot holds the state alone and the store lost the
			// messages it belongs with: this member starts over empty, and
			// the leader sends it a full snapshot.
			qq.c.log.Error("quorum queue: the node's store lost this queue's messages; its member here starts over from the leader", "queue", qq.q.Name())
			if err := qq.c.groups.Drop(qq.group); err != nil {
				qq.c.log.Error("quorum queue: dropping the member's Raft state", "queue", qq.q.Name(), "err", err)
				return
			}
		} else if err != nil {
			qq.c.log.Error("quorum queue snapshot not restored", "queue", qq.q.Name(), "err", err)
		}
	}
	// The FSM's state is the node's store (its messages and a state
	// record): Raft replays what came after it, never a whole snapshot.
	// Entries are batches of up to 1 MiB: 256 trailing ones let a follower
	// that lags a little catch up from the log without a snapshot.
	// Its snapshots hold the state alone; the messages are streamed with
	// one only when it is sent to a member (quorum.SnapshotStore).
	snapDir := qq.c.groups.SnapshotDir(qq.group)
	r, err := qq.c.groups.Start(qq.group, fsm, groups.Options{SnapshotThreshold: 8192, TrailingLogs: 256, NoSnapshotRestoreOnStart: true, RetainSnapshots: 1,
		Snapshots: func(s raft.SnapshotStore) raft.SnapshotStore { return fsm.SnapshotStore(s, snapDir) }})
	if err != nil {
		qq.c.log.Error("quorum queue group did not start", "queue", qq.q.Name(), "group", qq.group, "err", err)
		return
	}
	if slices.Contains(qq.q.Seed(), qq.c.self) {
		if has, err := qq.c.groups.HasState(qq.group); err == nil && !has {
			qq.bootstrap(r)
		}
	}
	qq.mu.Lock()
	if qq.closed {
		qq.mu.Unlock()
		_ = qq.c.groups.Stop(qq.group)
		return
	}
	qq.r, qq.fsm = r, fsm
	qq.watch = quorum.Watch(r, 5*time.Second, qq.leadership)
	qq.mu.Unlock()
	go qq.compact(r, fsm)
	// Ready once any leader is known: a declaration returns when the queue
	// can take messages.
	go func() {
		deadline := time.Now().Add(readyTimeout)
		for time.Now().Before(deadline) {
			if addr, _ := r.LeaderWithID(); addr != "" {
				qq.once.Do(func() { close(qq.ready) })
				return
			}
			qq.mu.Lock()
			closed := qq.closed || qq.r != r
			qq.mu.Unlock()
			if closed {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// compactEvery is how often a member asks its FSM whether a snapshot is
// due (quorum.FSM.SnapshotDue).
const compactEvery = 10 * time.Second

// compact snapshots this member's FSM when that lets Raft drop a log much
// bigger than the queue (a backlog that was drained), so that the disk is
// given back; it runs while r is this member's Raft.
func (qq *quorumQueue) compact(r *raft.Raft, fsm *quorum.FSM) {
	t := time.NewTicker(compactEvery)
	defer t.Stop()
	for {
		select {
		case <-qq.c.done:
			return
		case <-t.C:
		}
		qq.mu.Lock()
		gone := qq.closed || qq.r != r
		qq.mu.Unlock()
		if gone {
			return
		}
		if fsm.SnapshotDue() {
			if err := r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
				qq.c.log.Warn("quorum queue snapshot", "queue", qq.q.Name(), "err", err)
			}
		}
	}
}

// restoreLocalSnapshot restores the newest snapshot in dir into fsm, if
// there is one.
func restoreLocalSnapshot(dir string, fsm *quorum.FSM) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return err
	}
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return err
	}
	return fsm.Restore(rc) // closes rc
}

// bootstrap gives the group its first configuration: the seed members.
func (qq *quorumQueue) bootstrap(r *raft.Raft) {
	deadline := time.Now().Add(readyTimeout)
	for {
		var servers []raft.Server
		var missing error
		for _, m := range qq.q.Seed() {
			addr, err := qq.c.addrOf(m)
			if err != nil {
				missing = err
				break
			}
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m), Address: raft.ServerAddress(addr)})
		}
		if missing == nil {
			if err := groups.Bootstrap(r, servers); err != nil {
				qq.c.log.Error("quorum queue group bootstrap failed", "queue", qq.q.Name(), "err", err)
			}
			return
		}
		if time.Now().After(deadline) {
			qq.c.log.Error("quorum queue group not bootstrapped: a seed member is unknown", "queue", qq.q.Name(), "err", missing)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reconcile runs while this node leads the group: it removes members
// whose node left the cluster and, while the group is smaller than it was
// declared, adds alive nodes that are not members, recording the members
// cluster-wide first so that a new member starts its side of the group.
func (qq *quorumQueue) reconcile(r *raft.Raft, stop <-chan struct{}) {
	t := time.NewTicker(membershipEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		f := r.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		var ids []string
		for _, s := range f.Configuration().Servers {
			ids = append(ids, string(s.ID))
		}
		status := map[string]discovery.Member{}
		for _, m := range qq.c.members() {
			status[m.Name] = m
		}
		changed := false
		for _, id := range ids {
			if m, ok := status[id]; ok && m.Status == discovery.StatusLeft && id != qq.c.self {
				if err := r.RemoveServer(raft.ServerID(id), 0, 0).Error(); err != nil {
					qq.c.log.Warn("quorum queue: remove member", "queue", qq.q.Name(), "member", id, "err", err)
					continue
				}
				qq.c.log.Info("quorum queue shrunk: member left the cluster", "queue", qq.q.Name(), "member", id)
				ids = slices.DeleteFunc(ids, func(s string) bool { return s == id })
				changed = true
			}
		}
		target := max(len(qq.q.Seed()), 1)
		for _, cand := range qq.c.alive() {
			if len(ids) >= target {
				break
			}
			if slices.Contains(ids, cand) {
				continue
			}
			addr, err := qq.c.addrOf(cand)
			if err != nil {
				continue
			}
			next := append(slices.Clone(ids), cand)
			if err := qq.setMembers(next); err != nil {
				qq.c.log.Warn("quorum queue: record members", "queue", qq.q.Name(), "err", err)
				break
			}
			if err := r.AddVoter(raft.ServerID(cand), raft.ServerAddress(addr), 0, 10*time.Second).Error(); err != nil {
				qq.c.log.Warn("quorum queue: add member", "queue", qq.q.Name(), "member", cand, "err", err)
				break
			}
			qq.c.log.Info("quorum queue grown", "queue", qq.q.Name(), "member", cand)
			ids, changed = next, true
		}
		if changed || !slices.Equal(sorted(ids), sorted(qq.q.Members())) {
			if err := qq.setMembers(ids); err != nil {
				qq.c.log.Warn("quorum queue: record members", "queue", qq.q.Name(), "err", err)
			}
		}
	}
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
}

// setMembers records the group's members in the queue's definition.
func (qq *quorumQueue) setMembers(ids []string) error {
	v, ok := qq.c.vhost(qq.q.VHost())
	if !ok {
		return errors.New("vhost gone")
	}
	return v.SetQueueMembers(qq.q.Name(), qq.q.ID(), sorted(ids))
}

// leadership switches the queue between local (leading) and proxy.
func (qq *quorumQueue) leadership(leader bool) {
	qq.mu.Lock()
	if qq.closed || qq.r == nil {
		qq.mu.Unlock()
		return
	}
	old := qq.qlog
	qq.qlog = nil
	if leader {
		l, err := quorum.New(qq.r, quorum.Options{Logger: qq.c.log, Applied: qq.q.LogApplied})
		if err != nil {
			qq.mu.Unlock()
			qq.c.log.Error("quorum queue log", "queue", qq.q.Name(), "err", err)
			return
		}
		qq.qlog = l
	}
	fsm, newLog, r := qq.fsm, qq.qlog, qq.r
	if qq.stopReconcile != nil {
		close(qq.stopReconcile)
		qq.stopReconcile = nil
	}
	if leader {
		qq.stopReconcile = make(chan struct{})
		go qq.reconcile(r, qq.stopReconcile)
	}
	qq.mu.Unlock()
	if leader {
		qq.c.log.Info("quorum queue leader here", "vhost", qq.q.VHost(), "queue", qq.q.Name())
		var st exchange.LogState
		for _, g := range fsm.Groups() {
			st.Groups = append(st.Groups, exchange.LogGroup{Top: g.Top, Count: g.Count, Bytes: g.Bytes, MaxKey: g.MaxKey})
		}
		st.Returns = fsm.Returns
		st.HeldQID = quorum.HoldQID(qq.q.ID())
		qq.q.BecomeLocal(newLog, st)
		qq.once.Do(func() { close(qq.ready) })
	} else {
		qq.q.BecomeProxy(qq.c.fwd.Remote(qq.q.VHost(), qq.q.Name(), qq.leaderAddr))
	}
	if old != nil {
		_ = old.Close()
	}
}

func (c *clusterQueues) Detach(q *exchange.Queue) {
	if !q.Replicated() {
		return
	}
	c.mu.Lock()
	qq := c.quorum[q.ID()]
	delete(c.quorum, q.ID())
	c.mu.Unlock()
	if qq == nil {
		return
	}
	go qq.stop(true)
}

// stop closes this node's side of the queue for good (the queue was
// deleted, or the node shuts down); drop also deletes the group's data.
func (qq *quorumQueue) stop(drop bool) {
	qq.mu.Lock()
	qq.closed = true
	qq.mu.Unlock()
	qq.run.Lock()
	defer qq.run.Unlock()
	qq.leave(drop)
}

// leave stops this node's member of the group; drop also deletes its log
// and snapshots.
func (qq *quorumQueue) leave(drop bool) {
	qq.mu.Lock()
	w, l, r, fsm := qq.watch, qq.qlog, qq.r, qq.fsm
	qq.watch, qq.qlog, qq.r, qq.fsm = nil, nil, nil, nil
	if qq.stopReconcile != nil {
		close(qq.stopReconcile)
		qq.stopReconcile = nil
	}
	qq.mu.Unlock()
	if w != nil {
		w.Stop()
	}
	if r != nil {
		// Raft first: its shutdown fails the appends still waiting for a
		// commit (a group that lost its majority commits nothing), which
		// the log's Close would otherwise wait for.
		var err error
		if drop {
			err = qq.c.groups.Drop(qq.group)
		} else {
			err = qq.c.groups.Stop(qq.group)
		}
		if err != nil {
			qq.c.log.Warn("quorum queue group stop", "group", qq.group, "err", err)
		}
	}
	if l != nil {
		_ = l.Close()
	}
	if drop && fsm != nil {
		// Raft is down: nothing applies any more.
		if err := fsm.Drop(); err != nil {
			qq.c.log.Warn("quorum queue messages not dropped", "queue", qq.q.Name(), "err", err)
		}
	}
}

// Remote implements exchange.Cluster: a proxy's way to queue on node.
func (c *clusterQueues) Remote(vhost, queue, node string) exchange.Remote {
	return c.fwd.Remote(vhost, queue, func() (string, error) { return c.addrOf(node) })
}

// StreamRemote implements exchange.Cluster: a consumer's way to a
// clustered stream this node is not a member of, through the first of its
// members (in their recorded order) that is alive; when that one goes, the
// consumer moves to the next.
func (c *clusterQueues) StreamRemote(q *exchange.Queue) exchange.StreamRemote {
	locate := func() (string, error) {
		last := errors.New("stream has no members")
		for _, m := range q.Members() {
			if m == c.self {
				continue
			}
			a, err := c.addrOf(m)
			if err == nil {
				return a, nil
			}
			last = err
		}
		return "", last
	}
	r, _ := c.fwd.Remote(q.VHost(), q.Name(), locate).(exchange.StreamRemote)
	return r
}

// WaitReady waits until a new quorum queue's group has elected a leader.
func (c *clusterQueues) WaitReady(q *exchange.Queue) error {
	c.mu.Lock()
	qq := c.quorum[q.ID()]
	c.mu.Unlock()
	if qq == nil {
		return nil
	}
	select {
	case <-qq.ready:
		return nil
	case <-time.After(readyTimeout):
		return errors.New("no leader elected in time")
	}
}

// Leaders lists the quorum queues this node leads, for /api/nodes.
func (c *clusterQueues) Leaders() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, qq := range c.quorum {
		qq.mu.Lock()
		if qq.qlog != nil {
			out = append(out, qq.q.VHost()+"/"+qq.q.Name())
		}
		qq.mu.Unlock()
	}
	sort.Strings(out)
	return out
}

// close stops every group (keeping their data) and the forwarder.
func (c *clusterQueues) close() {
	close(c.done)
	c.mu.Lock()
	qs := make([]*quorumQueue, 0, len(c.quorum))
	for _, qq := range c.quorum {
		qs = append(qs, qq)
	}
	c.mu.Unlock()
	for _, qq := range qs {
		qq.stop(false)
	}
	c.fwd.Close()
}

// startClusterQueues places the broker's durable queues in the cluster and
// serves peers' forwarded traffic on the mux's internal AMQP stream.
func (n *Node) startClusterQueues(f *clusterFrontEnd) {
	cq := newClusterQueues(n.nodeName(), n.log, f.m.Members, n.broker, f.raft.mux, f.raft.host)
	f.queues = cq
	n.broker.SetCluster(cq)
	go n.forgetGoneNodes(cq)
	if n.amqp != nil {
		ln, err := f.raft.mux.Listener(amqpStream)
		if err != nil {
			n.log.Error("internal amqp listener", "err", err)
			return
		}
		go func() {
			if err := n.amqp.ServeInternal(ln); err != nil {
				n.log.Debug("internal amqp listener stopped", "err", err)
			}
		}()
	}
}

// QueueNode implements web.QueueLocator: a classic queue's home, a quorum
// queue's leader as this node knows it, and its members.
func (v clusterView) QueueNode(q *exchange.Queue) (string, []string) {
	f := v.n.clusterFront()
	if f == nil || f.queues == nil {
		return "", nil
	}
	if !q.Replicated() {
		return q.Home(), nil
	}
	return f.queues.leaderOf(q), f.queues.membersOf(q)
}

// membersOf is a quorum queue's group as its Raft configuration has it
// when this node is a member (the recorded members run ahead of it while
// a member is being added), else as recorded.
func (c *clusterQueues) membersOf(q *exchange.Queue) []string {
	c.mu.Lock()
	qq := c.quorum[q.ID()]
	c.mu.Unlock()
	if qq != nil {
		qq.mu.Lock()
		r := qq.r
		qq.mu.Unlock()
		if r != nil {
			if f := r.GetConfiguration(); f.Error() == nil {
				var out []string
				for _, s := range f.Configuration().Servers {
					out = append(out, string(s.ID))
				}
				if len(out) > 0 {
					return sorted(out)
				}
			}
		}
	}
	return q.Members()
}

// leaderOf is the name of a quorum queue's leader, "" if unknown here.
func (c *clusterQueues) leaderOf(q *exchange.Queue) string {
	c.mu.Lock()
	qq := c.quorum[q.ID()]
	c.mu.Unlock()
	if qq == nil {
		return ""
	}
	qq.mu.Lock()
	r := qq.r
	qq.mu.Unlock()
	if r == nil {
		return ""
	}
	_, id := r.LeaderWithID()
	return string(id)
}

// forgetGoneNodes runs on every node; the one leading the metadata group
// removes, cluster-wide, the non-durable exchanges and queues of nodes
// that died or left (RabbitMQ deletes a node's transient queues with it).
func (n *Node) forgetGoneNodes(cq *clusterQueues) {
	t := time.NewTicker(membershipEvery)
	defer t.Stop()
	for {
		select {
		case <-cq.done:
			return
		case <-t.C:
		}
		if n.MetaLeader() != cq.self {
			continue
		}
		for _, m := range cq.members() {
			if m.Status == discovery.StatusAlive || m.Name == cq.self {
				continue
			}
			if k := n.broker.ForgetNode(m.Name); k > 0 {
				cq.log.Info("removed the transient queues and exchanges of a node that is gone", "node", m.Name, "status", m.Status.String(), "objects", k)
			}
		}
	}
}
