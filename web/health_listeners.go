package web

import (
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/trident-broker/trident/auth"
)

// Listener is one listener the node serves, as the node's registry of
// listeners has it: /api/overview and /api/nodes list them, and the
// protocol-listener, port-listener and certificate-expiration health
// checks look at them.
type Listener struct {
	// Protocol is RabbitMQ's protocol name: "amqp", "amqp/ssl", "mqtt",
	// "mqtt/ssl", "http/web-mqtt", "https/web-mqtt", "stomp",
	// "stomp/ssl", "http/web-stomp", "https/web-stomp", "http", "https",
	// "http/prometheus", "https/prometheus" or "clustering".
	Protocol string
	Addr     net.Addr
	// SocketOpts is the listener's socket_opts in the API; nil shows {}.
	// It never holds a file name or a secret: any management user sees it.
	SocketOpts map[string]any
	// CertFile and CAFile are a TLS listener's certificate and CA
	// certificate files (PEM), which certificate-expiration reads; "" for
	// a plain listener.
	CertFile, CAFile string
}

type listenerJSON struct {
	Node       string         `json:"node"`
	Protocol   string         `json:"protocol"`
	IPAddress  string         `json:"ip_address"`
	Port       int            `json:"port"`
	SocketOpts map[string]any `json:"socket_opts"`
}

func (s *Server) listenerOf(node string, l Listener) listenerJSON {
	h, p := splitHostPort(l.Addr.String())
	if h == "" { // every address, as a listen address ":port" resolves
		h = "::"
	}
	opts := l.SocketOpts
	if opts == nil {
		opts = map[string]any{}
	}
	return listenerJSON{Node: node, Protocol: l.Protocol, IPAddress: h, Port: p, SocketOpts: opts}
}

// listenersJSON lists this node's listeners, in the order they opened.
func (s *Server) listenersJSON() []listenerJSON {
	out := []listenerJSON{}
	for _, l := range s.listeners() {
		if l.Addr != nil {
			out = append(out, s.listenerOf(s.node, l))
		}
	}
	return out
}

// clusterListenersJSON is /api/overview's listeners: this node's, then
// what the other running members gossip of theirs (their AMQP and HTTP
// listeners and their two clustering ports), as RabbitMQ lists every
// running node's listeners there.
func (s *Server) clusterListenersJSON() []listenerJSON {
	out := s.listenersJSON()
	if s.cluster == nil {
		return out
	}
	for _, m := range s.cluster.ClusterMembers() {
		if m.Name != s.node && m.Running {
			out = append(out, remoteListeners(m)...)
		}
	}
	return out
}

// remoteListeners are the listeners another member gossips about itself.
func remoteListeners(m ClusterMember) []listenerJSON {
	out := []listenerJSON{}
	add := func(protocol, addr string, opts map[string]any) {
		h, p := splitHostPort(addr)
		if addr == "" || p == 0 {
			return
		}
		if opts == nil {
			opts = map[string]any{}
		}
		out = append(out, listenerJSON{Node: m.Name, Protocol: protocol, IPAddress: h, Port: p, SocketOpts: opts})
	}
	add("amqp", m.Meta["amqp"], nil)
	add("http", m.Meta["http"], nil)
	add("clustering", m.GossipAddr, map[string]any{"role": "gossip"})
	add("clustering", m.Meta["raft"], map[string]any{"role": "inter-node"})
	return out
}

// protocolAliases maps the names RabbitMQ's protocol-listener check
// accepts to its listener protocol names; any other name is looked up as
// given (lower-cased). Trident adds the Prometheus names and the same
// "+tls", "+ssl" and "/tls" forms for every TLS listener. AMQP 1.0's
// names are not aliases of "amqp" here: Trident does not speak it.
var protocolAliases = func() map[string]string {
	m := map[string]string{
		"amqp091": "amqp", "amqp0.9.1": "amqp", "amqp0-9-1": "amqp", "amqp0_9_1": "amqp",
		"mqtt3.1": "mqtt", "mqtt3.1.1": "mqtt", "mqtt31": "mqtt", "mqtt311": "mqtt", "mqtt3_1": "mqtt", "mqtt3_1_1": "mqtt",
		"mqtt5": "mqtt", "mqtt5.0": "mqtt",
		"stomp1.0": "stomp", "stomp1.1": "stomp", "stomp1.2": "stomp", "stomp10": "stomp", "stomp11": "stomp",
		"stomp12": "stomp", "stomp1_0": "stomp", "stomp1_1": "stomp", "stomp1_2": "stomp",
		"http1": "http", "http1.1": "http", "http_api": "http", "management": "http", "management_ui": "http", "ui": "http",
		"cli": "clustering", "distribution": "clustering",
		"prometheus": "http/prometheus",
	}
	for _, p := range []string{"amqp", "mqtt", "stomp"} {
		for _, a := range []string{p + "s", p + "+tls", p + "+ssl", p + "/tls"} {
			m[a] = p + "/ssl"
		}
	}
	for _, p := range []string{"web-mqtt", "web-stomp"} {
		bare := strings.ReplaceAll(p, "-", "")
		under := strings.ReplaceAll(p, "-", "_")
		for _, n := range []string{p, bare, under} {
			m[n] = "http/" + p
			for _, sfx := range []string{"/tls", "/ssl", "+tls", "+ssl"} {
				m[n+sfx] = "https/" + p
			}
		}
	}
	for _, sfx := range []string{"/tls", "/ssl", "+tls", "+ssl"} {
		m["prometheus"+sfx] = "https/prometheus"
	}
	return m
}()

// listenerProtocol is the listener protocol name a protocol-listener
// check asks about.
func listenerProtocol(name string) string {
	name = strings.ToLower(name)
	if p, ok := protocolAliases[name]; ok {
		return p
	}
	return name
}

// protocolListener is RabbitMQ's protocol-listener check: 200 when this
// node serves a listener of the protocol, else 503 naming those it has.
func (s *Server) protocolListener(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	p := listenerProtocol(pathValue(r, "protocol"))
	protos := []string{}
	for _, l := range s.listenersJSON() {
		if l.Protocol == p {
			writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "protocol": p})
			return
		}
		protos = append(protos, l.Protocol)
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "failed", "reason": "No active listener",
		"missing": p, "protocols": protos})
}

// portListener is RabbitMQ's port-listener check: 200 when this node
// serves a listener on the port, else 503 naming the ports it has.
func (s *Server) portListener(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	port, err := strconv.Atoi(pathValue(r, "port"))
	if err != nil {
		badRequest(w, "Invalid port")
		return
	}
	ports := []int{}
	for _, l := range s.listenersJSON() {
		if l.Port == port {
			writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "port": port})
			return
		}
		ports = append(ports, l.Port)
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "failed", "reason": "No active listener",
		"missing": port, "ports": ports})
}
