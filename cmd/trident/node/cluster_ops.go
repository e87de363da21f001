package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/placement"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/web"
)

// Cluster operations for the management API (issue 16): the
// node-is-quorum-critical check from the quorum groups' Raft
// configurations and membership; forgetting a node that is gone; spreading
// quorum queue leaders over the nodes. Forget and rebalance are records
// of the metadata group, so that every node acts on them in the same
// order whichever node the operator asked:
//
//   - cluster/forget/<node>: every node records the member as having left
//     (discovery.Membership.Forget); the reconcilers that already follow
//     membership then take it out (the metadata leader removes it from
//     the group, each quorum queue's leader from its group, and grows the
//     group back with another alive node; its transient queues go).
//   - cluster/rebalance: a plan of leader moves made by the node asked; a
//     node leading a queue of the plan hands its leadership to the target.

const (
	forgetPrefix = "cluster/forget/"
	rebalanceKey = "cluster/rebalance"
	// rebalanceFresh bounds how old a plan may be when applied: a plan
	// replayed from the log or a snapshot long after is ignored.
	rebalanceFresh = time.Minute
)

// clusterOpsKey reports whether key is one of these records (replicated).
func clusterOpsKey(key string) bool {
	return strings.HasPrefix(key, forgetPrefix) || key == rebalanceKey || key == clusterNameKey
}

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
	if f == nil || n.metaStore == nil {
		return web.ErrNodeUnknown
	}
	if node == n.nodeName() {
		return web.ErrNodeIsSelf
	}
	known := false
	for _, m := range f.m.Members() {
		if m.Name != node {
			continue
		}
		known = true
		if m.Status == discovery.StatusAlive {
			return fmt.Errorf("%w: %s", web.ErrNodeRunning, node)
		}
	}
	if !known {
		return fmt.Errorf("%w: %s", web.ErrNodeUnknown, node)
	}
	at, _ := time.Now().UTC().MarshalText()
	return n.metaStore.PutMeta(forgetPrefix+node, at)
}

// rebalancePlan is the record of a rebalance.
type rebalancePlan struct {
	At    time.Time        `json:"at"`
	Moves []placement.Move `json:"moves"`
}

// RebalanceQuorum implements web.QuorumRebalancer: it plans from what
// this node knows (the quorum queues with a member here, which in a
// cluster no larger than the groups is every one) and commits the plan.
func (v clusterView) RebalanceQuorum() ([]web.LeaderMove, error) {
	n := v.n
	f := n.clusterFront()
	if f == nil || f.queues == nil || n.metaStore == nil {
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
	b, err := json.Marshal(rebalancePlan{At: time.Now().UTC(), Moves: moves})
	if err != nil {
		return nil, err
	}
	return out, n.metaStore.PutMeta(rebalanceKey, b)
}

// clusterOpsApplyMeta is the metadata hook of these records: it runs on
// the FSM goroutine of every node, so it only starts work.
func (n *Node) clusterOpsApplyMeta(ops []exchange.MetaOp) error {
	f := n.clusterFront()
	if f == nil {
		return nil
	}
	for _, op := range ops {
		switch {
		case op.Val == nil || op.Prefix:
		case strings.HasPrefix(op.Key, forgetPrefix):
			node := strings.TrimPrefix(op.Key, forgetPrefix)
			if err := f.m.Forget(node); err != nil {
				// The node that took the request saw it down; this
				// one's failure detector is behind. Its leave, when
				// it comes, counts as on purpose.
				f.m.ForgetWhenDown(node)
				f.log.Info("forget_cluster_node: the node still looks alive here; forgotten once it is down", "node", node)
				continue
			}
			if g := f.metaGroup.Load(); g != nil {
				g.Kick()
			}
		case op.Key == rebalanceKey:
			var p rebalancePlan
			if err := json.Unmarshal(op.Val, &p); err != nil {
				return fmt.Errorf("node: rebalance record: %w", err)
			}
			if time.Since(p.At) > rebalanceFresh || f.queues == nil {
				continue
			}
			go f.queues.ApplyRebalance(p.Moves)
		}
	}
	return nil
}
