package web

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/auth"
)

// ConnectionInfo describes one client connection, whatever its protocol.
type ConnectionInfo struct {
	Name             string
	Protocol         string // "AMQP 0-9-1", ...
	User             string
	VHost            string
	Peer             string // host:port
	Local            string // host:port
	Channels         int
	ConnectedAt      time.Time
	ClientProperties map[string]any
	FrameMax         uint32
	Heartbeat        time.Duration
}

// Connections is what the API needs from the protocol front ends.
type Connections interface {
	ListConnections() []ConnectionInfo
	// CloseConnection closes the named connection with reason; false if
	// there is none.
	CloseConnection(name, reason string) bool
}

// Server is the management API.
type Server struct {
	users *auth.Users
	conns Connections
	node  string
	log   *slog.Logger
	mux   *http.ServeMux
}

// New creates the API over the user database and the connections.
func New(users *auth.Users, conns Connections, nodeName string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{users: users, conns: conns, node: nodeName, log: log, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /api/whoami", s.authed(s.whoami, ""))
	s.mux.HandleFunc("GET /api/overview", s.authed(s.overview, ""))
	s.mux.HandleFunc("GET /api/connections", s.authed(s.listConnections, "monitoring"))
	s.mux.HandleFunc("GET /api/connections/{name}", s.authed(s.getConnection, "monitoring"))
	s.mux.HandleFunc("DELETE /api/connections/{name}", s.authed(s.closeConnection, "administrator"))
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Connection names contain spaces and '>' and arrive escaped; the mux
	// matches on the decoded path, which is what we want.
	if strings.HasSuffix(r.URL.Path, "/") && len(r.URL.Path) > 1 {
		r.URL.Path = strings.TrimSuffix(r.URL.Path, "/")
		r.URL.RawPath = strings.TrimSuffix(r.URL.RawPath, "/")
	}
	s.mux.ServeHTTP(w, r)
}

type ctxUser struct{}

// authed wraps h with HTTP basic authentication. tag, if set, is required
// (administrator satisfies every tag, monitoring satisfies management).
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, *auth.User), tag string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, pass, ok := r.BasicAuth()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
			writeError(w, http.StatusUnauthorized, "not_authorised", "Not_Authorized")
			return
		}
		var remote net.Addr
		if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			p, _ := strconv.Atoi(port)
			remote = &net.TCPAddr{IP: net.ParseIP(host), Port: p}
		}
		u, err := s.users.Authenticate(name, pass, remote)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
			reason := "Login failed"
			if errors.Is(err, auth.ErrLoopbackOnly) {
				reason = "User can only log in via localhost"
			}
			writeError(w, http.StatusUnauthorized, "not_authorised", reason)
			return
		}
		if tag != "" && !hasTag(u, tag) {
			writeError(w, http.StatusUnauthorized, "not_authorised", "Not management user")
			return
		}
		h(w, r, u)
	}
}

func hasTag(u *auth.User, tag string) bool {
	if u.HasTag("administrator") {
		return true
	}
	switch tag {
	case "management":
		return u.HasTag("management") || u.HasTag("monitoring") || u.HasTag("policymaker")
	case "monitoring":
		return u.HasTag("monitoring")
	}
	return u.HasTag(tag)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, errText, reason string) {
	writeJSON(w, status, map[string]string{"error": errText, "reason": reason})
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, u *auth.User) {
	writeJSON(w, http.StatusOK, map[string]any{"name": u.Name(), "tags": u.Tags()})
}

func (s *Server) overview(w http.ResponseWriter, _ *http.Request, u *auth.User) {
	writeJSON(w, http.StatusOK, map[string]any{
		"management_version": "3.10.0",
		"rabbitmq_version":   "3.10.0",
		"product_name":       "Trident",
		"product_version":    "0.1.0",
		"cluster_name":       s.node,
		"node":               s.node,
		"object_totals":      map[string]int{"connections": len(s.conns.ListConnections())},
	})
}

// connectionJSON renders a connection with RabbitMQ's field names.
func (s *Server) connectionJSON(c ConnectionInfo) map[string]any {
	peerHost, peerPort := splitHostPort(c.Peer)
	host, port := splitHostPort(c.Local)
	props := c.ClientProperties
	if props == nil {
		props = map[string]any{}
	}
	return map[string]any{
		"name":              c.Name,
		"node":              s.node,
		"protocol":          c.Protocol,
		"user":              c.User,
		"vhost":             c.VHost,
		"peer_host":         peerHost,
		"peer_port":         peerPort,
		"host":              host,
		"port":              port,
		"channels":          c.Channels,
		"connected_at":      c.ConnectedAt.UnixMilli(),
		"client_properties": props,
		"frame_max":         c.FrameMax,
		"timeout":           int(c.Heartbeat / time.Second),
		"state":             "running",
		"type":              "network",
		"ssl":               false,
		"auth_mechanism":    "PLAIN",
	}
}

func splitHostPort(hp string) (string, int) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func (s *Server) visible(u *auth.User, c ConnectionInfo) bool {
	return u.HasTag("administrator") || u.HasTag("monitoring") || c.User == u.Name()
}

func (s *Server) listConnections(w http.ResponseWriter, _ *http.Request, u *auth.User) {
	out := []map[string]any{}
	for _, c := range s.conns.ListConnections() {
		if s.visible(u, c) {
			out = append(out, s.connectionJSON(c))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) findConnection(r *http.Request) (ConnectionInfo, bool) {
	name := r.PathValue("name")
	if n, err := url.PathUnescape(name); err == nil {
		name = n
	}
	for _, c := range s.conns.ListConnections() {
		if c.Name == name {
			return c, true
		}
	}
	return ConnectionInfo{}, false
}

func (s *Server) getConnection(w http.ResponseWriter, r *http.Request, u *auth.User) {
	c, ok := s.findConnection(r)
	if !ok || !s.visible(u, c) {
		writeError(w, http.StatusNotFound, "Object Not Found", "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, s.connectionJSON(c))
}

func (s *Server) closeConnection(w http.ResponseWriter, r *http.Request, u *auth.User) {
	c, ok := s.findConnection(r)
	if !ok {
		writeError(w, http.StatusNotFound, "Object Not Found", "Not Found")
		return
	}
	reason := r.Header.Get("X-Reason")
	if reason == "" {
		reason = "Closed via management plugin"
	}
	if !s.conns.CloseConnection(c.Name, reason) {
		writeError(w, http.StatusNotFound, "Object Not Found", "Not Found")
		return
	}
	s.log.Info("connection closed via the API", "connection", c.Name, "by", u.Name(), "reason", reason)
	w.WriteHeader(http.StatusNoContent)
}
