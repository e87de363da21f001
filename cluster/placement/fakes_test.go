package placement

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/drain"
	"github.com/trident-broker/trident/cluster/forward"
	"github.com/trident-broker/trident/cluster/groups"
	"github.com/trident-broker/trident/cluster/meta"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// The fakes: membership (fakeMembers), Raft groups over
// raft.NewInmemTransport (fakeGroups), the core's queues (fakeQueue),
// its topology (fakeTopology) and the forwarder (fakeRemotes).

// fakeNet links the in-memory transports of one group's members.
type fakeNet struct {
	mu    sync.Mutex
	trans map[string]map[string]*raft.InmemTransport // group → node address → transport
}

func (n *fakeNet) join(group, addr string) *raft.InmemTransport {
	_, tr := raft.NewInmemTransport(raft.ServerAddress(addr))
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.trans == nil {
		n.trans = map[string]map[string]*raft.InmemTransport{}
	}
	m := n.trans[group]
	if m == nil {
		m = map[string]*raft.InmemTransport{}
		n.trans[group] = m
	}
	for a, o := range m {
		tr.Connect(raft.ServerAddress(a), o)
		o.Connect(raft.ServerAddress(addr), tr)
	}
	m[addr] = tr
	return tr
}

func (n *fakeNet) leave(group, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.trans[group]
	tr := m[addr]
	delete(m, addr)
	for _, o := range m {
		o.Disconnect(raft.ServerAddress(addr))
	}
	if tr != nil {
		tr.DisconnectAll()
	}
}

// fakeGroups is one node's Groups: its Raft stores outlive Stop and go
// with Drop, as groups.Host's do.
type fakeGroups struct {
	net        *fakeNet
	node, addr string
	dir        string

	mu      sync.Mutex
	running map[string]*raft.Raft
	stores  map[string]*raft.InmemStore
	stops   []string
	drops   []string
	// lags: FollowerLag's answers by group and address; a follower not
	// in it is caught up, as of now.
	lags map[string]fakeLag
}

type fakeLag struct {
	lag uint64
	at  time.Time
}

// FollowerLag implements FollowerLags.
func (g *fakeGroups) FollowerLag(name string, addr raft.ServerAddress) (uint64, time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l, ok := g.lags[name+" "+string(addr)]; ok {
		return l.lag, l.at, true
	}
	return 0, time.Now(), true
}

func (g *fakeGroups) setLag(name, addr string, lag uint64, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lags == nil {
		g.lags = map[string]fakeLag{}
	}
	g.lags[name+" "+addr] = fakeLag{lag: lag, at: at}
}

func newFakeGroups(t *testing.T, net *fakeNet, node, addr string) *fakeGroups {
	return &fakeGroups{net: net, node: node, addr: addr, dir: t.TempDir(),
		running: map[string]*raft.Raft{}, stores: map[string]*raft.InmemStore{}}
}

func (g *fakeGroups) SnapshotDir(name string) string {
	return filepath.Join(g.dir, url.PathEscape(name))
}

func (g *fakeGroups) Start(name string, fsm raft.FSM, o groups.Options) (*raft.Raft, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running[name] != nil {
		return nil, groups.ErrRunning
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(g.node)
	// Fast, but not so fast that a loaded machine (-race, other tests)
	// makes leadership churn.
	rc.HeartbeatTimeout = 200 * time.Millisecond
	rc.ElectionTimeout = 200 * time.Millisecond
	rc.LeaderLeaseTimeout = 100 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	rc.Logger = hclog.NewNullLogger()
	rc.SnapshotThreshold, rc.TrailingLogs = o.SnapshotThreshold, o.TrailingLogs
	rc.NoSnapshotRestoreOnStart = o.NoSnapshotRestoreOnStart
	st := g.stores[name]
	if st == nil {
		st = raft.NewInmemStore()
		g.stores[name] = st
	}
	files, err := raft.NewFileSnapshotStoreWithLogger(g.SnapshotDir(name), 1, hclog.NewNullLogger())
	if err != nil {
		return nil, err
	}
	var snaps raft.SnapshotStore = files
	if o.Snapshots != nil {
		snaps = o.Snapshots(files)
	}
	tr := g.net.join(name, g.addr)
	r, err := raft.NewRaft(rc, fsm, st, st, snaps, tr)
	if err != nil {
		g.net.leave(name, g.addr)
		return nil, err
	}
	g.running[name] = r
	return r, nil
}

// CampaignWhenReady campaigns at once: the fake network's groups are
// reachable as soon as they start, and a vote that fails is retried on
// the fake timers.
func (g *fakeGroups) CampaignWhenReady(name string, r *raft.Raft, servers []raft.Server, timeout time.Duration) error {
	return groups.Campaign(r)
}

func (g *fakeGroups) Stop(name string) error {
	g.mu.Lock()
	r := g.running[name]
	delete(g.running, name)
	if r != nil {
		g.stops = append(g.stops, name)
	}
	g.mu.Unlock()
	if r == nil {
		return groups.ErrNotRunning
	}
	err := r.Shutdown().Error()
	g.net.leave(name, g.addr)
	return err
}

func (g *fakeGroups) Drop(name string) error {
	if err := g.Stop(name); err != nil && !errors.Is(err, groups.ErrNotRunning) {
		return err
	}
	g.mu.Lock()
	delete(g.stores, name)
	g.drops = append(g.drops, name)
	g.mu.Unlock()
	return os.RemoveAll(g.SnapshotDir(name))
}

func (g *fakeGroups) HasState(name string) (bool, error) {
	g.mu.Lock()
	st := g.stores[name]
	g.mu.Unlock()
	if st == nil {
		return false, nil
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(g.SnapshotDir(name), 1, hclog.NewNullLogger())
	if err != nil {
		return false, err
	}
	return raft.HasExistingState(st, st, snaps)
}

func (g *fakeGroups) raft(name string) *raft.Raft {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[name]
}

func (g *fakeGroups) dropped(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.drops, name)
}

func (g *fakeGroups) stopped(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.stops, name)
}

// fakeMembers is the membership every node sees; set tells each Placer,
// as discovery's OnEvent does.
type fakeMembers struct {
	mu      sync.Mutex
	members map[string]discovery.Member
	notify  []func(discovery.Event)
}

func (m *fakeMembers) Members() []discovery.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]discovery.Member, 0, len(m.members))
	for _, mb := range m.members {
		out = append(out, mb)
	}
	slices.SortFunc(out, func(a, b discovery.Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// drain marks name drained (maintenance mode) in its gossiped metadata.
func (m *fakeMembers) drain(name string) {
	m.mu.Lock()
	mb := m.members[name]
	mb.Meta = maps.Clone(mb.Meta)
	mb.Meta[drain.MetaKey] = "drained"
	m.members[name] = mb
	m.mu.Unlock()
}

func (m *fakeMembers) set(name, raftAddr string, st discovery.Status) {
	mb := discovery.Member{Name: name, Status: st, Meta: map[string]string{meta.RaftMetaKey: raftAddr}}
	m.mu.Lock()
	if m.members == nil {
		m.members = map[string]discovery.Member{}
	}
	m.members[name] = mb
	fns := slices.Clone(m.notify)
	m.mu.Unlock()
	kind := discovery.EventJoin
	if st != discovery.StatusAlive {
		kind = discovery.EventLeave
	}
	for _, fn := range fns {
		fn(discovery.Event{Kind: kind, Member: mb})
	}
}

// setMeta sets key of name's gossiped metadata.
func (m *fakeMembers) setMeta(name, key, v string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[name]
	meta := maps.Clone(mb.Meta)
	meta[key] = v
	mb.Meta = meta
	m.members[name] = mb
}

func (m *fakeMembers) subscribe(fn func(discovery.Event)) {
	m.mu.Lock()
	m.notify = append(m.notify, fn)
	m.mu.Unlock()
}

// fakeQueue is one node's copy of a queue.
type fakeQueue struct {
	id          uint64
	vhost, name string
	home        string
	replicated  bool
	seed        []string
	members     atomic.Pointer[[]string]

	mu      sync.Mutex
	state   string // "", "proxy" or "local"
	remote  *fakeRemote
	locals  int // BecomeLocal calls
	proxies int // BecomeProxy calls
}

func (q *fakeQueue) ID() uint64        { return q.id }
func (q *fakeQueue) VHost() string     { return q.vhost }
func (q *fakeQueue) Name() string      { return q.name }
func (q *fakeQueue) Replicated() bool  { return q.replicated }
func (q *fakeQueue) Home() string      { return q.home }
func (q *fakeQueue) IsStream() bool    { return false }
func (q *fakeQueue) Seed() []string    { return q.seed }
func (q *fakeQueue) LogApplied(uint64) {}
func (q *fakeQueue) LogStored(uint64)  {}
func (q *fakeQueue) Members() []string {
	if p := q.members.Load(); p != nil {
		return *p
	}
	return nil
}
func (q *fakeQueue) setMembers(ms []string) { ms = slices.Clone(ms); q.members.Store(&ms) }

func (q *fakeQueue) BecomeProxy(r exchange.Remote) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.state, q.remote = "proxy", r.(*fakeRemote)
	q.proxies++
}

func (q *fakeQueue) BecomeLocal(log exchange.MessageLog, st exchange.LogState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if log == nil || st.HeldQID == 0 {
		panic("BecomeLocal without a log")
	}
	q.state, q.remote = "local", nil
	q.locals++
}

func (q *fakeQueue) get() (state string, r *fakeRemote) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state, q.remote
}

// fakeRemote is a proxy that goes nowhere: tests read its Locator.
type fakeRemote struct {
	vhost, queue string
	locate       forward.Locator
}

func (r *fakeRemote) Publish(m *exchange.Message, done func(error)) {
	go done(errors.New("fake remote"))
}
func (r *fakeRemote) Consume(int, func(*exchange.Message, uint64, bool), func()) {}
func (r *fakeRemote) StopConsuming()                                             {}
func (r *fakeRemote) Ack(uint64)                                                 {}
func (r *fakeRemote) Nack(uint64, bool)                                          {}
func (r *fakeRemote) Get(bool) (*exchange.Message, uint64, bool, int, bool, error) {
	return nil, 0, false, 0, false, errors.New("fake remote")
}
func (r *fakeRemote) Purge() (int, error)      { return 0, errors.New("fake remote") }
func (r *fakeRemote) Count() (int, int, error) { return 0, 0, errors.New("fake remote") }
func (r *fakeRemote) Close()                   {}

type fakeRemotes struct{ closed atomic.Bool }

func (f *fakeRemotes) Remote(vhost, queue string, locate forward.Locator) exchange.Remote {
	return &fakeRemote{vhost: vhost, queue: queue, locate: locate}
}
func (f *fakeRemotes) Close() { f.closed.Store(true) }

// tnode is one node of a fake cluster.
type tnode struct {
	name, addr string
	groups     *fakeGroups
	remotes    *fakeRemotes
	placer     *Placer
	mu         sync.Mutex
	queues     map[uint64]*fakeQueue
}

func (n *tnode) queue(id uint64) *fakeQueue {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.queues[id]
}

// fakeCluster is nodes sharing a membership and a topology: a members
// change recorded on one reaches every node's copy of the queue, and
// each node's Placer is told (Attach), as the metadata group does.
type fakeCluster struct {
	t       *testing.T
	net     fakeNet
	members fakeMembers
	nodes   map[string]*tnode

	mu         sync.Mutex
	setMembers int
	// topo orders SetQueueMembers and declare, as the metadata log orders
	// a members record and a node's learning of the queue: a node that
	// learns of it gets the members of the last record, or the record
	// reaches it.
	topo sync.Mutex
}

func newFakeCluster(t *testing.T, names ...string) *fakeCluster {
	c := &fakeCluster{t: t, nodes: map[string]*tnode{}}
	for _, name := range names {
		c.add(name)
	}
	return c
}

// add makes a node (not yet a member: see join).
func (c *fakeCluster) add(name string) *tnode {
	n := &tnode{name: name, addr: "addr-" + name, remotes: &fakeRemotes{}, queues: map[uint64]*fakeQueue{}}
	n.groups = newFakeGroups(c.t, &c.net, name, n.addr)
	n.placer = New(Config{Self: name, Addr: func() string { return n.addr }, Members: c.members.Members,
		Groups: n.groups, Remotes: n.remotes, Store: store.NewMemory(), Topology: c,
		// No retries and no resync within a test: what happens, events
		// made happen.
		RetryEvery: time.Hour, ResyncEvery: time.Hour, ReadyTimeout: 10 * time.Second, BarrierTimeout: 2 * time.Second})
	c.members.subscribe(n.placer.Notify)
	c.mu.Lock()
	c.nodes[name] = n
	c.mu.Unlock()
	c.t.Cleanup(n.placer.Close)
	c.members.set(name, n.addr, discovery.StatusAlive)
	return n
}

func (c *fakeCluster) node(name string) *tnode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

// all lists the nodes, by name.
func (c *fakeCluster) all() []*tnode {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*tnode, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *tnode) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return out
}

// SetQueueMembers implements Topology.
func (c *fakeCluster) SetQueueMembers(vhost, name string, id uint64, members []string) error {
	c.mu.Lock()
	c.setMembers++
	c.mu.Unlock()
	c.topo.Lock()
	defer c.topo.Unlock()
	for _, n := range c.all() {
		if q := n.queue(id); q != nil {
			q.setMembers(members)
			n.placer.attach(q)
		}
	}
	return nil
}

// declare makes quorum queue id on the nodes named (every node if none),
// seeded with seed.
func (c *fakeCluster) declare(id uint64, seed []string, on ...string) {
	if len(on) == 0 {
		for _, n := range c.all() {
			on = append(on, n.name)
		}
	}
	c.topo.Lock()
	defer c.topo.Unlock()
	for _, name := range on {
		n := c.node(name)
		// A node that learns of the queue late learns its seed and current
		// members.
		ms := seed
		for _, o := range c.all() {
			if oq := o.queue(id); oq != nil {
				ms, seed = oq.Members(), oq.Seed()
				break
			}
		}
		q := &fakeQueue{id: id, vhost: "v", name: fmt.Sprintf("q%d", id), replicated: true, seed: slices.Clone(seed)}
		q.setMembers(ms)
		n.mu.Lock()
		n.queues[id] = q
		n.mu.Unlock()
		n.placer.attach(q)
	}
}

// leader waits until exactly one node holds queue id as local and every
// other node that has it as a proxy, and returns that node.
func (c *fakeCluster) leader(id uint64) *tnode {
	c.t.Helper()
	var lead *tnode
	eventually(c.t, 10*time.Second, func() bool {
		lead = nil
		for _, n := range c.all() {
			q := n.queue(id)
			if q == nil {
				continue
			}
			switch st, _ := q.get(); st {
			case "local":
				if lead != nil {
					return false
				}
				lead = n
			case "proxy":
			default:
				return false
			}
		}
		if lead == nil || lead.placer.queue(id).raft().State() != raft.Leader {
			return false
		}
		// Every member knows it too (QuorumCritical on a follower reads
		// the leader's gossip by the leader its raft names).
		for _, n := range c.all() {
			qg := n.placer.queue(id)
			if n.queue(id) == nil || qg == nil || qg.raft() == nil {
				continue
			}
			if _, lid := qg.raft().LeaderWithID(); string(lid) != lead.name {
				return false
			}
		}
		return true
	}, "one leader for queue %d, known to every member", id)
	return lead
}

// config is the group's Raft configuration on n, sorted.
func config(t *testing.T, n *tnode, id uint64) []string {
	t.Helper()
	r := n.groups.raft(GroupName(id))
	if r == nil {
		return nil
	}
	ids, err := servers(r, false)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func eventually(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: "+format, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
