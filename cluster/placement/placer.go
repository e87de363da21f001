package placement

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/drain"
	"github.com/trident-broker/trident/cluster/meta"
	"github.com/trident-broker/trident/cluster/quorum"
	"github.com/trident-broker/trident/exchange"
)

// Errors.
var (
	// ErrNoVHost is returned by BrokerTopology for a vhost that is gone.
	ErrNoVHost = errors.New("placement: vhost gone")
	// ErrNotReady is returned by WaitReady when no leader was elected
	// in time.
	ErrNotReady = errors.New("placement: no leader elected in time")
)

// DefaultSize is x-quorum-initial-group-size's default, as RabbitMQ.
const DefaultSize = 3

// Config configures a Placer. Zero durations take the defaults below.
type Config struct {
	Self    string        // this node's name: its raft.ServerID in every group
	Addr    func() string // this node's mux address
	Members func() []discovery.Member
	Groups  Groups
	Remotes Remotes
	// Store is the node's message store: quorum FSMs keep their messages
	// there.
	Store    quorum.Store
	Topology Topology
	Log      *slog.Logger
	// Flags reports whether a feature flag is enabled in the cluster
	// (nil: every flag is).
	Flags func(name string) bool

	// ReadyTimeout bounds how long a new group waits for its first
	// leader and for its seeds' addresses (15s).
	ReadyTimeout time.Duration
	// RetryEvery is how soon a failed reconcile pass is retried (2s).
	RetryEvery time.Duration
	// ResyncEvery is the slow safety resync of the event-driven loops
	// (30s).
	ResyncEvery time.Duration
	// CompactEvery is how often a member asks its FSM whether a snapshot
	// is due (30s: one timer per quorum queue member, most of them idle).
	CompactEvery time.Duration
	// BarrierTimeout is quorum.Watch's (5s).
	BarrierTimeout time.Duration
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadyTimeout, 15*time.Second)
	def(&c.RetryEvery, 2*time.Second)
	def(&c.ResyncEvery, 30*time.Second)
	def(&c.CompactEvery, 30*time.Second)
	def(&c.BarrierTimeout, 5*time.Second)
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Placer is the node's exchange.Cluster. Its methods are safe for
// concurrent use.
type Placer struct {
	c   Config
	log *slog.Logger

	mu      sync.Mutex
	quorum  map[uint64]*quorumQueue // by queue id
	changed chan struct{}           // closed and replaced by Notify
	done    chan struct{}           // closed by Close
	closed  bool

	// What WatchCatchingUp gossips (ops.go). cuMu is held while the
	// callback runs, so that announcements go out in order.
	cuMu      sync.Mutex
	cuChanged func(names []string)
	cuLast    []string
	cuAdding  map[string]int // members this node is adding to its groups, with how many adds are under way
}

var _ exchange.Cluster = (*Placer)(nil)

// New returns a Placer with no queue attached.
func New(c Config) *Placer {
	c = c.withDefaults()
	return &Placer{c: c, log: c.Log.With("component", "cluster-queues"),
		quorum: map[uint64]*quorumQueue{}, changed: make(chan struct{}), done: make(chan struct{})}
}

// Notify tells the Placer that membership changed (wire it to
// discovery's OnEvent): every reconciler and waiter looks again.
func (p *Placer) Notify(discovery.Event) {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// changes is closed by the next Notify. Take it before reading
// membership, so that a change made after the read is not missed.
func (p *Placer) changes() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// NodeName implements exchange.Cluster.
func (p *Placer) NodeName() string { return p.c.Self }

// FeatureEnabled reports whether the cluster has enabled the feature
// flag name (the core asks before it writes what an older node cannot
// read).
func (p *Placer) FeatureEnabled(name string) bool { return p.c.Flags == nil || p.c.Flags(name) }

// alive lists the alive members with a Raft address, sorted, and which
// of them are drained (in maintenance mode).
func (p *Placer) alive() (names []string, drained map[string]bool) {
	for _, m := range p.c.Members() {
		if m.Status == discovery.StatusAlive && m.Meta[meta.RaftMetaKey] != "" {
			names = append(names, m.Name)
			if m.Meta[drain.MetaKey] != "" {
				if drained == nil {
					drained = map[string]bool{}
				}
				drained[m.Name] = true
			}
		}
	}
	sort.Strings(names)
	return names, drained
}

// QuorumMembers implements exchange.Cluster: this node and the next
// alive nodes in name order. Drained nodes (maintenance mode) come last,
// as RabbitMQ places no new queue's leader on a node being drained: the
// first member stands for election first (bootstrap), so a drained
// declaring node is still a member but not the first, and a drained
// other node is taken only when there are not enough others.
func (p *Placer) QuorumMembers(size int) []string {
	if size <= 0 {
		size = DefaultSize
	}
	all, drained := p.alive()
	var ready, later []string
	if drained[p.c.Self] {
		later = append(later, p.c.Self)
	} else {
		ready = append(ready, p.c.Self)
	}
	start := sort.SearchStrings(all, p.c.Self)
	for i := 0; i < len(all); i++ {
		n := all[(start+i)%len(all)]
		switch {
		case n == p.c.Self:
		case drained[n]:
			later = append(later, n)
		default:
			ready = append(ready, n)
		}
	}
	out := append(ready, later...)
	if len(out) > size {
		out = out[:size]
	}
	if !slices.Contains(out, p.c.Self) { // the declaring node stays a member
		out[len(out)-1] = p.c.Self
	}
	return out
}

// addrOf is a node's mux address, from its gossiped metadata.
func (p *Placer) addrOf(node string) (string, error) {
	if node == p.c.Self {
		return p.c.Addr(), nil
	}
	for _, m := range p.c.Members() {
		if m.Name == node && m.Meta[meta.RaftMetaKey] != "" {
			if m.Status != discovery.StatusAlive {
				return "", fmt.Errorf("node %s is %s", node, m.Status)
			}
			return m.Meta[meta.RaftMetaKey], nil
		}
	}
	return "", fmt.Errorf("node %s is unknown", node)
}

// Attach implements exchange.Cluster.
func (p *Placer) Attach(q *exchange.Queue) { p.attach(q) }

func (p *Placer) attach(q Queue) {
	if !q.Replicated() {
		if q.Home() == p.c.Self || q.Home() == "" {
			return
		}
		home := q.Home()
		q.BecomeProxy(p.c.Remotes.Remote(q.VHost(), q.Name(), func() (string, error) { return p.addrOf(home) }))
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	qq, ok := p.quorum[q.ID()]
	if !ok {
		qq = &quorumQueue{p: p, q: q, group: GroupName(q.ID()), ready: make(chan struct{})}
		p.quorum[q.ID()] = qq
	}
	p.mu.Unlock()
	if !ok {
		// Until a leader is known, and whenever another node leads, the
		// queue is a proxy to the leader.
		q.BecomeProxy(p.proxy(qq))
	}
	// Declared, recovered, or its members changed: run or stop this
	// node's member of the group accordingly.
	go qq.follow()
}

// GroupName is the Raft group of the replicated queue with id.
func GroupName(id uint64) string { return "q/" + strconv.FormatUint(id, 16) }

// proxy reaches qq's leader.
func (p *Placer) proxy(qq *quorumQueue) exchange.Remote {
	return p.c.Remotes.Remote(qq.q.VHost(), qq.q.Name(), qq.leaderAddr)
}

// Detach implements exchange.Cluster: a deleted queue's group stops here
// and its data goes.
func (p *Placer) Detach(q *exchange.Queue) { p.detach(q) }

func (p *Placer) detach(q Queue) {
	if !q.Replicated() {
		return
	}
	p.mu.Lock()
	qq := p.quorum[q.ID()]
	delete(p.quorum, q.ID())
	p.mu.Unlock()
	if qq == nil {
		return
	}
	go qq.stop(true)
}

// Remote implements exchange.Cluster: a proxy's way to queue on node.
func (p *Placer) Remote(vhost, queue, node string) exchange.Remote {
	return p.c.Remotes.Remote(vhost, queue, func() (string, error) { return p.addrOf(node) })
}

// StreamRemote implements exchange.Cluster: a consumer's way to a
// clustered stream this node is not a member of, through the first of its
// members (in their recorded order) that is alive; when that one goes, the
// consumer moves to the next.
func (p *Placer) StreamRemote(q *exchange.Queue) exchange.StreamRemote {
	locate := func() (string, error) {
		last := errors.New("stream has no members")
		for _, m := range q.Members() {
			if m == p.c.Self {
				continue
			}
			a, err := p.addrOf(m)
			if err == nil {
				return a, nil
			}
			last = err
		}
		return "", last
	}
	r, _ := p.c.Remotes.Remote(q.VHost(), q.Name(), locate).(exchange.StreamRemote)
	return r
}

// StreamHomeRemote implements exchange.StreamHomer: a single-active
// consumer's way to q's home (StreamHome), looked up at each connection,
// this node included: after the home's death, a member on the next home
// joins its group there through its own node.
func (p *Placer) StreamHomeRemote(q *exchange.Queue) exchange.StreamRemote {
	locate := func() (string, error) {
		h := p.StreamHome(q)
		if h == "" {
			return "", errors.New("stream has no member alive")
		}
		return p.addrOf(h)
	}
	r, _ := p.c.Remotes.Remote(q.VHost(), q.Name(), locate).(exchange.StreamRemote)
	return r
}

// StreamHome implements exchange.StreamHomer: the first of q's members
// (in their recorded order) that is alive, where its single-active
// groups live; "" if none is.
func (p *Placer) StreamHome(q *exchange.Queue) string {
	for _, m := range q.Members() {
		if _, err := p.addrOf(m); err == nil {
			return m
		}
	}
	return ""
}

// WaitReady implements exchange.Cluster: it waits until a new quorum
// queue's group has elected a leader.
func (p *Placer) WaitReady(q *exchange.Queue) error { return p.waitReady(q.ID()) }

func (p *Placer) waitReady(id uint64) error {
	qq := p.queue(id)
	if qq == nil {
		return nil
	}
	t := time.NewTimer(p.c.ReadyTimeout)
	defer t.Stop()
	select {
	case <-qq.ready:
		return nil
	case <-t.C:
		return ErrNotReady
	}
}

func (p *Placer) queue(id uint64) *quorumQueue {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quorum[id]
}

// queues lists the attached replicated queues.
func (p *Placer) queues() []*quorumQueue {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*quorumQueue, 0, len(p.quorum))
	for _, qq := range p.quorum {
		out = append(out, qq)
	}
	return out
}

// Leaders lists the replicated queues this node leads, as
// vhost + "/" + name, sorted.
func (p *Placer) Leaders() []string {
	var out []string
	for _, qq := range p.queues() {
		if qq.leading() {
			out = append(out, qq.q.VHost()+"/"+qq.q.Name())
		}
	}
	sort.Strings(out)
	return out
}

// MembersOf is a replicated queue's group as its Raft configuration has
// it when this node is a member (the recorded members run ahead of it
// while a member is being added), else as recorded.
func (p *Placer) MembersOf(q *exchange.Queue) []string {
	if qq := p.queue(q.ID()); qq != nil {
		if r := qq.raft(); r != nil {
			if ids, err := servers(r, false); err == nil && len(ids) > 0 {
				return ids
			}
		}
	}
	return q.Members()
}

// LeaderOf is the name of a replicated queue's leader, "" if unknown
// here.
func (p *Placer) LeaderOf(q *exchange.Queue) string {
	qq := p.queue(q.ID())
	if qq == nil {
		return ""
	}
	r := qq.raft()
	if r == nil {
		return ""
	}
	_, id := r.LeaderWithID()
	return string(id)
}

// Close stops every group here, keeping their data, then the Remotes.
func (p *Placer) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	for _, qq := range p.queues() {
		qq.stop(false)
	}
	p.c.Remotes.Close()
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
}
