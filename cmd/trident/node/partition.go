package node

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strconv"

	"github.com/trident-broker/trident/auth"
)

// Fault injection for partition tests (cluster.fault_injection): the
// management listener also serves
//
//	PUT /api/cluster/partition  {"blocked": ["host:port", ...]}
//	GET /api/cluster/partition
//
// for administrators. PUT cuts this node off from the listed Raft (mux)
// addresses, as Mux.SetBlocked; an empty list heals. GET returns the list.

// partitionPath is the fault injection endpoint.
const partitionPath = "/api/cluster/partition"

// maxPartitionBody bounds a PUT body.
const maxPartitionBody = 64 << 10

// partitionBody is the endpoint's JSON.
type partitionBody struct {
	Blocked []string `json:"blocked"`
}

// httpHandler is the management listener's handler: the API, plus the
// fault injection endpoint when enabled.
func (n *Node) httpHandler() http.Handler {
	api := n.api.Handler()
	if !n.cfg.Cluster.Enabled() || !n.cfg.Cluster.FaultInjection {
		return api
	}
	n.log.Warn("cluster.fault_injection is on: " + partitionPath + " can partition this node")
	put, get := n.admin(n.putPartition), n.admin(n.getPartition)
	// Not a ServeMux: it would clean the API's %2F paths before the API
	// sees them.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != partitionPath {
			api.ServeHTTP(w, r)
			return
		}
		switch r.Method {
		case http.MethodPut:
			put(w, r)
		case http.MethodGet:
			get(w, r)
		default:
			w.Header().Set("Allow", "GET, PUT")
			writePartitionJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method_not_allowed"})
		}
	})
}

// admin wraps h with HTTP basic authentication of an administrator.
func (n *Node) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, pass, ok := r.BasicAuth()
		var remote net.Addr
		if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			p, _ := strconv.Atoi(port)
			remote = &net.TCPAddr{IP: net.ParseIP(host), Port: p}
		}
		var u *auth.User
		var err error
		if ok {
			u, err = n.users.Authenticate(name, pass, remote)
		}
		if !ok || err != nil || !u.HasTag("administrator") {
			w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
			writePartitionJSON(w, http.StatusUnauthorized, map[string]string{"error": "not_authorised", "reason": "Not administrator user"})
			return
		}
		h(w, r)
	}
}

func (n *Node) putPartition(w http.ResponseWriter, r *http.Request) {
	m := n.Mux()
	if m == nil {
		writePartitionJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "not_clustered"})
		return
	}
	var b partitionBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPartitionBody))
	if err := dec.Decode(&b); err != nil {
		writePartitionJSON(w, http.StatusBadRequest, map[string]string{"error": "bad_request", "reason": err.Error()})
		return
	}
	m.SetBlocked(b.Blocked)
	n.log.Warn("fault injection: partition set", "blocked", b.Blocked)
	w.WriteHeader(http.StatusNoContent)
}

func (n *Node) getPartition(w http.ResponseWriter, r *http.Request) {
	b := partitionBody{Blocked: []string{}}
	if m := n.Mux(); m != nil {
		b.Blocked = append(b.Blocked, m.Blocked()...)
		slices.Sort(b.Blocked)
	}
	writePartitionJSON(w, http.StatusOK, b)
}

func writePartitionJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
