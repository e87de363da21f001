package web

import (
	"errors"
	"fmt"
	"net/http"
	"unicode"
	"unicode/utf8"

	"github.com/trident-broker/trident/auth"
)

// The cluster's name, as RabbitMQ keeps it: GET /api/cluster-name for any
// management user, PUT /api/cluster-name {"name": "..."} for
// administrators. /api/overview's cluster_name and the UI's header show
// the same name. Which name, first that is set:
//   - the name set through PUT, which the node keeps as a cluster-wide
//     record (RabbitMQ's cluster_name runtime parameter: in a cluster
//     every node shows it);
//   - the configured name (cluster.name, Options.ClusterName);
//   - the node's own name alone, or in a cluster the first member's name
//     in name order, which every node agrees on (RabbitMQ too names a
//     cluster after one of its nodes).

// ClusterNameStore keeps the name set through the API.
type ClusterNameStore interface {
	// StoredClusterName returns the name set through the API, "" when
	// none was.
	StoredClusterName() string
	// SetClusterName stores name for the whole cluster; it returns once
	// the record is committed (replicated in a cluster).
	SetClusterName(name string) error
}

// maxClusterName bounds a cluster name in bytes (RabbitMQ's limit for
// names of objects).
const maxClusterName = 255

// clusterName is the name shown by /api/overview and /api/cluster-name.
func (s *Server) clusterName() string {
	if s.clusterNames != nil {
		if n := s.clusterNames.StoredClusterName(); n != "" {
			return n
		}
	}
	if s.clusterNameConf != "" {
		return s.clusterNameConf
	}
	if s.cluster == nil {
		return s.node
	}
	name := s.node
	for _, m := range s.cluster.ClusterMembers() {
		if m.Name < name {
			name = m.Name
		}
	}
	return name
}

func (s *Server) getClusterName(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	writeJSON(w, http.StatusOK, map[string]string{"name": s.clusterName()})
}

// checkClusterName validates a name given to PUT /api/cluster-name.
func checkClusterName(v any) (string, error) {
	name, ok := v.(string)
	switch {
	case !ok:
		return "", errors.New(`"name" must be a string`)
	case name == "":
		return "", errors.New(`"name" must not be empty`)
	case len(name) > maxClusterName:
		return "", fmt.Errorf(`"name" is longer than %d bytes`, maxClusterName)
	case !utf8.ValidString(name):
		return "", errors.New(`"name" is not valid UTF-8`)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return "", errors.New(`"name" holds a control character`)
		}
	}
	return name, nil
}

func (s *Server) putClusterName(w http.ResponseWriter, r *http.Request, u *auth.User) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name, err := checkClusterName(body["name"])
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	if s.clusterNames == nil {
		writeError(w, http.StatusMethodNotAllowed, "not_allowed", "this node keeps no cluster name")
		return
	}
	if err := s.clusterNames.SetClusterName(name); err != nil {
		writeError(w, http.StatusServiceUnavailable, "cluster_name_not_stored", err.Error())
		return
	}
	s.log.Info("cluster name set via the API", "name", name, "by", u.Name())
	w.WriteHeader(http.StatusNoContent)
}

// globalParameters are RabbitMQ's global runtime parameters that Trident
// keeps: cluster_name, once set through the API.
func (s *Server) globalParameters() []map[string]any {
	out := []map[string]any{}
	if s.clusterNames != nil {
		if n := s.clusterNames.StoredClusterName(); n != "" {
			out = append(out, map[string]any{"name": "cluster_name", "value": n})
		}
	}
	return out
}

func (s *Server) listGlobalParameters(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	writeJSON(w, http.StatusOK, s.globalParameters())
}
