package web

import (
	"errors"
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// actor is u as the identity of the topology commands the API runs for it;
// administrators need no resource permission here.
func (s *Server) actor(u *auth.User) auth.Actor {
	return auth.Actor{Users: s.users, User: u, Unrestricted: isAdmin(u)}
}

// do runs a topology command for u through the core's one permission check
// (exchange.VHost.Do) and answers a refusal or a core error itself; false
// means the answer is written.
func (s *Server) do(w http.ResponseWriter, v *exchange.VHost, u *auth.User, c exchange.Command) (exchange.Result, bool) {
	r, err := v.Do(s.actor(u), c)
	if err != nil {
		if errors.Is(err, auth.ErrAccessRefused) {
			accessRefused(w)
		} else {
			coreError(w, err)
		}
		return r, false
	}
	return r, true
}
