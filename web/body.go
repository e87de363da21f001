package web

import (
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// The preamble of the API's writes (PUT and POST with a body), written
// once: which vhost, which body. Each step answers its own failure as
// RabbitMQ does and tells the handler to stop; the order of the checks is
// the order of the answers a client sees.

// readBody reads a request's JSON object body (decodeBody) and checks that
// it has each of the required keys. It answers 400 with the decoder's
// error, or with RabbitMQ's "[{key_missing,K}]" for the first key missing,
// and returns false.
func readBody(w http.ResponseWriter, r *http.Request, required ...string) (map[string]any, bool) {
	body, err := decodeBody(r)
	if err != nil {
		badRequest(w, err.Error())
		return nil, false
	}
	return body, hasKeys(w, body, required...)
}

// hasKeys answers 400 "[{key_missing,K}]" for the first of keys that body
// lacks, and returns false.
func hasKeys(w http.ResponseWriter, body map[string]any, keys ...string) bool {
	for _, k := range keys {
		if _, ok := body[k]; !ok {
			badRequest(w, "[{key_missing,"+k+"}]")
			return false
		}
	}
	return true
}

// vhostBody is the preamble of a write into the vhost named in the path
// (declaring an exchange or a queue, setting a policy): the vhost, which u
// must be allowed to use (writeVHost: 401, 404), then the body (readBody:
// 400).
func (s *Server) vhostBody(w http.ResponseWriter, r *http.Request, u *auth.User, required ...string) (*exchange.VHost, map[string]any, bool) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return nil, nil, false
	}
	body, ok := readBody(w, r, required...)
	return v, body, ok
}

// grantBody is the preamble of setting a user's permissions in a vhost
// ({user} and {vhost} in the path): the body (400), then both must exist
// (400 vhost_or_user_not_found), then the body must have each of keys.
func (s *Server) grantBody(w http.ResponseWriter, r *http.Request, keys ...string) (user, vhost string, body map[string]any, ok bool) {
	user, vhost = pathValue(r, "user"), pathValue(r, "vhost")
	if body, ok = readBody(w, r); !ok {
		return "", "", nil, false
	}
	_, uok := s.users.Lookup(user)
	_, vok := s.core.VHost(vhost)
	if !uok || !vok {
		badRequest(w, "vhost_or_user_not_found")
		return "", "", nil, false
	}
	if !hasKeys(w, body, keys...) {
		return "", "", nil, false
	}
	return user, vhost, body, true
}
