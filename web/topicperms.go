package web

import (
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Topic permissions, in RabbitMQ's shapes:
//
//	GET    /api/topic-permissions                  all records
//	GET    /api/vhosts/{vhost}/topic-permissions   a vhost's
//	GET    /api/users/{user}/topic-permissions     a user's
//	GET    /api/topic-permissions/{vhost}/{user}   a user's in a vhost (404 if none)
//	PUT    /api/topic-permissions/{vhost}/{user}   {"exchange","write","read"}
//	DELETE /api/topic-permissions/{vhost}/{user}   all of the user's in the vhost
//
// Each record is {"user","vhost","exchange","write","read"}.

func topicList(ps []auth.TopicPermission) []auth.TopicPermission {
	if ps == nil {
		return []auth.TopicPermission{}
	}
	return ps
}

func (s *Server) listTopicPermissions(w http.ResponseWriter, _ *http.Request, _ *auth.User) {
	writeJSON(w, http.StatusOK, topicList(s.users.ListTopicPermissions()))
}

func (s *Server) vhostTopicPermissions(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	vhost := pathValue(r, "vhost")
	if _, ok := s.core.VHost(vhost); !ok {
		notFound(w)
		return
	}
	out := []auth.TopicPermission{}
	for _, p := range s.users.ListTopicPermissions() {
		if p.VHost == vhost {
			out = append(out, p)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) userTopicPermissions(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	name := pathValue(r, "user")
	if _, ok := s.users.Lookup(name); !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, topicList(s.users.TopicPermissions(name, "")))
}

func (s *Server) getTopicPermission(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	ps := s.users.TopicPermissions(pathValue(r, "user"), pathValue(r, "vhost"))
	if len(ps) == 0 {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

// putTopicPermission sets {exchange, write, read}: 201 created, 204
// updated, 400 vhost_or_user_not_found or a bad expression.
func (s *Server) putTopicPermission(w http.ResponseWriter, r *http.Request, u *auth.User) {
	user, vhost, body, ok := s.grantBody(w, r, "exchange", "write", "read")
	if !ok {
		return
	}
	ex := strField(body, "exchange")
	existed := false
	for _, p := range s.users.TopicPermissions(user, vhost) {
		existed = existed || p.Exchange == ex
	}
	c := auth.Command{Op: auth.OpSetTopicPermissions, User: user, VHost: vhost, Exchange: ex,
		Write: strField(body, "write"), Read: strField(body, "read")}
	if !s.doUsers(w, u, c, badRequest) {
		return
	}
	putStatus(w, existed)
}

func (s *Server) deleteTopicPermission(w http.ResponseWriter, r *http.Request, u *auth.User) {
	user, vhost := pathValue(r, "user"), pathValue(r, "vhost")
	if len(s.users.TopicPermissions(user, vhost)) == 0 {
		notFound(w)
		return
	}
	// RabbitMQ accepts an "exchange" query parameter to delete one record.
	c := auth.Command{Op: auth.OpClearTopicPermissions, User: user, VHost: vhost, Exchange: r.URL.Query().Get("exchange")}
	if !s.doUsers(w, u, c, internalError) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// permitsTopic checks u's topic permission for key on exchange exName when
// it is a topic exchange, as the protocols do (administrators included:
// topic permissions restrict everyone who has them).
func (s *Server) permitsTopic(u *auth.User, v *exchange.VHost, perm auth.Perm, exName, key string) error {
	x, ok := v.Exchange(exName)
	if !ok || x.Kind() != exchange.KindTopic {
		return nil
	}
	return s.users.CheckTopic(u, v.Name(), perm, exName, key, "")
}
