package web

import (
	"errors"
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/shovel"
)

// MQTT bridges (shovel.BridgeDefinition: Mosquitto's connection blocks),
// kept and run by the shovel manager, as parameters of component
// "mqtt-bridge" in the shovels' shapes:
//
//	GET    /api/parameters/mqtt-bridge[/{vhost}]        the bridges' definitions
//	GET    /api/parameters/mqtt-bridge/{vhost}/{name}   one (404 if none)
//	PUT    /api/parameters/mqtt-bridge/{vhost}/{name}   {"value": {...}}: 201, 204 if it existed;
//	                                                    400 naming the key that does not validate,
//	                                                    or for a bridge of the configuration file
//	DELETE /api/parameters/mqtt-bridge/{vhost}/{name}   204, 404 if none, 400 for the file's
//	GET    /api/mqtt/bridges[/{vhost}]                  each bridge's state (starting, running,
//	                                                    terminated with its reason), messages in/out
//	DELETE /api/mqtt/bridges/{vhost}/{name}/restart     as a shovel's restart
//
// The same rights as shovels: definitions and restarts need the
// policymaker or administrator tag (and access to the vhost); states the
// monitoring tag or vhost access. remote_password is never shown. The
// bridge acts here as the user who declared it.

// Bridges is what the API needs of the shovel manager for MQTT bridges.
type Bridges interface {
	PutComponent(component, vhost, name, user string, value map[string]any) (created bool, err error)
	DeleteComponent(component, vhost, name string) (bool, error)
	ParamsComponent(component, vhost string) []shovel.Param
	ParamComponent(component, vhost, name string) (shovel.Param, bool)
	RestartComponent(component, vhost, name string) (bool, error)
	BridgeStatuses(vhost string) []shovel.BridgeStatus
}

const bridgeComponent = shovel.ComponentMQTTBridge

func (s *Server) bridgeRoutes(m func(string, access, handler), pol, mg access) {
	m("GET /api/parameters/mqtt-bridge", pol, s.listBridgeParams(false))
	m("GET /api/parameters/mqtt-bridge/{vhost}", pol, s.listBridgeParams(true))
	m("GET /api/parameters/mqtt-bridge/{vhost}/{name}", pol, s.getBridgeParam)
	m("PUT /api/parameters/mqtt-bridge/{vhost}/{name}", pol, s.putBridgeParam)
	m("DELETE /api/parameters/mqtt-bridge/{vhost}/{name}", pol, s.deleteBridgeParam)
	m("GET /api/mqtt/bridges", mg, s.listBridges(false))
	m("GET /api/mqtt/bridges/{vhost}", mg, s.listBridges(true))
	m("DELETE /api/mqtt/bridges/{vhost}/{name}/restart", pol, s.restartBridge)
}

// bridgeParams lists the definitions of vhost ("" all) u may use.
func (s *Server) bridgeParams(u *auth.User, vhost string) []shovel.Param {
	out := []shovel.Param{}
	if s.bridges == nil {
		return out
	}
	for _, p := range s.bridges.ParamsComponent(bridgeComponent, vhost) {
		if s.usesVHost(u, p.VHost) {
			p.Value = shovel.RedactedBridge(p.Value)
			out = append(out, p)
		}
	}
	return out
}

func (s *Server) listBridgeParams(byVHost bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		vhost := ""
		if byVHost {
			v, ok := s.writeVHost(w, r, u)
			if !ok {
				return
			}
			vhost = v.Name()
		}
		writeJSON(w, http.StatusOK, s.bridgeParams(u, vhost))
	}
}

func (s *Server) getBridgeParam(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.bridges == nil {
		notFound(w)
		return
	}
	p, ok := s.bridges.ParamComponent(bridgeComponent, v.Name(), pathValue(r, "name"))
	if !ok {
		notFound(w)
		return
	}
	p.Value = shovel.RedactedBridge(p.Value)
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) putBridgeParam(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.bridges == nil {
		notFound(w)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	value, ok := body["value"].(map[string]any)
	if !ok {
		badRequest(w, "Validation failed\n\nvalue: a bridge definition object is required\n")
		return
	}
	created, err := s.bridges.PutComponent(bridgeComponent, v.Name(), pathValue(r, "name"), u.Name(), value)
	var fe *shovel.FieldError
	switch {
	case errors.As(err, &fe):
		badRequest(w, "Validation failed\n\n"+fe.Error()+"\n")
		return
	case errors.Is(err, shovel.ErrStatic):
		badRequest(w, "the bridge is declared in the configuration file (mqtt.bridges); change it there")
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	putStatus(w, !created)
}

func (s *Server) deleteBridgeParam(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.bridges == nil {
		notFound(w)
		return
	}
	found, err := s.bridges.DeleteComponent(bridgeComponent, v.Name(), pathValue(r, "name"))
	switch {
	case errors.Is(err, shovel.ErrStatic):
		badRequest(w, "the bridge is declared in the configuration file (mqtt.bridges); remove it there")
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
	case !found:
		notFound(w)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) listBridges(byVHost bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		out := []shovel.BridgeStatus{}
		if s.bridges == nil {
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
		for _, st := range s.bridges.BridgeStatuses(vhost) {
			if s.seesVHost(u, st.VHost) {
				out = append(out, st)
			}
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) restartBridge(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	if s.bridges == nil {
		notFound(w)
		return
	}
	found, err := s.bridges.RestartComponent(bridgeComponent, v.Name(), pathValue(r, "name"))
	switch {
	case errors.Is(err, shovel.ErrNotHere):
		badRequest(w, "the bridge runs on another node of the cluster; restart it through that node's API")
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
	case !found:
		notFound(w)
	default:
		s.log.Info("bridge restarted via the API", "vhost", v.Name(), "bridge", pathValue(r, "name"), "by", u.Name())
		w.WriteHeader(http.StatusNoContent)
	}
}
