package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/featureflags"
	"github.com/trident-broker/trident/cluster/groups"
	"github.com/trident-broker/trident/cluster/mux"
	"github.com/trident-broker/trident/exchange"
)

// Name is the metadata group's name; RPCStream is the mux stream of its
// forwarding RPC.
const (
	Name      = "meta"
	RPCStream = "meta-rpc"
)

// Errors.
var (
	// ErrNotCommitted is returned by Propose when ctx ended before the
	// ops were known to be committed (no leader, no quorum, partition).
	// They may still commit later.
	ErrNotCommitted = errors.New("meta: not committed")
	// ErrClosed is returned by Propose after Close.
	ErrClosed = errors.New("meta: group closed")
)

// Config configures the metadata group of one node.
type Config struct {
	Host    *groups.Host
	Mux     *mux.Mux
	Applier Applier
	Index   IndexStore // where the applied index lives: the local store
	Log     *slog.Logger
	// Options are the group's Raft options; NoSnapshotRestoreOnStart is
	// always set (the local store already holds the state).
	Options groups.Options
	// Members, if set, lists the cluster's members (discovery's
	// Membership.Members): the leader reconciles the Raft configuration
	// with it every ReconcileInterval and on Kick.
	Members           func() []discovery.Member
	ReconcileInterval time.Duration // 0: 2 s
	// Flags is the set the FSM keeps the enabled feature flags in (nil:
	// a new one); featureflags.go.
	Flags *featureflags.Set
	// TopologyRecords returns the records a topology command makes
	// (exchange.Broker.RecordsOf): ProposeTopology writes them, as a
	// version 1 entry, while topology commands are not enabled.
	TopologyRecords func(c exchange.TopologyCommand) ([]exchange.MetaOp, error)
	// EnableFlagsOnBootstrap: once this node has bootstrapped a new
	// group (Bootstrap, BootstrapExpect), it enables every stable flag
	// that all the members support, as RabbitMQ does for a new cluster.
	EnableFlagsOnBootstrap bool
}

// Group is this node's member of the metadata group.
type Group struct {
	c    Config
	r    *raft.Raft
	fsm  *fsm
	log  *slog.Logger
	rpc  interface{ Close() error }
	wait interface{ Close() error } // the WaitStream listener (spread.go)

	kick    chan struct{}
	stop    chan struct{}
	refused refusals // members.go
	wg      sync.WaitGroup

	closeOnce sync.Once
}

// Start starts the metadata group on this node (it neither bootstraps
// nor joins: see Bootstrap, BootstrapExpect and the reconciler).
func Start(c Config) (*Group, error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 2 * time.Second
	}
	if c.Flags == nil {
		c.Flags = featureflags.NewSet()
	}
	f, err := newFSM(c.Applier, c.Index, c.Flags, c.Log)
	if err != nil {
		return nil, err
	}
	ln, err := c.Mux.Listener(RPCStream)
	if err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	wln, err := c.Mux.Listener(WaitStream)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("meta: %w", err)
	}
	o := c.Options
	o.NoSnapshotRestoreOnStart = true
	r, err := c.Host.Start(Name, f, o)
	if err != nil {
		ln.Close()
		wln.Close()
		return nil, err
	}
	g := &Group{c: c, r: r, fsm: f, log: c.Log, rpc: ln, wait: wln, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	g.wg.Go(func() { g.serveRPC(ln) })
	g.wg.Go(func() { g.serveWait(wln) })
	if c.Members != nil {
		g.wg.Go(g.reconcileLoop)
	}
	return g, nil
}

// Raft returns the group's Raft instance.
func (g *Group) Raft() *raft.Raft { return g.r }

// Applied returns the index of the last entry this node applied.
func (g *Group) Applied() uint64 { return g.fsm.Applied() }

// Leader returns the leader's node name and mux address, "" when unknown.
func (g *Group) Leader() (id, addr string) {
	a, i := g.r.LeaderWithID()
	return string(i), string(a)
}

// IsLeader reports whether this node leads the group.
func (g *Group) IsLeader() bool { return g.r.State() == raft.Leader }

// Bootstrap makes servers the group's first configuration unless it has
// state already.
func (g *Group) Bootstrap(servers []raft.Server) error {
	fresh := g.r.LastIndex() == 0
	if err := groups.Bootstrap(g.r, servers); err != nil {
		return err
	}
	if fresh && g.c.EnableFlagsOnBootstrap {
		g.wg.Go(g.enableOnBootstrap)
	}
	return nil
}

// Close stops the RPC server, the reconciler and the group.
func (g *Group) Close() error {
	var err error
	g.closeOnce.Do(func() {
		close(g.stop)
		g.rpc.Close()
		g.wait.Close()
		err = g.c.Host.Stop(Name)
		g.wg.Wait()
	})
	return err
}

func (g *Group) closed() bool {
	select {
	case <-g.stop:
		return true
	default:
		return false
	}
}

// Propose replicates ops and returns once they are committed (and applied
// on the leader). A follower forwards them to the leader; across leader
// changes Propose retries until ctx ends (ErrNotCommitted). A retried
// batch may be committed twice: ops are idempotent.
func (g *Group) Propose(ctx context.Context, ops []exchange.MetaOp) error {
	return g.propose(ctx, EncodeOps(ops))
}

// propose replicates an encoded entry (Propose).
func (g *Group) propose(ctx context.Context, entry []byte) error {
	if len(entry) > maxRequest {
		return fmt.Errorf("meta: %d-byte entry: too large", len(entry))
	}
	backoff := 10 * time.Millisecond
	var last error
	for {
		if g.closed() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			if last != nil {
				return fmt.Errorf("%w: %w (last: %v)", ErrNotCommitted, err, last)
			}
			return fmt.Errorf("%w: %w", ErrNotCommitted, err)
		}
		var retry bool
		var idx uint64
		if g.IsLeader() {
			retry, idx, last = g.applyHere(ctx, entry)
		} else if _, addr := g.Leader(); addr != "" {
			retry, idx, last = g.forward(ctx, addr, entry)
		} else {
			retry, last = true, errors.New("no leader")
		}
		if !retry {
			if last == nil {
				g.waitApplied(ctx, idx)
				g.waitPeers(idx)
			}
			return last
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-g.stop:
			t.Stop()
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// WaitApplied waits until this node has applied the entry at idx, or
// for at most spreadTimeout (what a peer's WaitStream request waits); it
// reports whether idx is applied. A peer that forwards a message to a
// queue it just learnt of sends the index it had applied (see
// cluster/forward: Forwarder.SetMetaIndex), and this node routes it after
// this.
func (g *Group) WaitApplied(idx uint64) bool {
	if g.fsm.Applied() >= idx {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), spreadTimeout)
	defer cancel()
	g.waitApplied(ctx, idx)
	return g.fsm.Applied() >= idx
}

// waitApplied waits until this node has applied the entry at idx (or ctx
// ends), so that a write made here is in the local store, and memory
// reloaded from it, when Propose returns: read-your-writes on the node
// that wrote.
func (g *Group) waitApplied(ctx context.Context, idx uint64) {
	for g.fsm.Applied() < idx && ctx.Err() == nil && !g.closed() {
		time.Sleep(time.Millisecond)
	}
}

// applyHere applies entry on this node as leader and returns its index.
func (g *Group) applyHere(ctx context.Context, entry []byte) (retry bool, idx uint64, err error) {
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	f := g.r.Apply(entry, timeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return true, 0, ctx.Err()
	}
	switch {
	case err == nil:
		return false, f.Index(), nil
	case errors.Is(err, raft.ErrRaftShutdown):
		return false, 0, ErrClosed
	case retryable(err):
		return true, 0, err
	}
	return false, 0, fmt.Errorf("meta: apply: %w", err)
}

// retryable reports whether a Raft apply error may go away with another
// leader.
func retryable(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrEnqueueTimeout) || errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
		errors.Is(err, raft.ErrAbortedByRestore)
}
