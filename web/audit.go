package web

import (
	"net/http"
	"strings"

	"github.com/trident-broker/trident/auth"
)

// audited wraps a handler so that every successful (status below 400)
// request that is not a GET or HEAD is an audit record: the event (see
// auditEvent), who (the authenticated user), from where, the method, the
// path (which names the object) and the status.
func (s *Server) audited(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead || !s.users.Auditing() {
			h(w, r, u)
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h(sw, r, u)
		if sw.status >= 400 {
			return
		}
		path, _, _ := strings.Cut(r.RequestURI, "?") // as sent, before ServeHTTP's rewriting
		s.users.Audit().Info(auditEvent(r.Method, r.URL.Path), "user", u.Name(), "remote", r.RemoteAddr,
			"protocol", "http", "method", r.Method, "path", path, "status", sw.status)
	}
}

// auditEvent names what a mutating API request did.
func auditEvent(method, path string) string {
	del := method == http.MethodDelete
	pick := func(set, cleared string) string {
		if del {
			return cleared
		}
		return set
	}
	switch {
	case strings.HasPrefix(path, "/api/topic-permissions/"):
		return pick(auth.AuditTopicPermSet, auth.AuditTopicPermCleared)
	case strings.HasPrefix(path, "/api/permissions/"):
		return pick(auth.AuditPermissionSet, auth.AuditPermissionCleared)
	case strings.HasPrefix(path, "/api/users/bulk-delete"):
		return auth.AuditUserDeleted
	case strings.HasPrefix(path, "/api/users/"):
		return pick(auth.AuditUserPut, auth.AuditUserDeleted)
	case strings.HasPrefix(path, "/api/exchanges/"), strings.HasPrefix(path, "/api/queues/"),
		strings.HasPrefix(path, "/api/bindings/"), strings.HasPrefix(path, "/api/vhosts/"):
		if strings.HasSuffix(path, "/publish") || strings.HasSuffix(path, "/get") || strings.HasSuffix(path, "/contents") {
			return auth.AuditAPIChange
		}
		return pick(auth.AuditObjectCreated, auth.AuditObjectDeleted)
	}
	return auth.AuditAPIChange
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
