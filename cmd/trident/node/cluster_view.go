package node

import "github.com/trident-broker/trident/web"

// clusterView's Raft side for the management API (web.ClusterLeaders):
// who leads the metadata group and which quorum queues this node leads.

var _ web.ClusterLeaders = clusterView{}

// MetaLeader names the metadata group's leader, "" while there is none.
func (v clusterView) MetaLeader() string { return v.n.MetaLeader() }

// QuorumLeaderOf lists the quorum queues this node leads, as
// vhost + "/" + name, sorted; nil before the cluster's queues are up.
func (v clusterView) QuorumLeaderOf() []string {
	f := v.n.clusterFront()
	if f == nil || f.queues == nil {
		return nil
	}
	return f.queues.Leaders()
}
