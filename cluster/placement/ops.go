package placement

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

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

// CatchingUpMetaKey is the key of a node's gossiped metadata that lists,
// comma-separated, the members of the groups it leads that are alive but
// have not caught up with its log (CatchingUp). Other nodes read it in
// QuorumCritical; a node that does not gossip it (an older one) is taken
// to lead no member that is catching up, as before.
const CatchingUpMetaKey = "catching-up"

const (
	// catchUpSlack is how many entries a follower's log may lack of the
	// leader's (as the follower's latest answer showed) and still count
	// as caught up: what a pipeline has on the wire, not a backlog.
	catchUpSlack = 256
	// catchUpFresh is how recent that answer must be: a follower answers
	// a heartbeat at least every 400 ms.
	catchUpFresh = 3 * time.Second
	// maxCatchingUpMeta bounds the gossiped list (memberlist's metadata
	// is 512 bytes in all); names past it are left out.
	maxCatchingUpMeta = 200
)

// catchingUp lists the voters of g, led here, other than this node,
// that are alive and have not caught up with this node's log (as far as
// lags tells), sorted; nil when this node does not lead g or lags is
// nil.
func (p *Placer) catchingUp(g groupHere, lags FollowerLags, alive map[string]bool, now time.Time) []string {
	if lags == nil || g.r.State() != raft.Leader {
		return nil
	}
	f := g.r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if s.Suffrage != raft.Voter || id == p.c.Self || !alive[id] {
			continue
		}
		lag, at, ok := lags.FollowerLag(g.qq.group, s.Address)
		if !ok || now.Sub(at) > catchUpFresh || lag > catchUpSlack {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// CatchingUp lists, sorted, the nodes that are alive voters of a group
// led here but have not caught up with its log: a member just added (or
// back after a while away) that is still being sent the entries or the
// snapshot it lacks. Until it has caught up it cannot stand in for
// another member: a group of the leader and it has no working majority.
func (p *Placer) CatchingUp() []string {
	lags, _ := p.c.Groups.(FollowerLags)
	if lags == nil {
		return nil
	}
	alive, now := p.aliveSet(), time.Now()
	set := map[string]bool{}
	p.cuMu.Lock()
	for id := range p.cuAdding {
		set[id] = true
	}
	p.cuMu.Unlock()
	for _, g := range p.groupsHere() {
		for _, id := range p.catchingUp(g, lags, alive, now) {
			set[id] = true
		}
	}
	return sorted(slices.Collect(maps.Keys(set)))
}

// WatchCatchingUp calls changed with CatchingUp every time it differs
// from the last value (first when it is not empty), looking every
// every, until the Placer closes, and at once when this node is about to
// add a member to a group it leads (adding): the node gossips it under
// CatchingUpMetaKey. changed may wait (for the gossip's broadcast).
func (p *Placer) WatchCatchingUp(every time.Duration, changed func(names []string)) {
	p.cuMu.Lock()
	p.cuChanged = changed
	p.cuMu.Unlock()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
			}
			p.announceCatchingUp()
		}
	}()
}

// announceCatchingUp calls WatchCatchingUp's callback if CatchingUp
// changed since it last did.
func (p *Placer) announceCatchingUp() {
	now := p.CatchingUp()
	p.cuMu.Lock()
	defer p.cuMu.Unlock()
	if p.cuChanged != nil && !slices.Equal(now, p.cuLast) {
		p.cuLast = now
		p.cuChanged(now)
	}
}

// adding marks id as catching up while this node adds it to a group it
// leads, and announces it before the add: the other members must not
// count it online from the moment they see it in the configuration until
// this node has seen it caught up (catchingUp covers it once it is a
// voter). The returned func ends the mark, once the add is done.
func (p *Placer) adding(id string) (done func()) {
	p.cuMu.Lock()
	if p.cuAdding == nil {
		p.cuAdding = map[string]int{}
	}
	p.cuAdding[id]++
	p.cuMu.Unlock()
	p.announceCatchingUp()
	return func() {
		p.cuMu.Lock()
		if p.cuAdding[id]--; p.cuAdding[id] <= 0 {
			delete(p.cuAdding, id)
		}
		p.cuMu.Unlock()
	}
}

// EncodeCatchingUp is names as gossiped under CatchingUpMetaKey, at most
// maxCatchingUpMeta bytes.
func EncodeCatchingUp(names []string) string {
	out := ""
	for _, n := range names {
		if len(out)+len(n)+1 > maxCatchingUpMeta {
			break
		}
		if out != "" {
			out += ","
		}
		out += n
	}
	return out
}

// catchingUpBy is what the alive nodes gossip under CatchingUpMetaKey, by
// node.
func (p *Placer) catchingUpBy() map[string][]string {
	out := map[string][]string{}
	for _, m := range p.c.Members() {
		if v := m.Meta[CatchingUpMetaKey]; v != "" && m.Status == discovery.StatusAlive {
			out[m.Name] = strings.Split(v, ",")
		}
	}
	return out
}

// QuorumCritical lists, sorted, the queues whose voters online now, this
// node included, are a bare majority or fewer, so that without this node
// they have none. A voter is online when its node is alive and, unless
// it is this node, has caught up with the group's leader: a member still
// being sent what it lacks cannot stand in for this one yet (without it
// the group would wait for it). Where this node leads, that is seen from
// the follower's answers (CatchingUp); where another node leads, from
// what that leader gossips (CatchingUpMetaKey).
func (p *Placer) QuorumCritical() []Critical {
	alive := p.aliveSet()
	lags, _ := p.c.Groups.(FollowerLags)
	gossiped := p.catchingUpBy()
	now := time.Now()
	var out []Critical
	for _, g := range p.groupsHere() {
		voters := g.voters()
		if !slices.Contains(voters, p.c.Self) {
			continue
		}
		behind := p.catchingUp(g, lags, alive, now)
		if _, leader := g.r.LeaderWithID(); leader != "" && string(leader) != p.c.Self {
			behind = gossiped[string(leader)]
		}
		var online []string
		for _, id := range voters {
			if alive[id] && (id == p.c.Self || !slices.Contains(behind, id)) {
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
