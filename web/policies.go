package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Policies, in RabbitMQ's shapes (operator policies: below):
//
//	GET    /api/policies                   every policy of the vhosts u uses
//	GET    /api/policies/{vhost}           a vhost's
//	GET    /api/policies/{vhost}/{name}    one (404 if none)
//	PUT    /api/policies/{vhost}/{name}    {"pattern","definition","priority","apply-to"}: 201, 204 if it existed
//	DELETE /api/policies/{vhost}/{name}    204, 404 if none
//
// Each record is {"vhost","name","pattern","apply-to","definition","priority"}.
// All of them need the policymaker or administrator tag, and a
// policymaker needs access to the vhost.

type policyJSON struct {
	VHost      string         `json:"vhost"`
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Definition map[string]any `json:"definition"`
	Priority   int            `json:"priority"`
}

func policyJSONOf(p exchange.Policy) policyJSON {
	return policyJSON{VHost: p.VHost, Name: p.Name, Pattern: p.Pattern, ApplyTo: p.ApplyTo,
		Definition: nonNil(p.Definition), Priority: p.Priority}
}

// policyKind is one kind of policy's operations on a vhost: its policies
// or its operator policies, which the API serves alike.
type policyKind struct {
	list func(*exchange.VHost) []exchange.Policy
	get  func(*exchange.VHost, string) (exchange.Policy, bool)
	set  func(*exchange.VHost, exchange.Policy) (bool, error)
	del  func(*exchange.VHost, string) error
}

var (
	policies         = policyKind{(*exchange.VHost).Policies, (*exchange.VHost).Policy, (*exchange.VHost).SetPolicy, (*exchange.VHost).DeletePolicy}
	operatorPolicies = policyKind{(*exchange.VHost).OperatorPolicies, (*exchange.VHost).OperatorPolicy, (*exchange.VHost).SetOperatorPolicy, (*exchange.VHost).DeleteOperatorPolicy}
)

// policyRoutes registers the five endpoints of a kind under base
// (/api/policies, /api/operator-policies).
func (s *Server) policyRoutes(m func(string, access, handler), pol access, base string, k policyKind) {
	m("GET "+base, pol, s.listPolicies(k))
	m("GET "+base+"/{vhost}", pol, s.listVHostPolicies(k))
	m("GET "+base+"/{vhost}/{name}", pol, s.getPolicy(k))
	m("PUT "+base+"/{vhost}/{name}", pol, s.putPolicy(k))
	m("DELETE "+base+"/{vhost}/{name}", pol, s.deletePolicy(k))
}

func policiesJSON(v *exchange.VHost, k policyKind) []policyJSON {
	out := []policyJSON{}
	for _, p := range k.list(v) {
		out = append(out, policyJSONOf(p))
	}
	return out
}

func (s *Server) listPolicies(k policyKind) handler {
	return func(w http.ResponseWriter, _ *http.Request, u *auth.User) {
		out := []policyJSON{}
		for _, n := range s.core.VHosts() {
			if !s.usesVHost(u, n) {
				continue
			}
			if v, ok := s.core.VHost(n); ok {
				out = append(out, policiesJSON(v, k)...)
			}
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) listVHostPolicies(k policyKind) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		if v, ok := s.writeVHost(w, r, u); ok {
			writeJSON(w, http.StatusOK, policiesJSON(v, k))
		}
	}
}

func (s *Server) getPolicy(k policyKind) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, ok := s.writeVHost(w, r, u)
		if !ok {
			return
		}
		p, ok := k.get(v, pathValue(r, "name"))
		if !ok {
			notFound(w)
			return
		}
		writeJSON(w, http.StatusOK, policyJSONOf(p))
	}
}

func (s *Server) putPolicy(k policyKind) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, body, ok := s.vhostBody(w, r, u)
		if !ok {
			return
		}
		p, err := policyFromBody(body)
		if err != nil {
			badRequest(w, err.Error())
			return
		}
		p.Name = pathValue(r, "name")
		created, err := k.set(v, p)
		if err != nil {
			policyError(w, err)
			return
		}
		putStatus(w, !created)
	}
}

func (s *Server) deletePolicy(k policyKind) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, ok := s.writeVHost(w, r, u)
		if !ok {
			return
		}
		if err := k.del(v, pathValue(r, "name")); err != nil {
			coreError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// policyError answers a refused policy as RabbitMQ does: 400 with
// "Validation failed" and the reason.
func policyError(w http.ResponseWriter, err error) {
	var e *exchange.Error
	if errors.As(err, &e) && e.Kind == exchange.KindPreconditionFailed {
		badRequest(w, "Validation failed\n\n"+e.Text+"\n")
		return
	}
	coreError(w, err)
}

// policyFromBody reads a policy from a PUT body or a definitions entry.
func policyFromBody(m map[string]any) (exchange.Policy, error) {
	var p exchange.Policy
	for _, k := range []string{"pattern", "definition"} {
		if _, ok := m[k]; !ok {
			return p, fmt.Errorf("[{key_missing,%s}]", k)
		}
	}
	pat, ok := m["pattern"].(string)
	if !ok {
		return p, errors.New("pattern must be a string")
	}
	def, ok := m["definition"].(map[string]any)
	if !ok {
		return p, errors.New("definition must be an object")
	}
	p.Pattern, p.Definition = pat, def
	if at, ok := m["apply-to"]; ok && at != nil {
		if p.ApplyTo, ok = at.(string); !ok {
			return p, errors.New("apply-to must be a string")
		}
	}
	switch pr := m["priority"].(type) {
	case nil:
	case int64:
		p.Priority = int(pr)
	case float64:
		if pr != float64(int(pr)) {
			return p, fmt.Errorf("priority %v is not an integer", pr)
		}
		p.Priority = int(pr)
	case string: // rabbitmqadmin and older UIs send a string
		n, err := strconv.Atoi(pr)
		if err != nil {
			return p, fmt.Errorf("priority %q is not an integer", pr)
		}
		p.Priority = n
	default:
		return p, fmt.Errorf("priority %v is not an integer", pr)
	}
	return p, nil
}

// Operator policies, in RabbitMQ's shapes (the records as policies'),
// with the same rights (policymaker or administrator, and access to the
// vhost); see exchange/operator_policy.go for what they do:
//
//	GET    /api/operator-policies                   every operator policy of the vhosts u uses
//	GET    /api/operator-policies/{vhost}           a vhost's
//	GET    /api/operator-policies/{vhost}/{name}    one (404 if none)
//	PUT    /api/operator-policies/{vhost}/{name}    201, 204 if it existed; 400 for a key
//	                                                an operator policy may not set
//	DELETE /api/operator-policies/{vhost}/{name}    204, 404 if none

// withOperatorPolicy is a queue's effective policy definition (def, from
// its policy) with its operator policy's limits (op): the lower value of
// a key both set, op's value for a key only op sets.
func withOperatorPolicy(def, op map[string]any) map[string]any {
	out := make(map[string]any, len(def)+len(op))
	for k, v := range def {
		out[k] = v
	}
	for k, v := range op {
		cur, set := out[k]
		if !set {
			out[k] = v
			continue
		}
		a, okA := asFloat(cur)
		b, okB := asFloat(v)
		if okA && okB && b < a {
			out[k] = v
		}
	}
	return out
}

func asFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
