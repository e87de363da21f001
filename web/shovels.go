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
	Delete(actor, vhost, name string) (bool, error)
	Params(vhost string) []shovel.Param
	Param(vhost, name string) (shovel.Param, bool)
	Statuses(vhost string) []shovel.Status
	Restart(vhost, name string) (bool, error)
}

func (s *Server) shovelRoutes(m func(string, access, handler), pol, mg access) {
	c := s.shovelParams()
	m("GET /api/parameters", pol, c.list(false))
	m("GET /api/parameters/shovel", pol, c.list(false))
	m("GET /api/parameters/shovel/{vhost}", pol, c.list(true))
	m("GET /api/parameters/shovel/{vhost}/{name}", pol, c.get)
	m("PUT /api/parameters/shovel/{vhost}/{name}", pol, c.put)
	m("DELETE /api/parameters/shovel/{vhost}/{name}", pol, c.delete)
	var statuses func(string) []shovel.Status
	if s.shovels != nil {
		statuses = s.shovels.Statuses
	}
	vhostOf := func(st shovel.Status) string { return st.VHost }
	m("GET /api/shovels", mg, listStatuses(s, statuses, vhostOf, false))
	m("GET /api/shovels/{vhost}", mg, listStatuses(s, statuses, vhostOf, true))
	m("DELETE /api/shovels/vhost/{vhost}/{name}/restart", pol, c.restart)
}

// shovelParams is the shovels' component of the parameters API.
func (s *Server) shovelParams() paramAPI {
	c := paramAPI{s: s, what: "shovel", redact: shovel.Redacted}
	if sh := s.shovels; sh != nil {
		c.putFn, c.delFn, c.paramsFn, c.paramFn, c.restartFn = sh.Put, sh.Delete, sh.Params, sh.Param, sh.Restart
	}
	return c
}

// paramAPI is one component of the shovel manager's runtime parameters
// (shovels, MQTT bridges) in the API: its definitions and restarts, one
// set of handlers for every component. Nil functions: the component is
// not run here (404, or an empty list).
type paramAPI struct {
	s         *Server
	what      string // "shovel", "bridge": in messages
	static    string // where a definition of the configuration file is changed
	redact    func(map[string]any) map[string]any
	putFn     func(vhost, name, user string, value map[string]any) (bool, error)
	delFn     func(actor, vhost, name string) (bool, error)
	paramsFn  func(vhost string) []shovel.Param
	paramFn   func(vhost, name string) (shovel.Param, bool)
	restartFn func(vhost, name string) (bool, error)
}

// visible lists the definitions of vhost ("" all) u may use, redacted.
func (c paramAPI) visible(u *auth.User, vhost string) []shovel.Param {
	out := []shovel.Param{}
	if c.paramsFn == nil {
		return out
	}
	for _, p := range c.paramsFn(vhost) {
		if c.s.usesVHost(u, p.VHost) {
			p.Value = c.redact(p.Value)
			out = append(out, p)
		}
	}
	return out
}

func (c paramAPI) list(byVHost bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		vhost := ""
		if byVHost {
			v, ok := c.s.writeVHost(w, r, u)
			if !ok {
				return
			}
			vhost = v.Name()
		}
		out := c.visible(u, vhost)
		if !byVHost && r.URL.Path == "/api/parameters" {
			out = append(out, c.s.bridgeParams().visible(u, "")...) // every component
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (c paramAPI) get(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := c.s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if c.paramFn == nil {
		notFound(w)
		return
	}
	p, ok := c.paramFn(v.Name(), pathValue(r, "name"))
	if !ok {
		notFound(w)
		return
	}
	p.Value = c.redact(p.Value)
	writeJSON(w, http.StatusOK, p)
}

func (c paramAPI) put(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := c.s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if c.putFn == nil {
		notFound(w)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	value, ok := body["value"].(map[string]any)
	if !ok {
		badRequest(w, "Validation failed\n\nvalue: a "+c.what+" definition object is required\n")
		return
	}
	created, err := c.putFn(v.Name(), pathValue(r, "name"), u.Name(), value)
	var fe *shovel.FieldError
	switch {
	case errors.As(err, &fe):
		badRequest(w, "Validation failed\n\n"+fe.Error()+"\n")
		return
	case errors.Is(err, shovel.ErrStatic):
		badRequest(w, "the "+c.what+" is declared in the configuration file ("+c.static+"); change it there")
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	putStatus(w, !created)
}

func (c paramAPI) delete(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := c.s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if c.delFn == nil {
		notFound(w)
		return
	}
	found, err := c.delFn(u.Name(), v.Name(), pathValue(r, "name"))
	switch {
	case errors.Is(err, shovel.ErrStatic):
		badRequest(w, "the "+c.what+" is declared in the configuration file ("+c.static+"); remove it there")
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
	case !found:
		notFound(w)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// restart stops the definition's worker and starts it again.
func (c paramAPI) restart(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := c.s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if c.restartFn == nil {
		notFound(w)
		return
	}
	found, err := c.restartFn(v.Name(), pathValue(r, "name"))
	switch {
	case errors.Is(err, shovel.ErrNotHere):
		badRequest(w, "the "+c.what+" runs on another node of the cluster; restart it through that node's API")
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
	case !found:
		notFound(w)
	default:
		c.s.log.Info(c.what+" restarted via the API", "vhost", v.Name(), c.what, pathValue(r, "name"), "by", u.Name())
		w.WriteHeader(http.StatusNoContent)
	}
}

// listStatuses lists the states (of shovels, of bridges) of the vhost in
// the path, or of every vhost u sees; statuses nil: none run here.
func listStatuses[S any](s *Server, statuses func(vhost string) []S, vhostOf func(S) string, byVHost bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		out := []S{}
		vhost := ""
		if byVHost {
			v, ok := s.readVHost(w, r, u)
			if !ok {
				return
			}
			vhost = v.Name()
		}
		if statuses != nil {
			for _, st := range statuses(vhost) {
				if s.seesVHost(u, vhostOf(st)) {
					out = append(out, st)
				}
			}
		}
		writeJSON(w, http.StatusOK, out)
	}
}
