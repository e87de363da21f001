package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/web/ui"
)

// Version strings the API reports. Clients and tools (rabbitmqadmin,
// Terraform providers) read rabbitmq_version to pick features.
const (
	rabbitVersion = "3.10.0"
	productName   = "Trident"
)

// Core is what the API needs from the broker core (*exchange.Broker).
type Core interface {
	VHosts() []string
	VHost(name string) (*exchange.VHost, bool)
	EnsureVHost(name string) error
	DeleteVHost(name string) error
	SetVHostMetadata(name, description string, tags []string) error
}

// Options configure the API.
type Options struct {
	Users *auth.Users
	Core  Core
	Conns Connections
	// Node is the node name ("trident@host").
	Node string
	Log  *slog.Logger
	// StatsInterval is how often message counters are sampled for rates
	// (RabbitMQ's collect_statistics_interval); 5s when zero.
	StatsInterval time.Duration
	// Listeners returns the node's listeners (it may be called before
	// they are all open, so it is a function).
	Listeners func() []Listener
	// DataDir is where the node stores data, for disk_free.
	DataDir string
	// MemLimit and DiskFreeLimit are the memory and disk alarms'
	// thresholds in bytes (0: alarm disabled), shown in /api/nodes.
	MemLimit, DiskFreeLimit int64
	// Cluster lists the cluster's members for /api/nodes; nil means a
	// single node (cluster.go).
	Cluster Cluster
	// OAuth configures the UI's OAuth 2 login (oauth.go); bearer tokens
	// are accepted by the API whenever Users takes tokens.
	OAuth OAuthUI
	// Shovels runs the dynamic shovels (shovels.go); nil: none.
	Shovels Shovels
	// Bridges runs the MQTT bridges (bridges.go); nil: none.
	Bridges Bridges
	// Version is the build's version, as trident --version prints it
	// (/api/overview's product_version, the definitions export, the build
	// info metric); "devel" when empty.
	Version string
	// MaxDefinitionsBody bounds a definitions import's body (guard.go);
	// DefaultMaxDefinitionsBody when zero.
	MaxDefinitionsBody int64
	// ClusterName is the configured cluster name (cluster.name), ""
	// for the default; ClusterNames keeps the one set through the API
	// (clustername.go), nil: it cannot be set.
	ClusterName  string
	ClusterNames ClusterNameStore
	// FeatureFlags lists and enables the cluster's feature flags
	// (featureflags.go); nil: none.
	FeatureFlags FeatureFlags
	// Maintenance is the node's maintenance mode (maintenance.go); nil:
	// none, being_drained is false and drain/revive answer 503.
	Maintenance Maintenance
	// MQTT is the MQTT front end's clients, sessions and retained
	// messages (mqtt.go); nil: the /api/mqtt endpoints answer 404.
	MQTT MQTT
	// FaultInjection, if set, serves /api/cluster/partition
	// (faultinjection.go; cluster.fault_injection, never in production).
	FaultInjection FaultInjector
}

// Server is the management API.
type Server struct {
	version   string // the build version (Options.Version)
	users     *auth.Users
	core      Core
	conns     Connections
	node      string
	log       *slog.Logger
	mux       *http.ServeMux
	listeners func() []Listener
	dataDir   string
	memLimit  int64
	diskLimit int64
	started   time.Time
	rates     *rates
	cluster   Cluster
	oauth     OAuthUI
	shovels   Shovels
	bridges   Bridges
	// maintenance is Options.Maintenance (maintenance.go).
	maintenance Maintenance

	clusterNameConf string           // clustername.go
	clusterNames    ClusterNameStore // nil: not settable
	featureFlags    FeatureFlags     // featureflags.go
	mqtt            MQTT             // mqtt.go
	faults          FaultInjector    // faultinjection.go; nil: not served

	maxDefsBody int64         // guard.go
	imports     chan struct{} // one definitions import at a time (definitions.go)

	stop     chan struct{}
	stopOnce sync.Once
}

// New creates the API and starts its statistics sampler; Close stops it.
func New(o Options) *Server {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.StatsInterval <= 0 {
		o.StatsInterval = 5 * time.Second
	}
	if o.Listeners == nil {
		o.Listeners = func() []Listener { return nil }
	}
	s := &Server{users: o.Users, core: o.Core, conns: o.Conns, node: o.Node, log: log,
		mux: http.NewServeMux(), listeners: o.Listeners, dataDir: o.DataDir, memLimit: o.MemLimit, diskLimit: o.DiskFreeLimit, started: time.Now(),
		stop: make(chan struct{})}
	s.cluster = o.Cluster
	s.oauth = o.OAuth
	s.shovels = o.Shovels
	s.bridges = o.Bridges
	s.maintenance = o.Maintenance
	s.version = o.Version
	if s.version == "" {
		s.version = "devel"
	}
	s.clusterNameConf, s.clusterNames = o.ClusterName, o.ClusterNames
	s.featureFlags = o.FeatureFlags
	s.mqtt = o.MQTT
	s.faults = o.FaultInjection
	s.maxDefsBody = o.MaxDefinitionsBody
	if s.maxDefsBody <= 0 {
		s.maxDefsBody = DefaultMaxDefinitionsBody
	}
	s.imports = make(chan struct{}, 1)
	s.rates = newRates(o.StatsInterval)
	s.routes()
	// The web UI (web/ui) is served at "/".
	s.mux.Handle("GET /", ui.HandlerConnecting(s.uiConnectOrigins))

	s.rates.sample(s) // a first sample, so that rates start at once
	go s.sampleLoop()
	return s
}

// Close stops the statistics sampler.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
}

func (s *Server) sampleLoop() {
	t := time.NewTicker(s.rates.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.rates.sample(s)
		}
	}
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Connection names contain spaces and '>' and arrive escaped; the mux
	// matches on the decoded path segments, which is what we want.
	if strings.HasSuffix(r.URL.Path, "/") && len(r.URL.Path) > 1 {
		r.URL.Path = strings.TrimSuffix(r.URL.Path, "/")
		r.URL.RawPath = strings.TrimSuffix(r.URL.RawPath, "/")
	}
	// The default vhost is "/", written %2F; http.ServeMux does not
	// match a path segment that is exactly %2F, so it goes through as
	// slashSegment and pathValue turns it back.
	if raw := r.URL.RawPath; raw != "" && (strings.Contains(raw, "/%2F") || strings.Contains(raw, "/%2f")) {
		segs := strings.Split(raw, "/")
		for i, sg := range segs {
			if sg == "%2F" || sg == "%2f" {
				segs[i] = slashSegment
			}
		}
		r.URL.RawPath = strings.Join(segs, "/")
		if p, err := url.PathUnescape(r.URL.RawPath); err == nil {
			r.URL.Path = p
		}
	}
	if isAPIPath(r.URL.Path) {
		var ok bool
		if w, r, ok = s.guard(w, r); !ok {
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// slashSegment stands for a path segment "%2F" (see ServeHTTP).
const slashSegment = "%2F%00"

// pathValue is r.PathValue with slashSegment turned back into "/".
func pathValue(r *http.Request, key string) string {
	v := r.PathValue(key)
	if v == "/\x00" {
		return "/"
	}
	return v
}

// access is what an endpoint requires of the user, on top of a valid
// login with a management tag.
type access int

const (
	accManagement    access = iota // any management-ish tag
	accMonitoring                  // monitoring or administrator
	accAdministrator               // administrator
	accPolicymaker                 // policymaker or administrator
)

type handler func(w http.ResponseWriter, r *http.Request, u *auth.User)

// authed wraps h with HTTP basic authentication and the tag rule of
// RabbitMQ's management plugin: every user needs one of the management
// tags; acc may require more.
func (s *Server) authed(acc access, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var remote net.Addr
		if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			p, _ := strconv.Atoi(port)
			remote = &net.TCPAddr{IP: net.ParseIP(host), Port: p}
		}
		if token, ok := bearerToken(r); ok {
			u, err := s.users.AuthenticateToken(token, remote)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="RabbitMQ Management", error="invalid_token"`)
				writeError(w, http.StatusUnauthorized, "not_authorized", tokenRefusal(err))
				return
			}
			s.authorized(acc, h, w, r, u)
			return
		}
		// No Basic challenge on a 401 (guard.go): a browser would show its
		// own prompt and then send the credentials with any request to
		// this origin, a cross-site form's included.
		name, pass, ok := r.BasicAuth()
		if !ok {
			writeError(w, http.StatusUnauthorized, "not_authorized", "Login failed")
			return
		}
		u, err := s.users.Authenticate(name, pass, remote)
		if err != nil {
			reason := "Login failed"
			if errors.Is(err, auth.ErrLoopbackOnly) {
				reason = "User can only log in via localhost"
			}
			writeError(w, http.StatusUnauthorized, "not_authorized", reason)
			return
		}
		s.authorized(acc, h, w, r, u)
	}
}

// authorized applies the tag rule to an authenticated user, then calls h.
func (s *Server) authorized(acc access, h handler, w http.ResponseWriter, r *http.Request, u *auth.User) {
	if !isManagement(u) {
		writeError(w, http.StatusUnauthorized, "not_authorised", "Not management user")
		return
	}
	switch acc {
	case accMonitoring:
		if !isMonitor(u) {
			writeError(w, http.StatusUnauthorized, "not_authorised", "Not monitor user")
			return
		}
	case accAdministrator:
		if !isAdmin(u) {
			writeError(w, http.StatusUnauthorized, "not_authorised", "Not administrator user")
			return
		}
	case accPolicymaker:
		if !isAdmin(u) && !u.HasTag("policymaker") {
			writeError(w, http.StatusUnauthorized, "not_authorised", "Not policymaker user")
			return
		}
	}
	h(w, r, u)
}

func isAdmin(u *auth.User) bool { return u.HasTag("administrator") }

func isMonitor(u *auth.User) bool { return isAdmin(u) || u.HasTag("monitoring") }

func isManagement(u *auth.User) bool {
	return isMonitor(u) || u.HasTag("management") || u.HasTag("policymaker")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, errText string, reason any) {
	writeJSON(w, status, map[string]any{"error": errText, "reason": reason})
}

func notFound(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "Object Not Found", "Not Found")
}

func badRequest(w http.ResponseWriter, reason any) {
	writeError(w, http.StatusBadRequest, "bad_request", reason)
}

// noVHostAccess is RabbitMQ's answer to a user without permissions in the
// vhost it addresses.
func noVHostAccess(w http.ResponseWriter) {
	writeError(w, http.StatusUnauthorized, "not_authorised", "User not authorised to access virtual host")
}

func accessRefused(w http.ResponseWriter) {
	writeError(w, http.StatusUnauthorized, "not_authorised", "Access refused.")
}

// decodeBody decodes a JSON object body, which guard limited to maxBody.
// Numbers that are integers become int64 (so x-arguments keep their
// type), others float64. An empty body is an empty object.
func decodeBody(r *http.Request) (map[string]any, error) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	return decodeObject(data)
}

func decodeObject(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := normalizeNumbers(v).(map[string]any)
	if !ok {
		return nil, errors.New("not_a_json_object")
	}
	return m, nil
}

func normalizeNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = normalizeNumbers(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = normalizeNumbers(e)
		}
		return t
	}
	return v
}

// Helpers to read typed fields of a decoded body.

func strField(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func boolField(m map[string]any, k string) bool {
	switch b := m[k].(type) {
	case bool:
		return b
	case string:
		return b == "true"
	}
	return false
}

func tableField(m map[string]any, k string) map[string]any {
	t, _ := m[k].(map[string]any)
	if t == nil {
		return map[string]any{}
	}
	return t
}

func intField(m map[string]any, k string, def int) int {
	switch n := m[k].(type) {
	case int64:
		return int(n)
	case float64:
		return int(n)
	case string:
		if i, err := strconv.Atoi(n); err == nil {
			return i
		}
	}
	return def
}

// tagList reads tags given as a comma-separated string or a list.
func tagList(v any) []string {
	var out []string
	switch t := v.(type) {
	case string:
		for _, s := range strings.Split(t, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok && strings.TrimSpace(s) != "" {
				out = append(out, strings.TrimSpace(s))
			}
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func splitHostPort(hp string) (string, int) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// putStatus answers a PUT as RabbitMQ does: 201 Created for a new object,
// 204 No Content when it existed already.
func putStatus(w http.ResponseWriter, existed bool) {
	if existed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusCreated)
}
