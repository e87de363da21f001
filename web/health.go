package web

import (
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// RabbitMQ's health checks (GET /api/health/checks/...): each answers 200
// {"status":"ok"} or 503 {"status":"failed","reason":...} with what
// failed. RabbitMQ lets any management user call them; here they need the
// monitoring (or administrator) tag, as the rest of the node-wide
// monitoring API does: their answers name every vhost's queues and the
// node's certificate files.

// healthRoutes registers the health checks with access acc.
func (s *Server) healthRoutes(m func(string, access, handler), acc access) {
	m("GET /api/health/checks/alarms", acc, s.alarmsHealth)
	m("GET /api/health/checks/local-alarms", acc, s.localAlarmsHealth)
	m("GET /api/health/checks/virtual-hosts", acc, s.virtualHostsHealth)
	m("GET /api/health/checks/stored-messages", acc, s.storedMessagesHealth)
	m("GET /api/health/checks/node-is-mirror-sync-critical", acc, ok) // no mirrored queues
	m("GET /api/health/checks/port-listener/{port}", acc, s.portListener)
	m("GET /api/health/checks/protocol-listener/{protocol}", acc, s.protocolListener)
	m("GET /api/health/checks/certificate-expiration/{within}/{unit}", acc, s.certificateExpiration)
	// node-is-quorum-critical: clusterops.go.
}

func ok(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// failed answers a failed check: 503 with the reason and details.
func failed(w http.ResponseWriter, reason string, details map[string]any) {
	body := map[string]any{"status": "failed", "reason": reason}
	for k, v := range details {
		body[k] = v
	}
	writeJSON(w, http.StatusServiceUnavailable, body)
}

// activeAlarms lists this node's raised resource alarms as RabbitMQ
// formats them: {"node": ..., "resource": "memory" or "disk"}.
func (s *Server) activeAlarms() []map[string]string {
	var active []string
	if a, okA := s.core.(interface{ Alarms() *exchange.Alarms }); okA && a.Alarms() != nil {
		active = a.Alarms().Active()
	}
	out := make([]map[string]string, 0, len(active))
	for _, a := range active {
		out = append(out, map[string]string{"node": s.node, "resource": a})
	}
	return out
}

// alarmsHealth is RabbitMQ's alarms check: 503 while a resource alarm is
// raised. Each node's alarms are its own (a cluster does not share them),
// so it sees this node's, as local-alarms does.
func (s *Server) alarmsHealth(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if alarms := s.activeAlarms(); len(alarms) > 0 {
		failed(w, "There are alarms in effect in the cluster", map[string]any{"alarms": alarms})
		return
	}
	ok(w, r, u)
}

// localAlarmsHealth is RabbitMQ's local-alarms check: 503 while a
// resource alarm is raised on this node.
func (s *Server) localAlarmsHealth(w http.ResponseWriter, r *http.Request, u *auth.User) {
	if alarms := s.activeAlarms(); len(alarms) > 0 {
		failed(w, "There are alarms in effect on the node", map[string]any{"alarms": alarms})
		return
	}
	ok(w, r, u)
}

// virtualHostsHealth is RabbitMQ's virtual-hosts check: 503 listing the
// vhosts that are not running. A vhost here runs as long as it exists,
// so every vhost the core lists answers.
func (s *Server) virtualHostsHealth(w http.ResponseWriter, r *http.Request, u *auth.User) {
	down := []string{}
	for _, name := range s.core.VHosts() {
		if _, found := s.core.VHost(name); !found {
			down = append(down, name)
		}
	}
	if len(down) > 0 {
		failed(w, "Some virtual hosts are down", map[string]any{"virtual-hosts": down})
		return
	}
	ok(w, r, u)
}

// storedMessagesHealth fails with 503 once a queue found stored messages
// it could not read back (a record that does not decode): Trident's own
// check, RabbitMQ has none.
func (s *Server) storedMessagesHealth(w http.ResponseWriter, r *http.Request, u *auth.User) {
	var bad map[string]int
	if c, okC := s.core.(interface{ UnreadableMessages() map[string]int }); okC {
		bad = c.UnreadableMessages()
	}
	if len(bad) == 0 {
		ok(w, r, u)
		return
	}
	failed(w, "stored messages could not be read (see the log)", map[string]any{"queues": bad})
}
