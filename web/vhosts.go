package web

import (
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// vhostMeta is a vhost's description and tags, kept by the core.
type vhostMeta struct {
	Description string
	Tags        []string
}

type vhostJSON struct {
	Name             string            `json:"name"`
	Description      string            `json:"description"`
	Tags             []string          `json:"tags"`
	DefaultQueueType string            `json:"default_queue_type"`
	Metadata         map[string]any    `json:"metadata"`
	Tracing          bool              `json:"tracing"`
	ClusterState     map[string]string `json:"cluster_state"`
	lengthsJSON
	MessageStats msgStatsJSON `json:"message_stats"`
	// Messages waiting for a retry (x-retry-delays): out of their queues
	// until the delay passes.
	MessagesRetrying int64 `json:"messages_retrying"`
}

func (s *Server) meta(name string) vhostMeta {
	m := vhostMeta{Tags: []string{}}
	if v, ok := s.core.VHost(name); ok {
		m.Description, m.Tags = v.Metadata()
		if m.Tags == nil {
			m.Tags = []string{}
		}
	}
	return m
}

func (s *Server) vhostJSONAge(v *exchange.VHost, r *http.Request) vhostJSON {
	var ready, unacked int64
	for _, q := range v.Queues() {
		st := q.Status()
		ready += int64(st.Ready)
		unacked += int64(st.Unacked)
	}
	m := s.meta(v.Name())
	w := s.rates.vhost(v.Name(), historyAge(r))
	return vhostJSON{Name: v.Name(), Description: m.Description, Tags: m.Tags, DefaultQueueType: "classic",
		Metadata:     map[string]any{"description": m.Description, "tags": m.Tags},
		ClusterState: map[string]string{s.node: "running"}, lengthsJSON: lengths(ready, unacked, w),
		MessageStats: messageStats(kindVHost, v.MsgStats(), w), MessagesRetrying: v.MessagesRetrying()}
}

func vName(v *exchange.VHost) string { return v.Name() }

func (s *Server) listVHosts(w http.ResponseWriter, r *http.Request, u *auth.User) {
	var vs []*exchange.VHost
	for _, n := range s.core.VHosts() {
		// Unlike other objects, monitoring users list only vhosts they
		// have permissions in, unless administrator (as RabbitMQ).
		if isAdmin(u) || s.users.CanAccessVHost(u, n) || isMonitor(u) {
			if v, ok := s.core.VHost(n); ok {
				vs = append(vs, v)
			}
		}
	}
	respondList(w, r, listSpec[*exchange.VHost, vhostJSON]{refs: vs, name: vName,
		build: func(v *exchange.VHost) vhostJSON { return s.vhostJSONAge(v, r) }})
}

func (s *Server) getVHost(w http.ResponseWriter, r *http.Request, u *auth.User) {
	name := pathValue(r, "vhost")
	if !s.seesVHost(u, name) {
		noVHostAccess(w)
		return
	}
	v, ok := s.core.VHost(name)
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.vhostJSONAge(v, r))
}

// putVHost creates a vhost (201; 204 if it exists) and, as RabbitMQ does,
// gives the creating user full permissions in it.
func (s *Server) putVHost(w http.ResponseWriter, r *http.Request, u *auth.User) {
	name := pathValue(r, "vhost")
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	_, existed := s.core.VHost(name)
	if err := s.core.EnsureVHost(name); err != nil {
		writeError(w, http.StatusInternalServerError, "internal_server_error", err.Error())
		return
	}
	m := s.meta(name)
	if _, ok := body["description"]; ok {
		m.Description = strField(body, "description")
	}
	if t, ok := body["tags"]; ok {
		m.Tags = tagList(t)
	}
	if err := s.core.SetVHostMetadata(name, m.Description, m.Tags); err != nil {
		writeError(w, http.StatusInternalServerError, "internal_server_error", err.Error())
		return
	}
	if existed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// The creator gets full permissions, unless it is a token user (OAuth
	// 2), whose permissions are its scopes: a database user of the same
	// name must not get them.
	if !u.IsToken() {
		if err := s.users.SetPermissions(u.Name(), name, ".*", ".*", ".*"); err != nil {
			s.log.Warn("permissions for the vhost's creator", "vhost", name, "err", err)
		}
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) deleteVHost(w http.ResponseWriter, r *http.Request, u *auth.User) {
	name := pathValue(r, "vhost")
	if _, ok := s.core.VHost(name); !ok {
		notFound(w)
		return
	}
	if err := s.core.DeleteVHost(name); err != nil {
		coreError(w, err)
		return
	}
	if err := s.users.ClearVHost(name); err != nil {
		s.log.Warn("clearing permissions of a deleted vhost", "vhost", name, "err", err)
	}
	if s.shovels != nil {
		for _, p := range s.shovels.Params(name) { // its shovels go with it, as in RabbitMQ
			if _, err := s.shovels.Delete(u.Name(), name, p.Name); err != nil {
				s.log.Warn("deleting a shovel of a deleted vhost", "vhost", name, "shovel", p.Name, "err", err)
			}
		}
	}
	if s.bridges != nil {
		for _, p := range s.bridges.ParamsComponent(bridgeComponent, name) { // and its bridges
			if _, err := s.bridges.DeleteComponent(u.Name(), bridgeComponent, name, p.Name); err != nil {
				s.log.Warn("deleting a bridge of a deleted vhost", "vhost", name, "bridge", p.Name, "err", err)
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) vhostPermissions(w http.ResponseWriter, r *http.Request, u *auth.User) {
	name := pathValue(r, "vhost")
	if _, ok := s.core.VHost(name); !ok {
		notFound(w)
		return
	}
	out := []auth.Permission{}
	for _, p := range s.users.ListPermissions() {
		if p.VHost == name {
			out = append(out, p)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
