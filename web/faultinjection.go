package web

import (
	"errors"
	"net/http"
	"slices"

	"github.com/trident-broker/trident/auth"
)

// Fault injection for partition tests (cluster.fault_injection), served
// only when Options.FaultInjection is set, to administrators, through the
// API's own rules (guard.go: JSON bodies, bounded; authed: no Basic
// challenge):
//
//	PUT /api/cluster/partition  {"blocked": ["host:port", ...]}
//	GET /api/cluster/partition
//
// PUT cuts this node off from the listed Raft (mux) addresses (204); an
// empty or missing list heals. GET answers {"blocked": [...]}, sorted.

// FaultInjector is the node's Raft multiplexer as partition tests drive it
// (cluster/mux.Mux.SetBlocked and Blocked).
type FaultInjector interface {
	// SetBlocked refuses the cluster traffic of addrs from now on (none:
	// heal). ErrNotClustered while this node runs no multiplexer.
	SetBlocked(addrs []string) error
	// Blocked lists the addresses refused now.
	Blocked() []string
}

// ErrNotClustered is returned by a FaultInjector of a node that runs no
// cluster multiplexer (503).
var ErrNotClustered = errors.New("web: this node is not clustered")

// partitionJSON is the endpoint's body.
type partitionJSON struct {
	Blocked []string `json:"blocked"`
}

func (s *Server) faultInjectionRoutes(m func(string, access, handler)) {
	if s.faults == nil {
		return
	}
	m("PUT /api/cluster/partition", accAdministrator, s.putPartition)
	m("GET /api/cluster/partition", accAdministrator, s.getPartition)
}

func (s *Server) putPartition(w http.ResponseWriter, r *http.Request, u *auth.User) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var blocked []string
	switch v := body["blocked"].(type) {
	case nil:
	case []any:
		for _, a := range v {
			addr, ok := a.(string)
			if !ok {
				badRequest(w, "blocked: a list of host:port strings is required")
				return
			}
			blocked = append(blocked, addr)
		}
	default:
		badRequest(w, "blocked: a list of host:port strings is required")
		return
	}
	if err := s.faults.SetBlocked(blocked); err != nil {
		writeError(w, http.StatusServiceUnavailable, "not_clustered", err.Error())
		return
	}
	s.log.Warn("fault injection: partition set", "blocked", blocked, "by", u.Name())
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getPartition(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	b := partitionJSON{Blocked: append([]string{}, s.faults.Blocked()...)}
	slices.Sort(b.Blocked)
	writeJSON(w, http.StatusOK, b)
}
