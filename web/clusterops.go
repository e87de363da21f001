package web

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/trident-broker/trident/auth"
)

// Cluster operations (issue 16): the quorum-critical health check,
// forgetting a dead node and rebalancing quorum queue leaders. Each is
// served when the node's Cluster implements the interface; standalone the
// health check answers ok (no quorum queue depends on this node) and the
// others 404.

// QuorumCritic is implemented by a Cluster that runs quorum queues.
type QuorumCritic interface {
	// QuorumCritical lists the quorum queues that would lose their
	// majority if this node stopped now: those whose members, this one
	// included, are alive in just a majority, or fewer.
	QuorumCritical() []CriticalQueue
}

// CriticalQueue is one quorum queue of QuorumCritical.
type CriticalQueue struct {
	VHost   string
	Name    string
	Members []string // the group's voters
	Online  []string // those alive now, this node included
}

// NodeForgetter is implemented by a Cluster that can take a node out of
// the cluster for good (rabbitmqctl forget_cluster_node).
type NodeForgetter interface {
	// ForgetClusterNode removes node, which must not be running, from
	// the cluster: from the metadata group and every quorum queue (whose
	// leaders add another node to keep their size). ErrNodeRunning,
	// ErrNodeUnknown or ErrNodeIsSelf when it cannot.
	ForgetClusterNode(node string) error
}

// Errors of NodeForgetter.
var (
	ErrNodeRunning = errors.New("web: the node is running: stop it before forgetting it")
	ErrNodeUnknown = errors.New("web: no such node in the cluster")
	ErrNodeIsSelf  = errors.New("web: a node cannot forget itself: ask another node")
)

// QuorumRebalancer is implemented by a Cluster that can move quorum
// queue leaders (rabbitmq-queues rebalance quorum).
type QuorumRebalancer interface {
	// RebalanceQuorum moves leaders from the nodes that lead the most
	// quorum queues to the members that lead the fewest, until no two
	// alive nodes differ by more than one where a queue can move; it
	// returns the moves asked for (each leader hands over within a
	// moment; one whose transfer fails keeps its queue).
	RebalanceQuorum() ([]LeaderMove, error)
}

// LeaderMove is one quorum queue's leader change asked by a rebalance.
type LeaderMove struct {
	VHost string `json:"vhost"`
	Name  string `json:"name"`
	From  string `json:"from"`
	To    string `json:"to"`
}

func (s *Server) clusterOpsRoutes(m func(string, access, handler)) {
	m("GET /api/health/checks/node-is-quorum-critical", accMonitoring, s.quorumCriticalHealth)
	m("DELETE /api/nodes/{node}", accAdministrator, s.forgetNode)
	m("POST /api/rebalance/queues", accAdministrator, s.rebalanceQueues)
}

// quorumCriticalHealth is RabbitMQ's node-is-quorum-critical check: 503
// listing the quorum queues that would lose their majority without this
// node, else 200.
func (s *Server) quorumCriticalHealth(w http.ResponseWriter, r *http.Request, u *auth.User) {
	qc, okQ := s.cluster.(QuorumCritic)
	if !okQ {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "reason": "single node cluster"})
		return
	}
	crit := qc.QuorumCritical()
	if len(crit) == 0 {
		ok(w, r, u)
		return
	}
	queues := make([]map[string]any, 0, len(crit))
	for _, q := range crit {
		queues = append(queues, map[string]any{
			"name": q.Name, "virtual_host": q.VHost, "type": "quorum", "members": q.Members, "online": q.Online,
			"readable_name": fmt.Sprintf("queue '%s' in vhost '%s'", q.Name, q.VHost), // as RabbitMQ's
		})
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "failed",
		"reason": "There are quorum queues that would lose their quorum if the target node is shut down",
		"queues": queues})
}

// forgetNode is DELETE /api/nodes/{node}: forget_cluster_node.
func (s *Server) forgetNode(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	nf, okF := s.cluster.(NodeForgetter)
	if !okF {
		notFound(w)
		return
	}
	err := nf.ForgetClusterNode(pathValue(r, "node"))
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrNodeUnknown):
		notFound(w)
	case errors.Is(err, ErrNodeRunning), errors.Is(err, ErrNodeIsSelf):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	}
}

// rebalanceQueues is POST /api/rebalance/queues: quorum queue leaders
// spread over the nodes. It answers the moves asked for.
func (s *Server) rebalanceQueues(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	rb, okR := s.cluster.(QuorumRebalancer)
	if !okR {
		writeJSON(w, http.StatusOK, map[string]any{"moves": []LeaderMove{}})
		return
	}
	moves, err := rb.RebalanceQuorum()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	if moves == nil {
		moves = []LeaderMove{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"moves": moves})
}
