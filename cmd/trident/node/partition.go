package node

import "github.com/trident-broker/trident/web"

// Fault injection for partition tests (cluster.fault_injection): the
// management API serves /api/cluster/partition (web/faultinjection.go)
// over the node's Raft multiplexer (Mux.SetBlocked).

// faultInjector is the API's web.FaultInjector, nil unless clustering and
// cluster.fault_injection are both on.
func (n *Node) faultInjector() web.FaultInjector {
	if !n.cfg.Cluster.Enabled() || !n.cfg.Cluster.FaultInjection {
		return nil
	}
	n.log.Warn("cluster.fault_injection is on: /api/cluster/partition can partition this node")
	return muxFaults{n}
}

// muxFaults is web.FaultInjector over the mux, once clustering runs.
type muxFaults struct{ n *Node }

func (f muxFaults) SetBlocked(addrs []string) error {
	m := f.n.Mux()
	if m == nil {
		return web.ErrNotClustered
	}
	m.SetBlocked(addrs)
	return nil
}

func (f muxFaults) Blocked() []string {
	if m := f.n.Mux(); m != nil {
		return m.Blocked()
	}
	return nil
}
