package web

import (
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Cluster is what the API needs to list the nodes of a cluster (the node
// implements it over cluster/discovery). Options.Cluster nil means a
// single node.
type Cluster interface {
	// ClusterMembers returns every node seen, the local one included,
	// sorted by name.
	ClusterMembers() []ClusterMember
}

// QueueLocator is implemented by a Cluster that knows where queues live:
// a classic queue's home node, a quorum queue's leader ("" if unknown)
// and members.
type QueueLocator interface {
	QueueNode(q *exchange.Queue) (node string, members []string)
}

// ClusterLeaders is implemented by a Cluster whose nodes replicate over
// Raft. MetaLeader names the node leading the metadata group, "" while
// there is none; QuorumLeaderOf lists the quorum queues the local node
// leads, as vhost + "/" + name, sorted.
type ClusterLeaders interface {
	MetaLeader() string
	QuorumLeaderOf() []string
}

// ClusterMember is one node of the cluster as the local node sees it.
type ClusterMember struct {
	Name string
	// Running is false once the node failed or left.
	Running bool
	// Status is the membership status: alive, dead or left.
	Status string
	// GossipAddr is the node's gossip host:port.
	GossipAddr string
	// Meta is what the node gossips about itself: its listeners'
	// addresses under "amqp", "http" and "raft" are shown (as amqp_addr,
	// http_addr, raft_addr); other keys are not.
	Meta map[string]string
	// Drained is set when the node gossips that it is drained
	// (maintenance mode): its being_drained.
	Drained bool
}

// nodesJSON is /api/nodes: the local node with its statistics, and every
// other member with what the cluster knows of it (RabbitMQ lists stopped
// members too, with running false). With Raft, each entry says whether it
// leads the metadata group (meta_leader) and the local one lists the
// quorum queues it leads (quorum_leader_of).
func (s *Server) nodesJSON() []map[string]any {
	if s.cluster == nil {
		return []map[string]any{s.nodeJSON()}
	}
	members := s.cluster.ClusterMembers()
	out := make([]map[string]any, 0, len(members)+1)
	local := false
	for _, m := range members {
		if m.Name == s.node {
			out = append(out, s.localMemberJSON(m))
			local = true
			continue
		}
		out = append(out, remoteMemberJSON(m))
	}
	if !local { // not yet in its own member list: still report it
		out = append([]map[string]any{s.nodeJSON()}, out...)
	}
	if cl, ok := s.cluster.(ClusterLeaders); ok {
		leader := cl.MetaLeader()
		for _, j := range out {
			j["meta_leader"] = leader != "" && j["name"] == leader
			if j["name"] == s.node {
				led := cl.QuorumLeaderOf()
				if led == nil {
					led = []string{}
				}
				j["quorum_leader_of"] = led
			}
		}
	}
	return out
}

func (s *Server) localMemberJSON(m ClusterMember) map[string]any {
	j := s.nodeJSON()
	j["cluster_status"] = m.Status
	j["gossip_addr"] = m.GossipAddr
	addAddrs(j, m)
	return j
}

// memberAddrKeys are the gossiped metadata keys of a member's listener
// addresses that /api/nodes shows, each as key+"_addr".
var memberAddrKeys = []string{"amqp", "http", "raft"}

func addAddrs(j map[string]any, m ClusterMember) {
	for _, k := range memberAddrKeys {
		if v, ok := m.Meta[k]; ok {
			j[k+"_addr"] = v
		}
	}
}

func remoteMemberJSON(m ClusterMember) map[string]any {
	j := map[string]any{
		"name": m.Name, "type": "disc", "running": m.Running, "cluster_status": m.Status,
		"gossip_addr": m.GossipAddr, "partitions": []any{}, "being_drained": m.Drained,
	}
	addAddrs(j, m)
	j["listeners"] = []listenerJSON{}
	if m.Running {
		j["listeners"] = remoteListeners(m) // health_listeners.go
	}
	return j
}

func (s *Server) listNodes(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	writeJSON(w, http.StatusOK, s.nodesJSON())
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	name := pathValue(r, "node")
	for _, n := range s.nodesJSON() {
		if n["name"] == name {
			if r.URL.Query().Get("memory") == "true" && name == s.node {
				n["memory"] = s.memoryBreakdown()
			}
			writeJSON(w, http.StatusOK, n)
			return
		}
	}
	notFound(w)
}

// getNodeMemory is /api/nodes/{node}/memory (this node only).
func (s *Server) getNodeMemory(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	if pathValue(r, "node") != s.node {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"memory": s.memoryBreakdown()})
}
