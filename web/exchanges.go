package web

import (
	"encoding/base64"
	"net/http"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

type exchangeJSON struct {
	Name             string         `json:"name"`
	VHost            string         `json:"vhost"`
	Type             string         `json:"type"`
	Durable          bool           `json:"durable"`
	AutoDelete       bool           `json:"auto_delete"`
	Internal         bool           `json:"internal"`
	Arguments        map[string]any `json:"arguments"`
	UserWhoPerformed string         `json:"user_who_performed_action"`
	MessageStats     msgStatsJSON   `json:"message_stats"`
	// How many messages a delayed exchange holds back (x-delayed-message
	// only), as the delayed message plugin reports it.
	MessagesDelayed *int64 `json:"messages_delayed,omitempty"`
	// A super stream's exchange (argument x-super-stream): true, with its
	// partitions in order.
	SuperStream bool     `json:"super_stream,omitempty"`
	Partitions  []string `json:"partitions,omitempty"`
	Policy      *string  `json:"policy,omitempty"`
	// The applied policy's definition, when a policy applies.
	EffectivePolicyDefinition map[string]any `json:"effective_policy_definition,omitempty"`
	// Only on GET of one exchange.
	Incoming *[]any `json:"incoming,omitempty"`
	Outgoing *[]any `json:"outgoing,omitempty"`
}

type xref struct {
	vhost string
	x     *exchange.Exchange
}

func (s *Server) exchangeJSON(r xref) exchangeJSON {
	args := r.x.Args()
	if args == nil {
		args = map[string]any{}
	}
	j := exchangeJSON{Name: r.x.Name(), VHost: r.vhost, Type: r.x.Kind(), Durable: r.x.Durable(),
		AutoDelete: r.x.AutoDelete(), Internal: r.x.Internal(), Arguments: args,
		UserWhoPerformed: "rmq-internal", MessageStats: messageStats(kindExchange, r.x.MsgStats(), s.rates.exchange(r.x))}
	if name, def := r.x.Policy(); name != "" {
		j.Policy, j.EffectivePolicyDefinition = &name, def
	}
	if r.x.Kind() == exchange.KindDelayed {
		n := r.x.MessagesDelayed()
		j.MessagesDelayed = &n
	}
	if r.x.IsSuperStream() {
		j.SuperStream, j.Partitions = true, r.x.SuperStreamPartitions()
	}
	return j
}

func xrefs(v *exchange.VHost) []xref {
	xs := v.Exchanges()
	out := make([]xref, len(xs))
	for i, x := range xs {
		out[i] = xref{v.Name(), x}
	}
	return out
}

func xName(r xref) string  { return r.x.Name() }
func xVHost(r xref) string { return r.vhost }

func (s *Server) listExchanges(w http.ResponseWriter, r *http.Request, u *auth.User) {
	var refs []xref
	for _, v := range s.visibleVHosts(u) {
		refs = append(refs, xrefs(v)...)
	}
	respondList(w, r, listSpec[xref, exchangeJSON]{refs: refs, vhost: xVHost, name: xName, build: s.exchangeJSON})
}

func (s *Server) listVHostExchanges(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	respondList(w, r, listSpec[xref, exchangeJSON]{refs: xrefs(v), vhost: xVHost, name: xName, build: s.exchangeJSON})
}

func (s *Server) getExchange(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	x, ok := v.Exchange(exchangeParam(r, "name"))
	if !ok {
		notFound(w)
		return
	}
	j := s.exchangeJSON(xref{v.Name(), x})
	in, out := []any{}, []any{}
	j.Incoming, j.Outgoing = &in, &out
	writeJSON(w, http.StatusOK, j)
}

// putExchange declares an exchange: 201 created, 204 existed, 400 if
// different or of an unknown type. The type defaults to direct.
func (s *Server) putExchange(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, body, ok := s.vhostBody(w, r, u)
	if !ok {
		return
	}
	name := exchangeParam(r, "name")
	kind := strField(body, "type")
	if kind == "" {
		kind = exchange.KindDirect
	}
	_, existed := v.Exchange(name)
	if _, ok := s.do(w, v, u, exchange.ExchangeDeclare{Name: name, Type: kind, Opts: exchange.ExchangeOpts{Durable: boolField(body, "durable"),
		AutoDelete: boolField(body, "auto_delete"), Internal: boolField(body, "internal"), Args: tableField(body, "arguments")}}); !ok {
		return
	}
	putStatus(w, existed)
}

func (s *Server) deleteExchange(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	name := exchangeParam(r, "name")
	if err := s.permits(u, v.Name(), auth.Configure, "exchange", name); err != nil {
		accessRefused(w)
		return
	}
	if _, ok := v.Exchange(name); !ok {
		notFound(w)
		return
	}
	if _, ok := s.do(w, v, u, exchange.ExchangeDelete{Name: name, IfUnused: r.URL.Query().Get("if-unused") == "true"}); !ok {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// publish is POST /api/exchanges/{vhost}/{name}/publish; it answers
// {"routed": bool}.
func (s *Server) publish(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	name := exchangeParam(r, "name")
	if err := s.permits(u, v.Name(), auth.Write, "exchange", name); err != nil {
		badRequest(w, "403 ACCESS_REFUSED - "+err.Error())
		return
	}
	body, ok := readBody(w, r, "routing_key", "properties", "payload", "payload_encoding")
	if !ok {
		return
	}
	payload := []byte(strField(body, "payload"))
	switch strField(body, "payload_encoding") {
	case "string":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(string(payload))
		if err != nil {
			badRequest(w, "not_base64")
			return
		}
		payload = b
	default:
		badRequest(w, "Unknown payload_encoding")
		return
	}
	if err := s.permitsTopic(u, v, auth.Write, name, strField(body, "routing_key")); err != nil {
		badRequest(w, "403 ACCESS_REFUSED - "+err.Error()) // as for the exchange above
		return
	}
	props, _ := body["properties"].(map[string]any)
	m := &exchange.Message{Exchange: name, RoutingKey: strField(body, "routing_key"),
		Props: parseProperties(props), Body: payload}
	res, err := v.Publish(m, exchange.PublishOpts{})
	if err != nil {
		if exchange.KindOf(err) == exchange.KindNotFound {
			badRequest(w, "404 NOT_FOUND - "+errText(err))
			return
		}
		coreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"routed": res.Routed > 0})
}

func errText(err error) string {
	if e, ok := err.(*exchange.Error); ok {
		return e.Text
	}
	return err.Error()
}

// exchangeBindings lists bindings with the exchange as source or
// destination (/bindings/source, /bindings/destination).
func (s *Server) exchangeBindings(asSource bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, ok := s.readVHost(w, r, u)
		if !ok {
			return
		}
		name := exchangeParam(r, "name")
		if _, ok := v.Exchange(name); !ok {
			notFound(w)
			return
		}
		out := []bindingJSON{}
		if asSource && name == "" {
			for _, q := range v.Queues() {
				out = append(out, defaultBinding(v.Name(), q.Name()))
			}
		}
		for _, b := range v.Bindings() {
			if (asSource && b.Source == name) || (!asSource && b.DestinationType == "exchange" && b.Destination == name) {
				out = append(out, bindingOf(v.Name(), b))
			}
		}
		sortBindings(out)
		writeJSON(w, http.StatusOK, out)
	}
}
