package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/trident-broker/trident/cluster/placement"
	"github.com/trident-broker/trident/web"
)

// Cluster operations for the management API (issue 16): the
// node-is-quorum-critical check, forgetting a node that is gone and
// spreading quorum queue leaders over the nodes. What to write and what
// every node does with the records once committed is cluster/placement's
// (records.go); this file adapts it to web's interfaces.

var (
	_ web.QuorumCritic     = clusterView{}
	_ web.NodeForgetter    = clusterView{}
	_ web.QuorumRebalancer = clusterView{}
)

// QuorumCritical implements web.QuorumCritic from this node's groups: a
// queue is critical when its voters alive now, this node included, are
// a bare majority or fewer, so that without this node it has none.
func (v clusterView) QuorumCritical() []web.CriticalQueue {
	f := v.n.clusterFront()
	if f == nil || f.queues == nil {
		return nil
	}
	var out []web.CriticalQueue
	for _, c := range f.queues.QuorumCritical() {
		out = append(out, web.CriticalQueue{VHost: c.VHost, Name: c.Name, Members: c.Members, Online: c.Online})
	}
	return out
}

// ForgetClusterNode implements web.NodeForgetter.
func (v clusterView) ForgetClusterNode(node string) error {
	n := v.n
	f := n.clusterFront()
	if f == nil || n.repl == nil {
		return web.ErrNodeUnknown
	}
	key, val, err := placement.ForgetRecord(n.nodeName(), f.m.Members(), node, time.Now())
	switch {
	case errors.Is(err, placement.ErrForgetSelf):
		return web.ErrNodeIsSelf
	case errors.Is(err, placement.ErrForgetRunning):
		return fmt.Errorf("%w: %s", web.ErrNodeRunning, node)
	case errors.Is(err, placement.ErrForgetUnknown):
		return fmt.Errorf("%w: %s", web.ErrNodeUnknown, node)
	case err != nil:
		return err
	}
	return n.repl.ReplicateMeta([]string{key}, [][]byte{val})
}

// RebalanceQuorum implements web.QuorumRebalancer: it plans from what
// this node knows (the quorum queues with a member here, which in a
// cluster no larger than the groups is every one) and commits the plan.
func (v clusterView) RebalanceQuorum() ([]web.LeaderMove, error) {
	n := v.n
	f := n.clusterFront()
	if f == nil || f.queues == nil || n.repl == nil {
		return nil, nil
	}
	moves := f.queues.PlanRebalance()
	out := make([]web.LeaderMove, 0, len(moves))
	for _, m := range moves {
		out = append(out, web.LeaderMove{VHost: m.VHost, Name: m.Name, From: m.From, To: m.To})
	}
	if len(moves) == 0 {
		return out, nil
	}
	key, val, err := placement.RebalanceRecord(moves, time.Now())
	if err != nil {
		return nil, err
	}
	return out, n.repl.ReplicateMeta([]string{key}, [][]byte{val})
}

// opsApplier is the metadata hook of the cluster operations' records.
func (f *clusterFrontEnd) opsApplier() *placement.OpsApplier {
	return &placement.OpsApplier{Members: f.m, Log: f.log,
		Kick: func() {
			if g := f.metaGroup.Load(); g != nil {
				g.Kick()
			}
		},
		Rebalance: func(moves []placement.Move) {
			if p := f.placer.Load(); p != nil {
				p.ApplyRebalance(moves)
			}
		}}
}
