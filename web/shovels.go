package web

import (
	"errors"
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/shovel"
)

// Dynamic shovels, in RabbitMQ's shapes (rabbitmq_shovel_management):
//
//	GET    /api/parameters                         every parameter (the shovels)
//	GET    /api/parameters/shovel[/{vhost}]         the shovels' definitions
//	GET    /api/parameters/shovel/{vhost}/{name}    one (404 if none)
//	PUT    /api/parameters/shovel/{vhost}/{name}    {"value": {...}}: 201, 204 if it existed;
//	                                                400 naming the field that does not validate
//	DELETE /api/parameters/shovel/{vhost}/{name}    204, 404 if none
//	GET    /api/shovels[/{vhost}]                   each shovel's state (starting, running,
//	                                                terminated with its reason)
//	DELETE /api/shovels/vhost/{vhost}/{name}/restart  stops the shovel and starts it again:
//	                                                204, 404 if none, 400 if it runs on
//	                                                another node (that node's API restarts it)
//
// Parameters and restarts need the policymaker or administrator tag (and
// access to the vhost); the shovels' states need the monitoring tag or vhost access.
// Neither shows the URIs' passwords (shovel.Redacted); the definitions
// export (administrators only) keeps them, so that it can be imported.

// Shovels is what the API needs of the shovel manager (shovel.Manager).
type Shovels interface {
	Put(vhost, name, user string, value map[string]any) (created bool, err error)
	Delete(vhost, name string) (bool, error)
	Params(vhost string) []shovel.Param
	Param(vhost, name string) (shovel.Param, bool)
	Statuses(vhost string) []shovel.Status
	Restart(vhost, name string) (bool, error)
}

func (s *Server) shovelRoutes(m func(string, access, handler), pol, mg access) {
	m("GET /api/parameters", pol, s.listParams(false))
	m("GET /api/parameters/shovel", pol, s.listParams(false))
	m("GET /api/parameters/shovel/{vhost}", pol, s.listParams(true))
	m("GET /api/parameters/shovel/{vhost}/{name}", pol, s.getParam)
	m("PUT /api/parameters/shovel/{vhost}/{name}", pol, s.putParam)
	m("DELETE /api/parameters/shovel/{vhost}/{name}", pol, s.deleteParam)
	m("GET /api/shovels", mg, s.listShovels(false))
	m("GET /api/shovels/{vhost}", mg, s.listShovels(true))
	m("DELETE /api/shovels/vhost/{vhost}/{name}/restart", pol, s.restartShovel)
}

func (s *Server) restartShovel(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.shovels == nil {
		notFound(w)
		return
	}
	found, err := s.shovels.Restart(v.Name(), pathValue(r, "name"))
	switch {
	case errors.Is(err, shovel.ErrNotHere):
		badRequest(w, "the shovel runs on another node of the cluster; restart it through that node's API")
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
	case !found:
		notFound(w)
	default:
		s.log.Info("shovel restarted via the API", "vhost", v.Name(), "shovel", pathValue(r, "name"), "by", u.Name())
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) listParams(byVHost bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		out := []shovel.Param{}
		if s.shovels == nil {
			writeJSON(w, http.StatusOK, out)
			return
		}
		vhost := ""
		if byVHost {
			v, ok := s.writeVHost(w, r, u)
			if !ok {
				return
			}
			vhost = v.Name()
		}
		for _, p := range s.shovels.Params(vhost) {
			if s.usesVHost(u, p.VHost) {
				p.Value = shovel.Redacted(p.Value)
				out = append(out, p)
			}
		}
		if !byVHost && r.URL.Path == "/api/parameters" {
			out = append(out, s.bridgeParams(u, "")...) // bridges.go
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) getParam(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.shovels == nil {
		notFound(w)
		return
	}
	p, ok := s.shovels.Param(v.Name(), pathValue(r, "name"))
	if !ok {
		notFound(w)
		return
	}
	p.Value = shovel.Redacted(p.Value)
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) putParam(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.shovels == nil {
		notFound(w)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	value, ok := body["value"].(map[string]any)
	if !ok {
		badRequest(w, "Validation failed\n\nvalue: a shovel definition object is required\n")
		return
	}
	created, err := s.shovels.Put(v.Name(), pathValue(r, "name"), u.Name(), value)
	var fe *shovel.FieldError
	switch {
	case errors.As(err, &fe):
		badRequest(w, "Validation failed\n\n"+fe.Error()+"\n")
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	putStatus(w, !created)
}

func (s *Server) deleteParam(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.shovels == nil {
		notFound(w)
		return
	}
	found, err := s.shovels.Delete(v.Name(), pathValue(r, "name"))
	switch {
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
	case !found:
		notFound(w)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) listShovels(byVHost bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		out := []shovel.Status{}
		if s.shovels == nil {
			writeJSON(w, http.StatusOK, out)
			return
		}
		vhost := ""
		if byVHost {
			v, ok := s.readVHost(w, r, u)
			if !ok {
				return
			}
			vhost = v.Name()
		}
		for _, st := range s.shovels.Statuses(vhost) {
			if s.seesVHost(u, st.VHost) {
				out = append(out, st)
			}
		}
		writeJSON(w, http.StatusOK, out)
	}
}
