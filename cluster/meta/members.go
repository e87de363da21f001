package meta

import (
	"sync"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
)

// Who counts as a member. Gossip (discovery) lists every node that
// speaks memberlist with the right gossip key, which says nothing about
// its cookie or certificate; a node is a member of the cluster only once
// the metadata group's leader has probed its mux (cookie and certificate
// checked both ways) and made it a server of the group. Everything that
// picks nodes (quorum queue and stream members, shovel owners) and the
// API's node list ask Admitted or Placeable, never gossip alone.

// servers maps the latest configuration's server ids to their addresses.
func (g *Group) servers() map[string]string {
	out := map[string]string{}
	cf := g.r.GetConfiguration()
	if cf.Error() != nil {
		return out
	}
	for _, s := range cf.Configuration().Servers {
		out[string(s.ID)] = string(s.Address)
	}
	return out
}

// admitted reports whether m is this node or a server of the group at the
// address it gossips (a node that took a member's name but has another
// address, refused by the leader's probe, is not).
func admitted(m discovery.Member, self string, srv map[string]string) bool {
	if m.Name == self {
		return true
	}
	addr, ok := srv[m.Name]
	return ok && addr == m.Meta[RaftMetaKey]
}

// Admitted returns, of ms, this node and the servers of the group: the
// cluster's members. A node in the gossip ring that the cluster refused
// (another cookie, a certificate of another CA), or has not added yet, is
// left out.
func (g *Group) Admitted(ms []discovery.Member) []discovery.Member {
	srv, self := g.servers(), string(g.c.Host.Self().ID)
	out := make([]discovery.Member, 0, len(ms))
	for _, m := range ms {
		if admitted(m, self, srv) {
			out = append(out, m)
		}
	}
	return out
}

// Placeable returns, of ms, what placement may look at: the admitted
// members, and the members that are not alive (those are never picked,
// and a quorum queue's leader needs to see that one left to shrink its
// group, after the metadata group has already removed it).
func (g *Group) Placeable(ms []discovery.Member) []discovery.Member {
	srv, self := g.servers(), string(g.c.Host.Self().ID)
	out := make([]discovery.Member, 0, len(ms))
	for _, m := range ms {
		if admitted(m, self, srv) || m.Status != discovery.StatusAlive {
			out = append(out, m)
		}
	}
	return out
}

// refusalLogEvery is how often a refused member is logged at WARN (DEBUG
// in between: the reconciler probes every ReconcileInterval).
const refusalLogEvery = time.Minute

// refusals remembers when a refused member was last logged at WARN.
type refusals struct {
	mu   sync.Mutex
	last map[string]time.Time // node + " " + addr
}

// warnRefused logs that node, at addr, was not let into the group.
func (g *Group) warnRefused(node, addr string, err error) {
	g.warnLimited(node, addr, "meta: member not added: its Raft port does not accept this node (another cluster cookie or CA, or still starting); it gets no records and is not placed",
		"node", node, "addr", addr, "err", err)
}

// warnLimited logs msg about node at addr at WARN once per
// refusalLogEvery, at DEBUG in between.
func (g *Group) warnLimited(node, addr, msg string, args ...any) {
	key := node + " " + addr
	now := time.Now()
	g.refused.mu.Lock()
	if g.refused.last == nil || len(g.refused.last) >= 1024 {
		g.refused.last = map[string]time.Time{}
	}
	last, seen := g.refused.last[key]
	warn := !seen || now.Sub(last) >= refusalLogEvery
	if warn {
		g.refused.last[key] = now
	}
	g.refused.mu.Unlock()
	if warn {
		g.log.Warn(msg, args...)
	} else {
		g.log.Debug(msg, args...)
	}
}
