package web

import (
	"errors"
	"net/http"

	"github.com/trident-broker/trident/auth"
)

type userJSON struct {
	Name             string         `json:"name"`
	PasswordHash     string         `json:"password_hash"`
	HashingAlgorithm string         `json:"hashing_algorithm"`
	Tags             []string       `json:"tags"`
	Limits           map[string]any `json:"limits"`
}

func userJSONOf(u *auth.User) userJSON {
	tags := u.Tags()
	if tags == nil {
		tags = []string{}
	}
	return userJSON{Name: u.Name(), PasswordHash: u.PasswordHash(), HashingAlgorithm: u.HashingAlgorithm(),
		Tags: tags, Limits: map[string]any{}}
}

func uName(u *auth.User) string { return u.Name() }

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	respondList(w, r, listSpec[*auth.User, userJSON]{refs: s.users.ListUsers(), name: uName, build: userJSONOf})
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	u, ok := s.users.Lookup(pathValue(r, "user"))
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, userJSONOf(u))
}

// putUser creates or updates a user from {password | password_hash, tags}:
// 201 created, 204 updated. tags is required, as in RabbitMQ.
func (s *Server) putUser(w http.ResponseWriter, r *http.Request, u *auth.User) {
	name := pathValue(r, "user")
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if _, ok := body["tags"]; !ok {
		badRequest(w, "tags_not_present")
		return
	}
	tags := tagList(body["tags"])
	_, existed := s.users.Lookup(name)
	c := auth.PutUserCommand(name, "", tags)
	if pw, ok := body["password"].(string); ok {
		c = auth.PutUserCommand(name, pw, tags)
	} else if h, ok := body["password_hash"].(string); ok {
		c.PasswordHash = h
	} else if existed {
		// Changing only the tags keeps the password.
		cur, _ := s.users.Lookup(name)
		c.PasswordHash = cur.PasswordHash()
	}
	if !s.doUsers(w, u, c, badRequest) {
		return
	}
	putStatus(w, existed)
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request, u *auth.User) {
	err := s.users.Do(s.actor(u), auth.Command{Op: auth.OpDeleteUser, User: pathValue(r, "user")})
	switch {
	case errors.Is(err, auth.ErrNoSuchUser):
		notFound(w)
	case errors.Is(err, auth.ErrAccessRefused):
		accessRefused(w)
	case err != nil:
		writeError(w, http.StatusInternalServerError, "internal_server_error", err.Error())
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// doUsers applies a users command for u through the user database's one
// check (auth.Users.Do) and answers a refusal (403) or another error
// (with fail) itself; false means the answer is written.
func (s *Server) doUsers(w http.ResponseWriter, u *auth.User, c auth.Command, fail func(http.ResponseWriter, any)) bool {
	err := s.users.Do(s.actor(u), c)
	switch {
	case errors.Is(err, auth.ErrAccessRefused):
		accessRefused(w)
	case err != nil:
		fail(w, err.Error())
	default:
		return true
	}
	return false
}

func internalError(w http.ResponseWriter, msg any) {
	text, _ := msg.(string)
	writeError(w, http.StatusInternalServerError, "internal_server_error", text)
}

// bulkDeleteUsers is POST /api/users/bulk-delete {"users": [...]}.
func (s *Server) bulkDeleteUsers(w http.ResponseWriter, r *http.Request, u *auth.User) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	names, _ := body["users"].([]any)
	for _, n := range names {
		if name, ok := n.(string); ok {
			_ = s.users.Do(s.actor(u), auth.Command{Op: auth.OpDeleteUser, User: name})
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) userPermissions(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	name := pathValue(r, "user")
	if _, ok := s.users.Lookup(name); !ok {
		notFound(w)
		return
	}
	out := []auth.Permission{}
	for _, p := range s.users.ListPermissions() {
		if p.User == name {
			out = append(out, p)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// --- permissions ---

func (s *Server) listPermissions(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	out := s.users.ListPermissions()
	if out == nil {
		out = []auth.Permission{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getPermission(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	p, ok := s.users.Permissions(pathValue(r, "user"), pathValue(r, "vhost"))
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// putPermission sets {configure, write, read}: 201 created, 204 updated,
// 400 vhost_or_user_not_found.
func (s *Server) putPermission(w http.ResponseWriter, r *http.Request, u *auth.User) {
	user, vhost, body, ok := s.grantBody(w, r, "configure", "write", "read")
	if !ok {
		return
	}
	_, existed := s.users.Permissions(user, vhost)
	c := auth.Command{Op: auth.OpSetPermissions, User: user, VHost: vhost,
		Configure: strField(body, "configure"), Write: strField(body, "write"), Read: strField(body, "read")}
	if !s.doUsers(w, u, c, badRequest) {
		return
	}
	putStatus(w, existed)
}

func (s *Server) deletePermission(w http.ResponseWriter, r *http.Request, u *auth.User) {
	user, vhost := pathValue(r, "user"), pathValue(r, "vhost")
	if _, ok := s.users.Permissions(user, vhost); !ok {
		notFound(w)
		return
	}
	if !s.doUsers(w, u, auth.Command{Op: auth.OpClearPermissions, User: user, VHost: vhost}, internalError) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
