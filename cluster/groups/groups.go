package groups

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/logbridge"
	"github.com/trident-broker/trident/cluster/mux"
	"github.com/trident-broker/trident/cluster/raftstore"
)

// Errors.
var (
	// ErrRunning is returned by Start for a group already running here.
	ErrRunning = errors.New("groups: group already running")
	// ErrNotRunning is returned by Stop for a group not running here.
	ErrNotRunning = errors.New("groups: group not running")
	// ErrClosed is returned by Start after Close.
	ErrClosed = errors.New("groups: host closed")
)

// StreamPrefix prefixes a group's name to make its mux stream name.
const StreamPrefix = "raft/"

// Timing are the Raft timers of every group on the node.
type Timing struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// Keepalives: the node keeps the group's heartbeats going for its
	// raft (keepalive.go), so that its leader's raft heartbeats
	// can be rare: a member that leads switches to
	// LeaderHeartbeatTimeout (hashicorp/raft heartbeats every tenth to
	// fifth of it) and back to HeartbeatTimeout when it no longer leads.
	Keepalives             bool
	LeaderHeartbeatTimeout time.Duration // with Keepalives; at most 5 × LeaderLeaseTimeout
}

// DefaultTiming returns timers for failover within one to two seconds on a
// LAN: a follower that hears nothing for 500 ms (randomised up to 1 s)
// starts an election; a leader that cannot reach a quorum for 250 ms
// steps down.
func DefaultTiming() Timing {
	return Timing{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      20 * time.Millisecond,
	}
}

// QuorumTiming returns the timers of a quorum queue's (or a clustered
// stream's) group, one of many on a node, most of them idle (doc.go:
// "Many groups"): a follower stands for election after 1 s (randomised
// up to 2 s) without hearing from its leader (and a split election is
// retried after as long: raft wants ElectionTimeout >= HeartbeatTimeout);
// the node's keepalives reach it every 400 ms, and the leader's raft
// heartbeats only every 300-600 ms (LeaderHeartbeatTimeout), answered
// from them; a leader that cannot reach a quorum for 900 ms steps down
// (less than the follower's timeout: Campaign shortens that by 1 ms and
// raft wants the lease no longer); and an idle leader tells its
// followers the commit index every 20-40 s rather than every 20-40 ms
// (while entries flow they carry it at once; only the leader serves a
// quorum queue, and a new leader commits afresh).
func QuorumTiming() Timing {
	return Timing{
		HeartbeatTimeout:       time.Second,
		ElectionTimeout:        time.Second,
		LeaderLeaseTimeout:     900 * time.Millisecond,
		CommitTimeout:          20 * time.Second,
		Keepalives:             true,
		LeaderHeartbeatTimeout: 3 * time.Second,
	}
}

func (t Timing) withDefaults() Timing {
	return t.or(DefaultTiming())
}

// or fills t's zero fields from d.
func (t Timing) or(d Timing) Timing {
	if t.HeartbeatTimeout <= 0 {
		t.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if t.ElectionTimeout <= 0 {
		t.ElectionTimeout = d.ElectionTimeout
	}
	if t.LeaderLeaseTimeout <= 0 {
		t.LeaderLeaseTimeout = d.LeaderLeaseTimeout
	}
	if t.CommitTimeout <= 0 {
		t.CommitTimeout = d.CommitTimeout
	}
	if !t.Keepalives && d.Keepalives {
		t.Keepalives, t.LeaderHeartbeatTimeout = true, d.LeaderHeartbeatTimeout
	}
	return t
}

// leading is t as a leader's: its raft heartbeats every tenth to fifth
// of LeaderHeartbeatTimeout if it has keepalives.
func (t Timing) leading() Timing {
	if t.Keepalives && t.LeaderHeartbeatTimeout > t.HeartbeatTimeout {
		t.HeartbeatTimeout = t.LeaderHeartbeatTimeout
		t.ElectionTimeout = max(t.ElectionTimeout, t.LeaderHeartbeatTimeout) // raft wants it >= HeartbeatTimeout
	}
	return t
}

// keepFor is how long after raft's last heartbeat to a follower the
// keepalives repeat it: raft's longest heartbeat interval (a fifth of
// the leader's heartbeat timeout) and one keepalive round.
func (t Timing) keepFor() time.Duration {
	if !t.Keepalives {
		return 0
	}
	return t.leading().HeartbeatTimeout/5 + hbKeepEvery
}

// Config configures a Host.
type Config struct {
	DB     *raftstore.DB
	Mux    *mux.Mux
	Dir    string // snapshots: Dir/<escaped group name>/
	NodeID string // this node's name: every group's raft.ServerID here
	Log    *slog.Logger
	Timing Timing // zero fields: DefaultTiming's
}

// Options are per-group settings; zero fields keep hashicorp/raft's
// defaults (raft.DefaultConfig).
type Options struct {
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// NoSnapshotRestoreOnStart: the FSM already holds the state of the
	// last snapshot when the group starts (it keeps it durably itself).
	NoSnapshotRestoreOnStart bool
	// RetainSnapshots is how many snapshots are kept on disk (0: 2).
	RetainSnapshots int
	// Snapshots, if set, wraps the group's snapshot store (a quorum
	// queue's keeps its state alone and adds the messages when sending).
	Snapshots func(raft.SnapshotStore) raft.SnapshotStore
	// Timing, where not zero, replaces the host's timers for this group
	// (a quorum queue's: QuorumTiming).
	Timing Timing
}

// Host runs the Raft groups of one node. Its methods are safe for
// concurrent use.
type Host struct {
	c Config

	mu     sync.Mutex
	closed bool
	groups map[string]*group
	byRaft map[*raft.Raft]*group
	hb     *heartbeats           // on the first Start
	roles  chan raft.Observation // state changes of groups with keepalives, for tuneRoles
	done   chan struct{}         // closed by Close
}

type group struct {
	r      *raft.Raft
	trans  *groupTransport
	timing Timing
	obs    *raft.Observer // with keepalives: state changes to h.roles
}

// New returns a Host with no group running.
func New(c Config) *Host {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	c.Timing = c.Timing.withDefaults()
	return &Host{c: c, groups: map[string]*group{}, byRaft: map[*raft.Raft]*group{}, done: make(chan struct{})}
}

// Self is this node as a member of a group.
func (h *Host) Self() raft.Server {
	return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(h.c.NodeID), Address: raft.ServerAddress(h.c.Mux.Addr())}
}

// SnapshotDir returns the directory of the group's snapshots. Names are
// escaped so that any group name (a quorum queue's "q/<vhost>/<queue>")
// is one directory entry of bounded length.
func (h *Host) SnapshotDir(name string) string {
	e := url.PathEscape(name)
	if strings.HasPrefix(e, ".") {
		e = "%2E" + e[1:]
	}
	if len(e) > 200 {
		sum := sha256.Sum256([]byte(name))
		e = e[:160] + "~" + hex.EncodeToString(sum[:16])
	}
	return filepath.Join(h.c.Dir, e)
}

// OpenSnapshots returns the snapshot store of group name, keeping retain
// snapshots, as Start gives it to Raft but for Options.Snapshots: files
// under SnapshotDir(name), encrypted with the DB's key if it has one
// (raftstore.DB.Snapshots).
func (h *Host) OpenSnapshots(name string, retain int) (raft.SnapshotStore, error) {
	files, err := raft.NewFileSnapshotStoreWithLogger(h.SnapshotDir(name), retain, logbridge.NewHCLogger(h.c.Log.With("group", name), "raft-snap"))
	if err != nil {
		return nil, fmt.Errorf("groups: %s: snapshots: %w", name, err)
	}
	return h.c.DB.Snapshots(files), nil
}

// Start starts group name with fsm.
func (h *Host) Start(name string, fsm raft.FSM, o Options) (*raft.Raft, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.groups[name] != nil {
		return nil, fmt.Errorf("%w: %s", ErrRunning, name)
	}
	log := h.c.Log.With("group", name)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(h.c.NodeID)
	rc.Logger = logbridge.NewHCLogger(log, "raft")
	rc.NoLegacyTelemetry = true // each metric once, not also under its legacy name (a heartbeat's twice)
	t := o.Timing.or(h.c.Timing)
	rc.HeartbeatTimeout = t.HeartbeatTimeout
	rc.ElectionTimeout = t.ElectionTimeout
	rc.LeaderLeaseTimeout = t.LeaderLeaseTimeout
	rc.CommitTimeout = t.CommitTimeout
	if o.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = o.SnapshotThreshold
	}
	if o.SnapshotInterval > 0 {
		rc.SnapshotInterval = o.SnapshotInterval
	}
	if o.TrailingLogs > 0 {
		rc.TrailingLogs = o.TrailingLogs
	}
	rc.NoSnapshotRestoreOnStart = o.NoSnapshotRestoreOnStart
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("groups: %s: %w", name, err)
	}
	retain := o.RetainSnapshots
	if retain <= 0 {
		retain = 2
	}
	files, err := h.OpenSnapshots(name, retain)
	if err != nil {
		return nil, err
	}
	snaps := files
	if o.Snapshots != nil {
		snaps = o.Snapshots(files)
	}
	if h.hb == nil {
		h.hb = newHeartbeats(h.c.Mux, h.c.Log.With("component", "raft-heartbeats"))
		h.hb.down = h.peerDown
	}
	if err := h.hb.listen(); err != nil {
		return nil, fmt.Errorf("groups: heartbeats: %w", err)
	}
	sl, err := h.c.Mux.StreamLayer(StreamPrefix + name)
	if err != nil {
		return nil, fmt.Errorf("groups: %s: %w", name, err)
	}
	trans := newGroupTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  sl,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  logbridge.NewHCLogger(log, "raft-net"),
	}), h.hb, name, t.keepFor())
	store := h.c.DB.Group(name)
	r, err := raft.NewRaft(rc, fsm, store, store, snaps, trans)
	if err != nil {
		trans.Close()
		return nil, fmt.Errorf("groups: %s: %w", name, err)
	}
	trans.r.Store(r)
	g := &group{r: r, trans: trans, timing: t}
	h.groups[name], h.byRaft[r] = g, g
	if t.Keepalives && t.leading() != t {
		if h.roles == nil {
			h.roles = make(chan raft.Observation, 4096)
			go h.tuneRoles(h.roles)
		}
		g.obs = raft.NewObserver(h.roles, false, func(o *raft.Observation) bool {
			_, ok := o.Data.(raft.RaftState)
			return ok
		})
		r.RegisterObserver(g.obs)
		g.tune() // it may have become leader before the observer
	}
	return r, nil
}

// tuneSweep is how often tuneRoles looks at every group's state even if
// no observation woke it (raft drops an observation the channel has no
// room for).
const tuneSweep = 2 * time.Second

// tuneRoles gives each group with keepalives its leader's or its
// follower's raft timers (Timing.leading) when its state changes, until
// the host closes.
func (h *Host) tuneRoles(roles <-chan raft.Observation) {
	sweep := time.NewTicker(tuneSweep)
	defer sweep.Stop()
	for {
		select {
		case <-h.done:
			return
		case o := <-roles:
			h.mu.Lock()
			g := h.byRaft[o.Raft]
			h.mu.Unlock()
			if g != nil {
				g.tune()
			}
		case <-sweep.C:
			h.mu.Lock()
			gs := make([]*group, 0, len(h.groups))
			for _, g := range h.groups {
				if g.obs != nil {
					gs = append(gs, g)
				}
			}
			h.mu.Unlock()
			for _, g := range gs {
				g.tune()
			}
		}
	}
}

// tune sets g's heartbeat and election timeouts for its state.
func (g *group) tune() {
	t := g.timing
	if g.r.State() == raft.Leader {
		t = t.leading()
	}
	rc := g.r.ReloadableConfig()
	if rc.HeartbeatTimeout == t.HeartbeatTimeout && rc.ElectionTimeout == t.ElectionTimeout {
		return
	}
	rc.HeartbeatTimeout, rc.ElectionTimeout = t.HeartbeatTimeout, t.ElectionTimeout
	_ = g.r.ReloadConfig(rc) // valid: Start validated both timings; fails only after a shutdown
}

// HasState reports whether group name has Raft state on this node (it was
// bootstrapped or has received entries or a snapshot).
func (h *Host) HasState(name string) (bool, error) {
	var snaps raft.SnapshotStore = raft.NewInmemSnapshotStore() // no directory: no snapshot
	if _, err := os.Stat(h.SnapshotDir(name)); err == nil {
		if snaps, err = raft.NewFileSnapshotStoreWithLogger(h.SnapshotDir(name), 2, logbridge.NewHCLogger(h.c.Log, "raft-snap")); err != nil {
			return false, err
		}
	}
	store := h.c.DB.Group(name)
	return raft.HasExistingState(store, store, snaps)
}

// Bootstrap makes servers the first configuration of r's group unless the
// group already has state here (then it does nothing). Every member may
// call it with the same servers.
func Bootstrap(r *raft.Raft, servers []raft.Server) error {
	servers = slices.Clone(servers)
	slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	return err
}

// Campaign makes r, if it is a follower that has never heard from a
// leader (a group just bootstrapped here), stand for election now rather
// than after its randomised heartbeat timeout: the declaring node of a
// quorum queue campaigns, so the new group has a leader within a round
// trip or two instead of after 1-2 s. A follower that has heard from a
// leader is not affected. It works through raft's ReloadConfig: a
// shorter heartbeat timeout restarts the follower's timer at once (and
// the timer's check of the last contact, none, starts the election);
// the timeout is set back straight after.
func Campaign(r *raft.Raft) error {
	rc := r.ReloadableConfig()
	nudge := rc
	nudge.HeartbeatTimeout = rc.HeartbeatTimeout - time.Millisecond
	if err := r.ReloadConfig(nudge); err != nil {
		return err
	}
	if r.ReloadableConfig() != nudge {
		return nil // the host retuned it meanwhile (it leads: Timing.leading)
	}
	return r.ReloadConfig(rc)
}

// CampaignWhenReady is Campaign for group name's r once enough of the
// other servers run the group to elect it (a majority with this node),
// asked over the coalesced heartbeat stream every 10 ms for at most
// timeout (then it campaigns anyway): a group just declared starts on
// the other nodes a moment later, when they apply the declaration, and
// an election before that fails and waits out a 1-2 s election timer.
func (h *Host) CampaignWhenReady(name string, r *raft.Raft, servers []raft.Server, timeout time.Duration) error {
	h.mu.Lock()
	hb := h.hb
	h.mu.Unlock()
	need := len(servers) / 2 // other voters needed for a majority
	deadline := time.Now().Add(timeout)
	for hb != nil {
		up := 0
		for _, s := range servers {
			if string(s.ID) != h.c.NodeID && hb.probe(string(s.Address), name) == nil {
				up++
			}
		}
		if up >= need || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return Campaign(r)
}

// Raft returns the running group name.
func (h *Host) Raft(name string) (*raft.Raft, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groups[name]
	if g == nil {
		return nil, false
	}
	return g.r, true
}

// FollowerLag reports, for group name led here, how many entries the
// log of its follower at addr lacked of those this member's log held
// when it sent the follower's latest successfully answered AppendEntries
// or heartbeat (raft answers every one with the follower's last log
// index), and when that request was sent; ok is false if the group does
// not run here or has no such answer from addr. hashicorp/raft keeps its
// followers' match indexes to itself: this is what can be seen of them.
// While a follower catches up through pipelined AppendEntries, whose
// answers raft reads itself, the answers to its heartbeats (every 400 ms
// with keepalives, else raft's heartbeat interval) keep this current.
func (h *Host) FollowerLag(name string, addr raft.ServerAddress) (lag uint64, at time.Time, ok bool) {
	h.mu.Lock()
	g := h.groups[name]
	h.mu.Unlock()
	if g == nil {
		return 0, time.Time{}, false
	}
	l, ok := g.trans.followerLog(addr)
	return l.lag, l.at, ok
}

// Names lists the running groups, sorted.
func (h *Host) Names() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.groups))
	for n := range h.groups {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Stop shuts group name down and closes its transport.
func (h *Host) Stop(name string) error {
	h.mu.Lock()
	g := h.groups[name]
	delete(h.groups, name)
	if g != nil {
		delete(h.byRaft, g.r)
	}
	h.mu.Unlock()
	if g == nil {
		return fmt.Errorf("%w: %s", ErrNotRunning, name)
	}
	return g.stop()
}

func (g *group) stop() error {
	if g.obs != nil {
		g.r.DeregisterObserver(g.obs)
	}
	err := g.r.Shutdown().Error()
	if cerr := g.trans.Close(); err == nil { // Shutdown closes it too; closing twice is harmless
		err = cerr
	}
	return err
}

// Drop stops group name if it runs and deletes its log, stable state and
// snapshots on this node.
func (h *Host) Drop(name string) error {
	if err := h.Stop(name); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	if err := h.c.DB.DropGroup(name); err != nil {
		return fmt.Errorf("groups: drop %s: %w", name, err)
	}
	if err := os.RemoveAll(h.SnapshotDir(name)); err != nil {
		return fmt.Errorf("groups: drop %s: %w", name, err)
	}
	return nil
}

// Close stops every group, in parallel; later Starts fail with ErrClosed.
func (h *Host) Close() error {
	h.mu.Lock()
	if !h.closed {
		close(h.done)
	}
	h.closed = true
	gs := h.groups
	h.groups, h.byRaft = map[string]*group{}, map[*raft.Raft]*group{}
	hb := h.hb
	h.mu.Unlock()
	if hb != nil {
		defer hb.close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(gs))
	for name, g := range gs {
		wg.Go(func() {
			if err := g.stop(); err != nil {
				errs <- fmt.Errorf("groups: stop %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}
