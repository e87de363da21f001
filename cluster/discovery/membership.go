package discovery

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/trident-broker/trident/cluster/logbridge"
)

// ErrShutdown is returned by calls on a Membership after Shutdown.
var ErrShutdown = errors.New("discovery: membership shut down")

// Membership is a running member of the cluster.
//
// Lock order: memberlist's internal locks, then Membership.mu (memberlist
// calls the delegates with its node lock held). Nothing here calls
// memberlist while holding mu.
type Membership struct {
	ml   *memberlist.Memberlist
	log  *slog.Logger
	name string

	mu       sync.Mutex
	meta     []byte            // the local node's encoded metadata
	members  map[string]Member // everyone seen since Start
	leaving  map[string]bool   // members that said they are leaving
	shutdown bool

	events   *eventQueue
	seeds    *seedLoop // nil without Config.DNS
	stop     chan struct{}
	retryers sync.WaitGroup
	downOnce sync.Once
}

// Start joins (or founds) the cluster described by cfg. log may be nil.
func Start(cfg Config, log *slog.Logger) (*Membership, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.RetryJoinInterval <= 0 {
		cfg.RetryJoinInterval = Default().RetryJoinInterval
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.With("node", cfg.NodeName)
	m := &Membership{
		log:     log,
		name:    cfg.NodeName,
		meta:    encodeMeta(cfg.Meta),
		members: map[string]Member{},
		leaving: map[string]bool{},
		events:  newEventQueue(cfg.OnEvent),
		stop:    make(chan struct{}),
	}
	mc := cfg.memberlistConfig()
	kr, err := keyring(cfg.GossipKeys)
	if err != nil {
		m.events.close()
		return nil, err
	}
	if kr != nil {
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Delegate = delegate{m}
	mc.Events = eventDelegate{m}
	mc.Logger = logbridge.NewStdLogger(log.With("component", "memberlist"))
	ml, err := memberlist.Create(mc)
	if err != nil {
		m.events.close()
		return nil, fmt.Errorf("discovery: start gossip on %s:%d: %w", mc.BindAddr, mc.BindPort, err)
	}
	m.ml = ml
	if cfg.DNS.Enabled() {
		m.startSeedLoop(cfg) // joins Join's seeds as well
	} else if len(cfg.Join) > 0 {
		if n, err := ml.Join(cfg.Join); n == 0 {
			log.Warn("cluster join reached no seed; retrying in the background",
				"seeds", cfg.Join, "every", cfg.RetryJoinInterval, "err", err)
			m.retryers.Add(1)
			go m.retryJoin(cfg.Join, cfg.RetryJoinInterval)
		} else {
			log.Info("joined cluster", "seeds_reached", n)
		}
	}
	return m, nil
}

func (m *Membership) retryJoin(seeds []string, every time.Duration) {
	defer m.retryers.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if n, err := m.ml.Join(seeds); n > 0 {
			m.log.Info("joined cluster", "seeds_reached", n)
			return
		} else {
			m.log.Debug("cluster join retry failed", "err", err)
		}
	}
}

// Name is the local node's name.
func (m *Membership) Name() string { return m.name }

// LocalMember is the local node as the cluster sees it (its gossip
// address is the advertised one).
func (m *Membership) LocalMember() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.members[m.name].clone()
}

// Members returns every node seen since Start, sorted by name.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.members))
	for _, mb := range m.members {
		out = append(out, mb.clone())
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Join contacts more seeds; it returns how many were reached.
func (m *Membership) Join(seeds []string) (int, error) {
	if m.isShutdown() {
		return 0, ErrShutdown
	}
	return m.ml.Join(seeds)
}

// SetMeta replaces the local node's metadata and gossips it, waiting up to
// timeout for the update to go out.
func (m *Membership) SetMeta(meta map[string]string, timeout time.Duration) error {
	enc := encodeMeta(meta)
	if len(enc) > memberlist.MetaMaxSize {
		return ErrMetaTooLong
	}
	m.mu.Lock()
	if m.shutdown {
		m.mu.Unlock()
		return ErrShutdown
	}
	m.meta = enc
	m.mu.Unlock()
	return m.ml.UpdateNode(timeout)
}

// Leave tells the cluster this node is leaving, waiting up to timeout for
// the message to go out. Call Shutdown after it.
//
// memberlist's own leave message reaches the other nodes' event delegate
// looking exactly like a failure, so Leave first tells every live member
// over TCP that this node is leaving; they then record it as left, not
// dead. A member that misses that message sees the leave as a failure.
func (m *Membership) Leave(timeout time.Duration) error {
	m.mu.Lock()
	if m.shutdown {
		m.mu.Unlock()
		return ErrShutdown
	}
	m.leaving[m.name] = true
	var peers []*memberlist.Node
	for _, mb := range m.members {
		if mb.Name == m.name || mb.Status != StatusAlive {
			continue
		}
		host, port, err := net.SplitHostPort(mb.Addr)
		p, _ := strconv.Atoi(port)
		if err == nil {
			peers = append(peers, &memberlist.Node{Name: mb.Name, Addr: net.ParseIP(host), Port: uint16(p)})
		}
	}
	m.mu.Unlock()
	msg := append([]byte{msgLeaving}, m.name...)
	for _, p := range peers {
		if err := m.ml.SendReliable(p, msg); err != nil {
			m.log.Debug("could not tell a member we are leaving", "member", p.Name, "err", err)
		}
	}
	return m.ml.Leave(timeout)
}

// User messages between members (memberlist's SendReliable / NotifyMsg).
const msgLeaving = 1 // followed by the leaving node's name

// Shutdown stops gossip without a goodbye (peers will see the node fail
// unless Leave was called), then delivers queued events and returns.
func (m *Membership) Shutdown() error {
	var err error
	m.downOnce.Do(func() {
		m.mu.Lock()
		m.shutdown = true
		m.mu.Unlock()
		close(m.stop)
		m.retryers.Wait()
		err = m.ml.Shutdown()
		m.events.close()
	})
	return err
}

func (m *Membership) isShutdown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shutdown
}

// record stores n (called by memberlist with its node lock held: n is
// only valid during the call) and queues the event.
func (m *Membership) record(kind EventKind, n *memberlist.Node) {
	// n.State is not maintained by memberlist (its node records shadow
	// it), so the status comes from the kind of event and from whether
	// the member announced its leave.
	mb := Member{
		Name: n.Name,
		Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
	}
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		m.log.Warn("cluster member has unreadable metadata", "member", n.Name, "err", err)
	}
	mb.Meta = meta
	m.mu.Lock()
	switch kind {
	case EventJoin:
		delete(m.leaving, n.Name)
	case EventLeave:
		mb.Status = StatusDead
		if m.leaving[n.Name] {
			mb.Status = StatusLeft
		}
		if old, ok := m.members[n.Name]; ok && mb.Meta == nil {
			mb.Meta = old.Meta
		}
	}
	m.members[n.Name] = mb
	m.mu.Unlock()

	switch {
	case kind == EventJoin:
		m.log.Info("cluster member joined", "member", mb.Name, "addr", mb.Addr)
	case kind == EventLeave && mb.Status == StatusLeft:
		m.log.Info("cluster member left", "member", mb.Name, "addr", mb.Addr)
	case kind == EventLeave:
		m.log.Warn("cluster member failed", "member", mb.Name, "addr", mb.Addr)
	default:
		m.log.Debug("cluster member updated", "member", mb.Name, "meta", mb.Meta)
	}
	m.events.push(Event{Kind: kind, Member: mb.clone()})
}

// delegate gives memberlist the local metadata; no user messages or
// extra state are exchanged (yet).
type delegate struct{ m *Membership }

func (d delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if len(d.m.meta) > limit {
		return nil // Validate and SetMeta keep this from happening
	}
	return append([]byte(nil), d.m.meta...)
}

func (d delegate) NotifyMsg(b []byte) {
	if len(b) > 1 && b[0] == msgLeaving {
		d.m.mu.Lock()
		d.m.leaving[string(b[1:])] = true
		d.m.mu.Unlock()
	}
}

func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (delegate) LocalState(join bool) []byte                { return nil }
func (delegate) MergeRemoteState(buf []byte, join bool)     {}

type eventDelegate struct{ m *Membership }

func (e eventDelegate) NotifyJoin(n *memberlist.Node)   { e.m.record(EventJoin, n) }
func (e eventDelegate) NotifyLeave(n *memberlist.Node)  { e.m.record(EventLeave, n) }
func (e eventDelegate) NotifyUpdate(n *memberlist.Node) { e.m.record(EventUpdate, n) }

// ErrAlive is returned by Forget for a member that is alive.
var ErrAlive = errors.New("discovery: member is alive")

// ForgetWhenDown is Forget for a member this node still sees alive (its
// failure detector has not caught up with the node that asked): the
// member's leave, when it comes, counts as a leave on purpose, as if it
// had announced it. A join in between (the node is really back) cancels
// this. It reports whether the member was known.
func (m *Membership) ForgetWhenDown(name string) bool {
	m.mu.Lock()
	_, ok := m.members[name]
	if ok {
		m.leaving[name] = true
	}
	m.mu.Unlock()
	return ok
}

// Forget records a member that is not alive (it failed, or left) as
// having left on purpose, as if it had announced its leave (RabbitMQ's
// forget_cluster_node): whoever follows membership (the metadata group's
// reconciler, the quorum queues' leaders) then takes it out of the
// cluster instead of waiting for it to come back. If the node does come
// back, gossip makes it alive again. It returns ErrAlive for an alive
// member and nil for an unknown one.
func (m *Membership) Forget(name string) error {
	m.mu.Lock()
	mb, ok := m.members[name]
	switch {
	case !ok:
		m.mu.Unlock()
		return nil
	case mb.Status == StatusAlive:
		m.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrAlive, name)
	case mb.Status == StatusLeft:
		m.mu.Unlock()
		return nil
	}
	mb.Status = StatusLeft
	m.leaving[name] = true
	m.members[name] = mb
	m.mu.Unlock()
	m.log.Info("cluster member forgotten", "member", name)
	m.events.push(Event{Kind: EventLeave, Member: mb.clone()})
	return nil
}
