package node

import (
	"github.com/trident-broker/trident/cluster/placement"
	"github.com/trident-broker/trident/web"
)

// clusterNameKey is the record of the cluster name set through PUT
// /api/cluster-name. In a cluster it is replicated (placement.OpsKey), so
// every node reads the same name from its local store.
const clusterNameKey = placement.ClusterNameKey

// clusterNames implements web.ClusterNameStore over the node's store.
type clusterNames struct{ n *Node }

var _ web.ClusterNameStore = clusterNames{}

func (c clusterNames) StoredClusterName() string {
	var name string
	_ = c.n.store.LoadMeta(clusterNameKey, func(key string, val []byte) error {
		if key == clusterNameKey {
			name = string(val)
		}
		return nil
	})
	return name
}

func (c clusterNames) SetClusterName(name string) error {
	if c.n.repl != nil { // replicated: every node gets the record
		return c.n.repl.ReplicateMeta([]string{clusterNameKey}, [][]byte{[]byte(name)})
	}
	return c.n.store.PutMeta(clusterNameKey, []byte(name))
}
