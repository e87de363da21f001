package node

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
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
	return strings.HasPrefix(key, forgetPrefix) || key == rebalanceKey
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
	return f.queues.quorumCritical()
}

func (c *clusterQueues) quorumCritical() []web.CriticalQueue {
	alive := map[string]bool{c.self: true}
	for _, m := range c.members() {
		if m.Status == discovery.StatusAlive {
			alive[m.Name] = true
		}
	}
	var out []web.CriticalQueue
	for _, g := range c.groupsHere() {
		voters := g.voters()
		if !slices.Contains(voters, c.self) {
			continue
		}
		var online []string
		for _, id := range voters {
			if alive[id] {
				online = append(online, id)
			}
		}
		if len(online)-1 < len(voters)/2+1 {
			out = append(out, web.CriticalQueue{VHost: g.qq.q.VHost(), Name: g.qq.q.Name(), Members: voters, Online: online})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VHost != out[j].VHost {
			return out[i].VHost < out[j].VHost
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// groupHere is a quorum queue whose group runs on this node.
type groupHere struct {
	qq *quorumQueue
	r  *raft.Raft
}

// groupsHere lists the quorum queues with a member on this node.
func (c *clusterQueues) groupsHere() []groupHere {
	c.mu.Lock()
	qs := make([]*quorumQueue, 0, len(c.quorum))
	for _, qq := range c.quorum {
		qs = append(qs, qq)
	}
	c.mu.Unlock()
	var out []groupHere
	for _, qq := range qs {
		qq.mu.Lock()
		r := qq.r
		qq.mu.Unlock()
		if r != nil {
			out = append(out, groupHere{qq: qq, r: r})
		}
	}
	return out
}

// voters are the group's voting members in its Raft configuration here.
func (g groupHere) voters() []string {
	f := g.r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	sort.Strings(out)
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
	At    time.Time     `json:"at"`
	Moves []plannedMove `json:"moves"`
}

type plannedMove struct {
	QueueID uint64 `json:"queue_id"`
	VHost   string `json:"vhost"`
	Name    string `json:"name"`
	From    string `json:"from"`
	To      string `json:"to"`
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
	moves := f.queues.planRebalance()
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

// planRebalance moves, one queue at a time, a leader from the alive node
// leading the most queues to the alive member of that queue leading the
// fewest, while they differ by more than one.
func (c *clusterQueues) planRebalance() []plannedMove {
	alive := map[string]bool{c.self: true}
	for _, m := range c.members() {
		if m.Status == discovery.StatusAlive {
			alive[m.Name] = true
		}
	}
	type led struct {
		g       groupHere
		leader  string
		members []string
	}
	var qs []*led
	count := map[string]int{}
	for name := range alive {
		count[name] = 0
	}
	for _, g := range c.groupsHere() {
		_, id := g.r.LeaderWithID()
		if id == "" || !alive[string(id)] {
			continue
		}
		var ms []string
		for _, m := range g.voters() {
			if alive[m] {
				ms = append(ms, m)
			}
		}
		qs = append(qs, &led{g: g, leader: string(id), members: ms})
		count[string(id)]++
	}
	sort.Slice(qs, func(i, j int) bool {
		a, b := qs[i].g.qq.q, qs[j].g.qq.q
		if a.VHost() != b.VHost() {
			return a.VHost() < b.VHost()
		}
		return a.Name() < b.Name()
	})
	var moves []plannedMove
	moved := map[*led]bool{}
	for range qs {
		var best *led
		bestTo, bestGain := "", 1
		for _, q := range qs {
			if moved[q] {
				continue
			}
			for _, m := range q.members {
				if gain := count[q.leader] - count[m]; m != q.leader && gain > bestGain {
					best, bestTo, bestGain = q, m, gain
				}
			}
		}
		if best == nil {
			break
		}
		moves = append(moves, plannedMove{QueueID: best.g.qq.q.ID(), VHost: best.g.qq.q.VHost(), Name: best.g.qq.q.Name(),
			From: best.leader, To: bestTo})
		count[best.leader]--
		count[bestTo]++
		best.leader = bestTo
		moved[best] = true
	}
	return moves
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
				f.log.Warn("forget_cluster_node: the node is running here; not forgotten", "node", node, "err", err)
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
			go f.queues.applyRebalance(p.Moves)
		}
	}
	return nil
}

// applyRebalance hands the leadership of the planned queues this node
// leads to their targets.
func (c *clusterQueues) applyRebalance(moves []plannedMove) {
	for _, m := range moves {
		c.mu.Lock()
		qq := c.quorum[m.QueueID]
		c.mu.Unlock()
		if qq == nil {
			continue
		}
		qq.mu.Lock()
		r := qq.r
		qq.mu.Unlock()
		if r == nil || r.State() != raft.Leader {
			continue
		}
		addr, err := c.addrOf(m.To)
		if err == nil {
			err = r.LeadershipTransferToServer(raft.ServerID(m.To), raft.ServerAddress(addr)).Error()
		}
		if err != nil {
			c.log.Warn("rebalance: leadership not transferred", "queue", m.Name, "to", m.To, "err", err)
			continue
		}
		c.log.Info("rebalance: leadership transferred", "vhost", m.VHost, "queue", m.Name, "to", m.To)
	}
}
