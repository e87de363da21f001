package web

import (
	"net/http"

	"github.com/trident-broker/trident/auth"
)

// routes registers every endpoint with the access it needs.
func (s *Server) routes() {
	m := func(pattern string, acc access, h handler) { s.mux.HandleFunc(pattern, s.authed(acc, s.audited(h))) }
	const (
		mg  = accManagement
		mon = accMonitoring
		adm = accAdministrator
		pol = accPolicymaker
	)
	s.mux.HandleFunc("GET /api/auth", s.authSettings)
	m("GET /api/whoami", mg, s.whoami)
	m("GET /api/overview", mg, s.overview)
	m("GET /api/cluster-name", mg, s.getClusterName)
	m("PUT /api/cluster-name", adm, s.putClusterName)
	m("GET /api/nodes", mon, s.listNodes)
	m("GET /api/nodes/{node}", mon, s.getNode)
	m("GET /api/nodes/{node}/memory", mon, s.getNodeMemory)
	m("GET /api/extensions", mg, func(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
		writeJSON(w, http.StatusOK, []any{})
	})

	m("GET /api/connections", mg, s.listConnections)
	m("GET /api/connections/{name}", mg, s.getConnection)
	m("DELETE /api/connections/{name}", mg, s.closeConnection)
	m("GET /api/connections/{name}/channels", mg, s.connectionChannels)
	m("GET /api/vhosts/{vhost}/connections", mg, s.listVHostConnections)
	m("GET /api/channels", mg, s.listChannels)
	m("GET /api/channels/{name}", mg, s.getChannel)
	m("GET /api/vhosts/{vhost}/channels", mg, s.listVHostChannels)
	m("GET /api/consumers", mg, s.listConsumers)
	m("GET /api/consumers/{vhost}", mg, s.listVHostConsumers)

	m("GET /api/exchanges", mg, s.listExchanges)
	m("GET /api/exchanges/{vhost}", mg, s.listVHostExchanges)
	m("GET /api/exchanges/{vhost}/{name}", mg, s.getExchange)
	m("PUT /api/exchanges/{vhost}/{name}", mg, s.putExchange)
	m("DELETE /api/exchanges/{vhost}/{name}", mg, s.deleteExchange)
	m("POST /api/exchanges/{vhost}/{name}/publish", mg, s.publish)
	m("GET /api/exchanges/{vhost}/{name}/bindings/source", mg, s.exchangeBindings(true))
	m("GET /api/exchanges/{vhost}/{name}/bindings/destination", mg, s.exchangeBindings(false))

	m("GET /api/queues", mg, s.listQueues)
	m("GET /api/queues/{vhost}", mg, s.listVHostQueues)
	m("GET /api/queues/{vhost}/{name}", mg, s.getQueue)
	m("PUT /api/queues/{vhost}/{name}", mg, s.putQueue)
	m("DELETE /api/queues/{vhost}/{name}", mg, s.deleteQueue)
	m("DELETE /api/queues/{vhost}/{name}/contents", mg, s.purgeQueue)
	m("POST /api/queues/{vhost}/{name}/get", mg, s.getMessages)
	m("GET /api/queues/{vhost}/{name}/bindings", mg, s.queueBindings)
	m("GET /api/queues/{vhost}/{name}/browse", mg, s.browseQueue)

	m("GET /api/bindings", mg, s.listBindings)
	m("GET /api/bindings/{vhost}", mg, s.listVHostBindings)
	m("GET /api/bindings/{vhost}/e/{source}/q/{destination}", mg, s.listBetween(true))
	m("POST /api/bindings/{vhost}/e/{source}/q/{destination}", mg, s.createBinding(true))
	m("GET /api/bindings/{vhost}/e/{source}/q/{destination}/{props}", mg, s.getBinding(true))
	m("DELETE /api/bindings/{vhost}/e/{source}/q/{destination}/{props}", mg, s.deleteBinding(true))
	m("GET /api/bindings/{vhost}/e/{source}/e/{destination}", mg, s.listBetween(false))
	m("POST /api/bindings/{vhost}/e/{source}/e/{destination}", mg, s.createBinding(false))
	m("GET /api/bindings/{vhost}/e/{source}/e/{destination}/{props}", mg, s.getBinding(false))
	m("DELETE /api/bindings/{vhost}/e/{source}/e/{destination}/{props}", mg, s.deleteBinding(false))

	m("GET /api/vhosts", mg, s.listVHosts)
	m("GET /api/vhosts/{vhost}", mg, s.getVHost)
	m("PUT /api/vhosts/{vhost}", adm, s.putVHost)
	m("DELETE /api/vhosts/{vhost}", adm, s.deleteVHost)
	m("GET /api/vhosts/{vhost}/permissions", adm, s.vhostPermissions)
	m("GET /api/vhosts/{vhost}/topic-permissions", adm, s.vhostTopicPermissions)

	m("GET /api/users", adm, s.listUsers)
	m("GET /api/users/without-permissions", adm, s.usersWithoutPermissions)
	m("POST /api/users/bulk-delete", adm, s.bulkDeleteUsers)
	m("GET /api/users/{user}", adm, s.getUser)
	m("PUT /api/users/{user}", adm, s.putUser)
	m("DELETE /api/users/{user}", adm, s.deleteUser)
	m("GET /api/users/{user}/permissions", adm, s.userPermissions)
	m("GET /api/users/{user}/topic-permissions", adm, s.userTopicPermissions)

	m("GET /api/permissions", adm, s.listPermissions)
	m("GET /api/permissions/{vhost}/{user}", adm, s.getPermission)
	m("PUT /api/permissions/{vhost}/{user}", adm, s.putPermission)
	m("DELETE /api/permissions/{vhost}/{user}", adm, s.deletePermission)
	m("GET /api/topic-permissions", adm, s.listTopicPermissions)
	m("GET /api/topic-permissions/{vhost}/{user}", adm, s.getTopicPermission)
	m("PUT /api/topic-permissions/{vhost}/{user}", adm, s.putTopicPermission)
	m("DELETE /api/topic-permissions/{vhost}/{user}", adm, s.deleteTopicPermission)
	s.policyRoutes(m, pol, "/api/policies", policies)
	s.policyRoutes(m, pol, "/api/operator-policies", operatorPolicies)
	s.shovelRoutes(m, pol, mg) // shovels.go
	s.bridgeRoutes(m, pol, mg) // bridges.go
	m("GET /api/global-parameters", mg, s.listGlobalParameters)

	m("GET /api/definitions", adm, s.getDefinitions)
	m("POST /api/definitions", adm, s.postDefinitions(false))
	m("GET /api/definitions/{vhost}", adm, s.getVHostDefinitions)
	m("POST /api/definitions/{vhost}", adm, s.postDefinitions(true))

	s.healthRoutes(m, mon)    // health.go
	s.clusterOpsRoutes(m)     // clusterops.go: node-is-quorum-critical, forget a node, rebalance
	s.featureFlagRoutes(m)    // featureflags.go
	s.maintenanceRoutes(m)    // maintenance.go: drain, revive
	s.mqttRoutes(m, mg)       // mqtt.go: MQTT clients, sessions, retained messages
	s.faultInjectionRoutes(m) // faultinjection.go: partition tests (cluster.fault_injection)
	m("GET /api/aliveness-test/{vhost}", mg, s.aliveness)
	m("GET /api/latency", mg, s.listLatencies)          // latency_api.go (Trident)
	m("GET /api/latency/{vhost}", mg, s.vhostLatencies) // latency_api.go (Trident)
	// Other paths, /api/ ones included, go to the UI's handler at "/",
	// which answers unknown /api/ paths with the API's JSON 404.
}

func (s *Server) usersWithoutPermissions(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	has := map[string]bool{}
	for _, p := range s.users.ListPermissions() {
		has[p.User] = true
	}
	out := []userJSON{}
	for _, u := range s.users.ListUsers() {
		if !has[u.Name()] {
			out = append(out, userJSONOf(u))
		}
	}
	writeJSON(w, http.StatusOK, out)
}
