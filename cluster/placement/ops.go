package placement

import (
	"slices"
	"sort"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
)

// Operations on the replicated queues with a member here, for the
// management API: which are quorum-critical, and spreading their leaders
// over the nodes.

// Critical is a replicated queue that loses its majority without this
// node.
type Critical struct {
	VHost, Name string
	Members     []string // its voters
	Online      []string // those alive, this node included
}

// Move is a planned leadership move. It is part of the metadata record
// of a rebalance: its JSON form is a wire format.
type Move struct {
	QueueID uint64 `json:"queue_id"`
	VHost   string `json:"vhost"`
	Name    string `json:"name"`
	From    string `json:"from"`
	To      string `json:"to"`
}

// groupHere is a replicated queue whose group runs on this node.
type groupHere struct {
	qq *quorumQueue
	r  *raft.Raft
}

func (p *Placer) groupsHere() []groupHere {
	var out []groupHere
	for _, qq := range p.queues() {
		if r := qq.raft(); r != nil {
			out = append(out, groupHere{qq: qq, r: r})
		}
	}
	return out
}

func (g groupHere) voters() []string {
	ids, _ := servers(g.r, true)
	return ids
}

func (p *Placer) aliveSet() map[string]bool {
	alive := map[string]bool{p.c.Self: true}
	for _, m := range p.c.Members() {
		if m.Status == discovery.StatusAlive {
			alive[m.Name] = true
		}
	}
	return alive
}

// QuorumCritical lists, sorted, the queues whose voters alive now, this
// node included, are a bare majority or fewer, so that without this node
// they have none.
func (p *Placer) QuorumCritical() []Critical {
	alive := p.aliveSet()
	var out []Critical
	for _, g := range p.groupsHere() {
		voters := g.voters()
		if !slices.Contains(voters, p.c.Self) {
			continue
		}
		var online []string
		for _, id := range voters {
			if alive[id] {
				online = append(online, id)
			}
		}
		if len(online)-1 < len(voters)/2+1 {
			out = append(out, Critical{VHost: g.qq.q.VHost(), Name: g.qq.q.Name(), Members: voters, Online: online})
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

// PlanRebalance moves, one queue at a time, a leader from the alive node
// leading the most queues to the alive member of that queue leading the
// fewest, while they differ by more than one. It plans from the queues
// with a member here (in a cluster no larger than the groups, all).
func (p *Placer) PlanRebalance() []Move {
	alive := p.aliveSet()
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
	for _, g := range p.groupsHere() {
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
	var moves []Move
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
		moves = append(moves, Move{QueueID: best.g.qq.q.ID(), VHost: best.g.qq.q.VHost(), Name: best.g.qq.q.Name(),
			From: best.leader, To: bestTo})
		count[best.leader]--
		count[bestTo]++
		best.leader = bestTo
		moved[best] = true
	}
	return moves
}

// ApplyRebalance hands the leadership of the planned queues this node
// leads to their targets. It waits for each transfer: call it on a
// goroutine of its own.
func (p *Placer) ApplyRebalance(moves []Move) {
	for _, m := range moves {
		qq := p.queue(m.QueueID)
		if qq == nil {
			continue
		}
		r := qq.raft()
		if r == nil || r.State() != raft.Leader {
			continue
		}
		addr, err := p.addrOf(m.To)
		if err == nil {
			err = r.LeadershipTransferToServer(raft.ServerID(m.To), raft.ServerAddress(addr)).Error()
		}
		if err != nil {
			p.log.Warn("rebalance: leadership not transferred", "queue", m.Name, "to", m.To, "err", err)
			continue
		}
		p.log.Info("rebalance: leadership transferred", "vhost", m.VHost, "queue", m.Name, "to", m.To)
	}
}
