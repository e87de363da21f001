package meta

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/discovery"
)

// RaftMetaKey is the key of a member's gossiped metadata holding its mux
// address (its raft.ServerAddress).
const RaftMetaKey = "raft"

// BootstrapExpect waits until members shows at least expect alive members
// that gossip a Raft address and whose mux accepts this node (the probe:
// cookie and certificate checked both ways), then bootstraps the group
// with all of them (sorted by name, so every node that starts with the
// same view proposes the same configuration). A member in the gossip ring
// that the probe refuses never counts. It returns early, without
// bootstrapping, once the group has state here (a leader added this node)
// and with ctx's error when ctx ends. Start exactly expect nodes with the
// same expect.
func (g *Group) BootstrapExpect(ctx context.Context, expect int, members func() []discovery.Member) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if g.r.LastIndex() > 0 {
			return nil
		}
		if servers := g.probed(raftServers(members())); len(servers) >= expect {
			g.log.Info("meta: bootstrapping", "servers", servers)
			return g.Bootstrap(servers)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stop:
			return ErrClosed
		}
	}
}

// raftServers are the alive members with a Raft address, sorted by name.
func raftServers(ms []discovery.Member) []raft.Server {
	var out []raft.Server
	for _, m := range ms {
		if a := m.Meta[RaftMetaKey]; a != "" && m.Status == discovery.StatusAlive {
			out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.Name), Address: raft.ServerAddress(a)})
		}
	}
	slices.SortFunc(out, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// probed keeps the servers whose mux accepts this node (itself always).
func (g *Group) probed(servers []raft.Server) []raft.Server {
	self := raft.ServerID(g.c.Host.Self().ID)
	out := servers[:0:0]
	for _, s := range servers {
		if s.ID != self {
			if err := g.probe(string(s.Address)); err != nil {
				g.warnRefused(string(s.ID), string(s.Address), err)
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// Kick asks the reconciler to run now (call it on discovery events).
func (g *Group) Kick() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func (g *Group) reconcileLoop() {
	t := time.NewTicker(g.c.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.kick:
		}
		if g.IsLeader() {
			g.Reconcile(g.c.Members())
		}
	}
}

// Reconcile, on the leader, brings the Raft configuration in line with
// membership: an alive member that is not a server (or is one under
// another address) is added as a voter once a connection to its metadata
// RPC stream succeeds (the mux's TLS, cookie and stream checks pass both
// ways); a member that left on purpose is
// removed; a dead member stays (it may come back; an operator removes it).
// On a follower it does nothing. It returns the number of changes made.
func (g *Group) Reconcile(members []discovery.Member) int {
	if !g.IsLeader() {
		return 0
	}
	cf := g.r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return 0
	}
	have := map[raft.ServerID]raft.ServerAddress{}
	for _, s := range cf.Configuration().Servers {
		have[s.ID] = s.Address
	}
	self := raft.ServerID(g.c.Host.Self().ID)
	changes := 0
	for _, m := range members {
		id, addr := raft.ServerID(m.Name), raft.ServerAddress(m.Meta[RaftMetaKey])
		cur, in := have[id]
		switch {
		case m.Status == discovery.StatusAlive && addr != "" && cur != addr:
			if miss := g.missingFlags(m); len(miss) > 0 {
				// A node of an older release: it could not read the
				// entries the enabled flags let the cluster write.
				g.warnLimited(string(id), string(addr), "meta: member not added: the cluster has feature flags enabled that its release does not support; upgrade it to this cluster's release",
					"node", id, "addr", addr, "missing_feature_flags", miss)
				continue
			}
			if err := g.probe(string(addr)); err != nil {
				// Not (yet) a node this one can talk to: a member whose
				// group is still starting, or one that has the gossip key
				// but whose certificate or cookie the mux refuses. Making
				// it a voter would only cost the group a vote.
				g.warnRefused(string(id), string(addr), err)
				continue
			}
			if err := g.r.AddVoter(id, addr, 0, 5*time.Second).Error(); err != nil {
				g.log.Warn("meta: add voter", "node", id, "addr", addr, "err", err)
				continue
			}
			g.log.Info("meta: added voter", "node", id, "addr", addr)
			changes++
		case m.Status == discovery.StatusLeft && in && id != self:
			if err := g.r.RemoveServer(id, 0, 5*time.Second).Error(); err != nil {
				g.log.Warn("meta: remove server", "node", id, "err", err)
				continue
			}
			g.log.Info("meta: removed server that left", "node", id)
			changes++
		}
	}
	return changes
}

// probe dials the metadata RPC stream of the mux at addr and hangs up.
func (g *Group) probe(addr string) error {
	if g.c.Mux == nil {
		return nil
	}
	c, err := g.c.Mux.Dial(addr, RPCStream, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
