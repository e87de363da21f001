package placement

import (
	"errors"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/groups"
	"github.com/trident-broker/trident/cluster/quorum"
)

// quorumQueue is a replicated queue's group on this node.
type quorumQueue struct {
	p     *Placer
	q     Queue
	group string

	run sync.Mutex // serialises follow and stop

	mu     sync.Mutex
	r      *raft.Raft
	fsm    *quorum.FSM
	watch  *quorum.Watcher
	qlog   *quorum.Log   // while leading
	gone   chan struct{} // closed when r stops running here
	ready  chan struct{}
	once   sync.Once
	closed bool
	// stopReconcile ends the membership loop of a leadership term.
	stopReconcile chan struct{}
}

func (qq *quorumQueue) raft() *raft.Raft {
	qq.mu.Lock()
	defer qq.mu.Unlock()
	return qq.r
}

func (qq *quorumQueue) leading() bool {
	qq.mu.Lock()
	defer qq.mu.Unlock()
	return qq.qlog != nil
}

func (qq *quorumQueue) markReady() { qq.once.Do(func() { close(qq.ready) }) }

// follow makes this node a member of the queue's group or not, as the
// queue's current members say.
func (qq *quorumQueue) follow() {
	qq.run.Lock()
	defer qq.run.Unlock()
	member := slices.Contains(qq.q.Members(), qq.p.c.Self)
	qq.mu.Lock()
	running, closed := qq.r != nil, qq.closed
	qq.mu.Unlock()
	switch {
	case closed:
	case member && !running:
		qq.start()
	case !member && running:
		// Removed from the group by its leader: leave and drop the log.
		qq.p.log.Info("quorum queue member removed here", "queue", qq.q.Name())
		qq.leave(true)
		qq.q.BecomeProxy(qq.p.proxy(qq))
	case !member:
		qq.markReady()
	}
}

// start runs this node's member of the group. A seed member bootstraps
// the group (once every seed's address is known, so that all seeds
// bootstrap the same configuration); a member added later waits for the
// leader to replicate to it.
func (qq *quorumQueue) start() {
	c, log := qq.p.c, qq.p.log
	fsm, err := quorum.NewFSM(c.Store, qq.q.ID(), c.Log)
	if err != nil {
		log.Error("quorum queue state unreadable; the group is not started", "queue", qq.q.Name(), "err", err)
		return
	}
	if !qq.q.IsStream() {
		// A stream's readers read any member's store: its messages go
		// there as they are applied.
		fsm.EnableWriteBehind()
	}
	if fsm.Applied() == 0 {
		// No state record: a member upgraded from the builds that kept
		// the messages in memory (their snapshots are still read), or
		// whose store lost the queue. Raft will not restore its snapshot
		// (NoSnapshotRestoreOnStart), so the FSM does.
		err := restoreLocalSnapshot(c.Groups, qq.group, fsm)
		if errors.Is(err, quorum.ErrStateOnly) {
			// The snapshot holds the state alone and the store lost the
			// messages it belongs with: this member starts over empty, and
			// the leader sends it a full snapshot.
			log.Error("quorum queue: the node's store lost this queue's messages; its member here starts over from the leader", "queue", qq.q.Name())
			if err := c.Groups.Drop(qq.group); err != nil {
				log.Error("quorum queue: dropping the member's Raft state", "queue", qq.q.Name(), "err", err)
				return
			}
		} else if err != nil {
			log.Error("quorum queue snapshot not restored", "queue", qq.q.Name(), "err", err)
		}
	}
	// The FSM's state is the node's store (its messages and a state
	// record): Raft replays what came after it, never a whole snapshot.
	// Entries are batches of up to 1 MiB: 256 trailing ones let a follower
	// that lags a little catch up from the log without a snapshot.
	// Its snapshots hold the state alone; the messages are streamed with
	// one only when it is sent to a member (quorum.SnapshotStore).
	snapDir := c.Groups.SnapshotDir(qq.group)
	timing := groups.QuorumTiming()
	if qq.q.IsStream() {
		// A stream's consumers read their own member's copy: its
		// followers learn the commit index of a burst's last entries
		// within the host's commit timeout (20-40 ms), not 1-2 s.
		timing.CommitTimeout = 0
	}
	r, err := c.Groups.Start(qq.group, fsm, groups.Options{SnapshotThreshold: 8192, TrailingLogs: 256, NoSnapshotRestoreOnStart: true, RetainSnapshots: 1,
		Timing:    timing,
		Snapshots: func(s raft.SnapshotStore) raft.SnapshotStore { return fsm.SnapshotStore(s, snapDir) }})
	if err != nil {
		log.Error("quorum queue group did not start", "queue", qq.q.Name(), "group", qq.group, "err", err)
		return
	}
	fsm.WriteBehindAfter(r.LastIndex())
	if slices.Contains(qq.q.Seed(), c.Self) {
		if has, err := c.Groups.HasState(qq.group); err == nil && !has {
			qq.bootstrap(r)
		}
	}
	qq.mu.Lock()
	if qq.closed {
		qq.mu.Unlock()
		_ = c.Groups.Stop(qq.group)
		return
	}
	gone := make(chan struct{})
	qq.r, qq.fsm, qq.gone = r, fsm, gone
	qq.watch = quorum.Watch(r, c.BarrierTimeout, qq.leadership)
	qq.mu.Unlock()
	go qq.compact(r, fsm, gone)
	// Ready once any leader is known: a declaration returns when the queue
	// can take messages.
	go func() {
		if waitLeader(r, c.ReadyTimeout, gone) {
			qq.markReady()
		}
	}()
}

// waitLeader waits until r knows a leader, for at most timeout or until
// stop closes, woken by raft's leader observations.
func waitLeader(r *raft.Raft, timeout time.Duration, stop <-chan struct{}) bool {
	wake := make(chan raft.Observation, 1)
	obs := raft.NewObserver(wake, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(obs)
	defer r.DeregisterObserver(obs)
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		// Read after registering: a leader elected in between is seen.
		if addr, _ := r.LeaderWithID(); addr != "" {
			return true
		}
		select {
		case <-wake:
		case <-t.C:
			return false
		case <-stop:
			return false
		}
	}
}

// compact snapshots this member's FSM when that lets Raft drop a log much
// bigger than the queue (a backlog that was drained), so that the disk is
// given back; it runs until gone closes.
func (qq *quorumQueue) compact(r *raft.Raft, fsm *quorum.FSM, gone <-chan struct{}) {
	t := time.NewTicker(qq.p.c.CompactEvery)
	defer t.Stop()
	for {
		select {
		case <-qq.p.done:
			return
		case <-gone:
			return
		case <-t.C:
		}
		if fsm.SnapshotDue() {
			if err := r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
				qq.p.log.Warn("quorum queue snapshot", "queue", qq.q.Name(), "err", err)
			}
		}
	}
}

// restoreLocalSnapshot restores the newest snapshot of group into fsm,
// if there is one: through the host's snapshot store when it has one
// (groups.Host.OpenSnapshots: it decrypts them), else from the files.
func restoreLocalSnapshot(gs Groups, group string, fsm *quorum.FSM) error {
	dir := gs.SnapshotDir(group)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	var snaps raft.SnapshotStore
	var err error
	if o, ok := gs.(interface {
		OpenSnapshots(name string, retain int) (raft.SnapshotStore, error)
	}); ok {
		snaps, err = o.OpenSnapshots(group, 1)
	} else {
		snaps, err = raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	}
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

// bootstrap gives the group its first configuration: the seed members,
// once every one's address is known (woken by membership events).
func (qq *quorumQueue) bootstrap(r *raft.Raft) {
	p, c := qq.p, qq.p.c
	deadline := time.NewTimer(p.c.ReadyTimeout)
	defer deadline.Stop()
	resync := time.NewTicker(p.c.ResyncEvery)
	defer resync.Stop()
	for {
		changed := p.changes()
		var servers []raft.Server
		var missing error
		for _, m := range qq.q.Seed() {
			addr, err := p.addrOf(m)
			if err != nil {
				missing = err
				break
			}
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m), Address: raft.ServerAddress(addr)})
		}
		if missing == nil {
			if err := groups.Bootstrap(r, servers); err != nil {
				p.log.Error("quorum queue group bootstrap failed", "queue", qq.q.Name(), "err", err)
				return
			}
			// The first seed is the declaring node: it stands for
			// election at once, as RabbitMQ puts a new quorum queue's
			// leader on the node it was declared on.
			if qq.q.Seed()[0] == p.c.Self {
				if err := c.Groups.CampaignWhenReady(qq.group, r, servers, 2*time.Second); err != nil {
					p.log.Warn("quorum queue group: first election not started early", "queue", qq.q.Name(), "err", err)
				}
			}
			return
		}
		select {
		case <-changed:
		case <-resync.C:
		case <-p.done:
			return
		case <-deadline.C:
			p.log.Error("quorum queue group not bootstrapped: a seed member is unknown", "queue", qq.q.Name(), "err", missing)
			return
		}
	}
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
// and snapshots, and the messages its FSM kept in the store.
func (qq *quorumQueue) leave(drop bool) {
	qq.mu.Lock()
	w, l, r, fsm := qq.watch, qq.qlog, qq.r, qq.fsm
	qq.watch, qq.qlog, qq.r, qq.fsm = nil, nil, nil, nil
	if qq.gone != nil {
		close(qq.gone)
		qq.gone = nil
	}
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
			err = qq.p.c.Groups.Drop(qq.group)
		} else {
			err = qq.p.c.Groups.Stop(qq.group)
		}
		if err != nil {
			qq.p.log.Warn("quorum queue group stop", "group", qq.group, "err", err)
		}
	}
	if l != nil {
		_ = l.Close()
	}
	if fsm != nil {
		// Raft is down: nothing applies any more.
		if !drop {
			fsm.Close()
		} else if err := fsm.Drop(); err != nil {
			qq.p.log.Warn("quorum queue messages not dropped", "queue", qq.q.Name(), "err", err)
		}
	}
}
