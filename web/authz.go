package web

import (
	"errors"
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Who sees and changes what, as RabbitMQ's management plugin decides it:
//   - administrator: everything, in every vhost, permissions or not;
//   - monitoring: reads every vhost; writes only where it has permissions;
//   - management, policymaker: only vhosts it has permissions in;
//   - users, vhosts, permissions and definitions are administrator-only.
// Inside a vhost, non-administrators also need the resource permission
// (configure to declare or delete, write to publish, read to get).

// seesVHost reports whether u may read objects of vhost.
func (s *Server) seesVHost(u *auth.User, vhost string) bool {
	return isMonitor(u) || s.users.CanAccessVHost(u, vhost)
}

// usesVHost reports whether u may change objects of vhost.
func (s *Server) usesVHost(u *auth.User, vhost string) bool {
	return isAdmin(u) || s.users.CanAccessVHost(u, vhost)
}

// visibleVHosts are the vhosts whose objects u sees, sorted by name.
func (s *Server) visibleVHosts(u *auth.User) []*exchange.VHost {
	var out []*exchange.VHost
	for _, n := range s.core.VHosts() {
		if !s.seesVHost(u, n) {
			continue
		}
		if v, ok := s.core.VHost(n); ok {
			out = append(out, v)
		}
	}
	return out
}

// readVHost resolves {vhost} for reading, answering the request itself
// (401 or 404) when it cannot.
func (s *Server) readVHost(w http.ResponseWriter, r *http.Request, u *auth.User) (*exchange.VHost, bool) {
	return s.pathVHost(w, r, u, s.seesVHost)
}

// writeVHost resolves {vhost} for a change.
func (s *Server) writeVHost(w http.ResponseWriter, r *http.Request, u *auth.User) (*exchange.VHost, bool) {
	return s.pathVHost(w, r, u, s.usesVHost)
}

// pathVHost resolves {vhost}: 401 unless allowed says u may, 404 unless
// it exists.
func (s *Server) pathVHost(w http.ResponseWriter, r *http.Request, u *auth.User, allowed func(*auth.User, string) bool) (*exchange.VHost, bool) {
	name := pathValue(r, "vhost")
	if !allowed(u, name) {
		noVHostAccess(w)
		return nil, false
	}
	v, ok := s.core.VHost(name)
	if !ok {
		notFound(w)
		return nil, false
	}
	return v, true
}

// permits checks a resource permission; administrators need none.
func (s *Server) permits(u *auth.User, vhost string, p auth.Perm, kind, name string) error {
	if isAdmin(u) {
		return nil
	}
	return s.users.Check(u, vhost, p, kind, name)
}

// coreError answers a request that the core refused.
func coreError(w http.ResponseWriter, err error) {
	var e *exchange.Error
	if !errors.As(err, &e) {
		writeError(w, http.StatusInternalServerError, "internal_server_error", err.Error())
		return
	}
	switch e.Kind {
	case exchange.KindNotFound:
		notFound(w)
	case exchange.KindInternal:
		writeError(w, http.StatusInternalServerError, "internal_server_error", e.Text)
	default:
		badRequest(w, e.Text)
	}
}

// exchangeParam reads {name} as an exchange name; RabbitMQ's API calls the
// default exchange "amq.default".
func exchangeParam(r *http.Request, key string) string {
	n := pathValue(r, key)
	if n == "amq.default" {
		return ""
	}
	return n
}
