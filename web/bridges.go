package web

import "github.com/trident-broker/trident/shovel"

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
	DeleteComponent(actor, component, vhost, name string) (bool, error)
	ParamsComponent(component, vhost string) []shovel.Param
	ParamComponent(component, vhost, name string) (shovel.Param, bool)
	RestartComponent(component, vhost, name string) (bool, error)
	BridgeStatuses(vhost string) []shovel.BridgeStatus
}

const bridgeComponent = shovel.ComponentMQTTBridge

func (s *Server) bridgeRoutes(m func(string, access, handler), pol, mg access) {
	c := s.bridgeParams()
	m("GET /api/parameters/mqtt-bridge", pol, c.list(false))
	m("GET /api/parameters/mqtt-bridge/{vhost}", pol, c.list(true))
	m("GET /api/parameters/mqtt-bridge/{vhost}/{name}", pol, c.get)
	m("PUT /api/parameters/mqtt-bridge/{vhost}/{name}", pol, c.put)
	m("DELETE /api/parameters/mqtt-bridge/{vhost}/{name}", pol, c.delete)
	var statuses func(string) []shovel.BridgeStatus
	if s.bridges != nil {
		statuses = s.bridges.BridgeStatuses
	}
	vhostOf := func(st shovel.BridgeStatus) string { return st.VHost }
	m("GET /api/mqtt/bridges", mg, listStatuses(s, statuses, vhostOf, false))
	m("GET /api/mqtt/bridges/{vhost}", mg, listStatuses(s, statuses, vhostOf, true))
	m("DELETE /api/mqtt/bridges/{vhost}/{name}/restart", pol, c.restart)
}

// bridgeParams is the MQTT bridges' component of the parameters API
// (shovels.go).
func (s *Server) bridgeParams() paramAPI {
	c := paramAPI{s: s, what: "bridge", static: "mqtt.bridges", redact: shovel.RedactedBridge}
	if b := s.bridges; b != nil {
		c.putFn = func(vhost, name, user string, value map[string]any) (bool, error) {
			return b.PutComponent(bridgeComponent, vhost, name, user, value)
		}
		c.delFn = func(actor, vhost, name string) (bool, error) {
			return b.DeleteComponent(actor, bridgeComponent, vhost, name)
		}
		c.paramsFn = func(vhost string) []shovel.Param { return b.ParamsComponent(bridgeComponent, vhost) }
		c.paramFn = func(vhost, name string) (shovel.Param, bool) { return b.ParamComponent(bridgeComponent, vhost, name) }
		c.restartFn = func(vhost, name string) (bool, error) { return b.RestartComponent(bridgeComponent, vhost, name) }
	}
	return c
}
