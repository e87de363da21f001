package node

import (
	"context"
	"net"
	"time"

	"github.com/trident-broker/trident/cluster/forward"
	"github.com/trident-broker/trident/cluster/placement"
	"github.com/trident-broker/trident/exchange"
)

// Where a durable queue's messages live in a cluster is cluster/placement's
// business (the node's exchange.Cluster); this file wires it: the
// forwarder and the forwarding server over the mux's "fwd" stream, the
// groups host, the message store, the membership and its events.

// fwdStream is the mux stream of the forwarding RPC (cluster/forward).
const fwdStream = "fwd"

// startClusterQueues places the broker's durable queues in the cluster and
// serves peers' forwarded traffic on the mux's "fwd" stream.
func (n *Node) startClusterQueues(f *clusterFrontEnd) {
	m := f.raft.mux
	fwd := forward.New(func(ctx context.Context, addr string) (net.Conn, error) {
		d := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			d = time.Until(dl)
		}
		return m.Dial(addr, fwdStream, d)
	}, n.log)
	fwd.SetMetaIndex(f.raft.meta.Applied)
	// Only members the metadata group admitted are placed on: a node in
	// the gossip ring with another cookie or CA is never a queue's member.
	p := placement.New(placement.Config{Self: n.nodeName(), Addr: m.Addr, Members: f.placeable,
		Groups: f.raft.host, Remotes: fwd, Store: n.broker.MessageStore(),
		Topology: placement.BrokerTopology{B: n.broker}, Log: n.log, Flags: f.raft.meta.Flags().Enabled})
	fg := placement.StartForgetter(placement.ForgetConfig{Self: n.nodeName(), Members: f.m.Members,
		MetaLeader: n.MetaLeader, MetaRaft: f.raft.meta.Raft(), Forget: n.broker.ForgetNode, Log: n.log})
	f.queues = p
	f.forget.Store(fg)
	f.placer.Store(p) // membership events reach it from now on
	// The members still catching up in groups led here, for the other
	// nodes' node-is-quorum-critical check.
	p.WatchCatchingUp(time.Second, func(names []string) {
		if err := n.gossipMetaKey(f, placement.CatchingUpMetaKey, placement.EncodeCatchingUp(names)); err != nil {
			n.log.Warn("cluster: could not gossip the members catching up", "err", err)
		}
	})
	n.broker.SetCluster(p)
	ln, err := m.Listener(fwdStream)
	if err != nil {
		n.log.Error("forwarding listener", "err", err)
		return
	}
	srv := forward.NewServer(n.broker, func(idx uint64) { f.raft.meta.WaitApplied(idx) }, n.log)
	f.fwd = srv
	go func() {
		if err := srv.Serve(ln); err != nil {
			n.log.Debug("forwarding listener stopped", "err", err)
		}
	}()
}

// QueueNode implements web.QueueLocator: a classic queue's home, a quorum
// queue's leader as this node knows it, and its members.
func (v clusterView) QueueNode(q *exchange.Queue) (string, []string) {
	f := v.n.clusterFront()
	if f == nil || f.queues == nil {
		return "", nil
	}
	if !q.Replicated() {
		return q.Home(), nil
	}
	return f.queues.LeaderOf(q), f.queues.MembersOf(q)
}
