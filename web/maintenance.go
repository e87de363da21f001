package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/trident-broker/trident/auth"
)

// Maintenance mode (rabbitmq-upgrade drain / revive; issue 39): POST
// /api/nodes/{node}/drain and /revive, administrator only. They act on
// the node that serves the request: for another node of the cluster they
// answer 400 naming the node to call (a drain closes that node's client
// connections and listeners, which an operator should see happen on the
// node they address, as rabbitmq-upgrade -n does).

// Maintenance is the node's maintenance mode (cluster/drain.Drainer).
type Maintenance interface {
	// Drain suspends the client listeners, closes the client
	// connections and hands over the node's Raft leaderships, bounded
	// by ctx; the node is drained even when a hand-over failed (the
	// error says which).
	Drain(ctx context.Context) error
	// Revive opens the client listeners again.
	Revive() error
	// Draining reports whether the node is drained.
	Draining() bool
}

// drainTimeout bounds the leadership hand-over of a drain request.
const drainTimeout = 60 * time.Second

func (s *Server) maintenanceRoutes(m func(string, access, handler)) {
	m("POST /api/nodes/{node}/drain", accAdministrator, s.drainNode)
	m("POST /api/nodes/{node}/revive", accAdministrator, s.reviveNode)
}

// beingDrained is a node entry's being_drained.
func (s *Server) beingDrained() bool {
	return s.maintenance != nil && s.maintenance.Draining()
}

// maintenanceTarget checks the request's node and body; false when it
// answered.
func (s *Server) maintenanceTarget(w http.ResponseWriter, r *http.Request) bool {
	if _, err := decodeBody(r); err != nil {
		badRequest(w, "the body must be empty or a JSON object")
		return false
	}
	node := pathValue(r, "node")
	if node != s.node {
		known := false
		for _, n := range s.nodesJSON() {
			known = known || n["name"] == node
		}
		if !known {
			notFound(w)
			return false
		}
		badRequest(w, fmt.Sprintf("this is node '%s': send the request to node '%s''s own HTTP API", s.node, node))
		return false
	}
	if s.maintenance == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this node has no maintenance mode")
		return false
	}
	return true
}

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	if !s.maintenanceTarget(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout) // not the request's: it goes on if the client leaves
	defer cancel()
	j := map[string]any{"node": s.node}
	if err := s.maintenance.Drain(ctx); err != nil {
		j["warning"] = "some leaderships were not handed over: " + err.Error()
	}
	j["being_drained"] = s.maintenance.Draining()
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) reviveNode(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	if !s.maintenanceTarget(w, r) {
		return
	}
	if err := s.maintenance.Revive(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"node": s.node, "being_drained": s.maintenance.Draining()})
}
