package web

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

type bindingJSON struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
	PropertiesKey   string         `json:"properties_key"`
}

// propertiesKey identifies a binding between a source and a destination
// as RabbitMQ's API does: the URL-quoted routing key, and with arguments
// "~" and a hash of them (RabbitMQ's hash is Erlang's; clients treat it as
// opaque).
func propertiesKey(key string, args map[string]any) string {
	k := strings.ReplaceAll(url.PathEscape(key), "~", "%7E")
	if len(args) == 0 {
		return k
	}
	b, _ := json.Marshal(args) // map keys are sorted
	h := sha256.Sum256(b)
	return k + "~" + base64.RawURLEncoding.EncodeToString(h[:])[:6]
}

func bindingOf(vhost string, b exchange.BindingInfo) bindingJSON {
	args := b.Args
	if args == nil {
		args = map[string]any{}
	}
	return bindingJSON{Source: b.Source, VHost: vhost, Destination: b.Destination, DestinationType: b.DestinationType,
		RoutingKey: b.RoutingKey, Arguments: args, PropertiesKey: propertiesKey(b.RoutingKey, args)}
}

// defaultBinding is the implicit binding of a queue to the default
// exchange that RabbitMQ lists.
func defaultBinding(vhost, queue string) bindingJSON {
	return bindingJSON{Source: "", VHost: vhost, Destination: queue, DestinationType: "queue", RoutingKey: queue,
		Arguments: map[string]any{}, PropertiesKey: propertiesKey(queue, nil)}
}

func sortBindings(bs []bindingJSON) {
	slices.SortStableFunc(bs, func(a, b bindingJSON) int {
		for _, c := range []int{strings.Compare(a.VHost, b.VHost), strings.Compare(a.Source, b.Source),
			strings.Compare(a.DestinationType, b.DestinationType), strings.Compare(a.Destination, b.Destination),
			strings.Compare(a.RoutingKey, b.RoutingKey), strings.Compare(a.PropertiesKey, b.PropertiesKey)} {
			if c != 0 {
				return c
			}
		}
		return 0
	})
}

func vhostBindings(v *exchange.VHost) []bindingJSON {
	qs := v.Queues()
	out := make([]bindingJSON, 0, len(qs))
	for _, q := range qs {
		out = append(out, defaultBinding(v.Name(), q.Name()))
	}
	for _, b := range v.Bindings() {
		out = append(out, bindingOf(v.Name(), b))
	}
	sortBindings(out)
	return out
}

func (s *Server) listBindings(w http.ResponseWriter, r *http.Request, u *auth.User) {
	out := []bindingJSON{}
	for _, v := range s.visibleVHosts(u) {
		out = append(out, vhostBindings(v)...)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listVHostBindings(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, vhostBindings(v))
}

// between lists the bindings from source to destination ({dtype} is "q"
// or "e").
func between(v *exchange.VHost, src, dst string, toQueue bool) []bindingJSON {
	out := []bindingJSON{}
	dt := "exchange"
	if toQueue {
		dt = "queue"
	}
	if src == "" && toQueue {
		if lookupQueue(v, dst) != nil {
			out = append(out, defaultBinding(v.Name(), dst))
		}
		return out
	}
	for _, b := range v.Bindings() {
		if b.Source == src && b.Destination == dst && b.DestinationType == dt {
			out = append(out, bindingOf(v.Name(), b))
		}
	}
	sortBindings(out)
	return out
}

// bindingEnds resolves {source} and {destination} and checks both exist.
func bindingEnds(w http.ResponseWriter, r *http.Request, v *exchange.VHost, toQueue bool) (string, string, bool) {
	src := exchangeParam(r, "source")
	dst := pathValue(r, "destination")
	if !toQueue && dst == "amq.default" {
		dst = ""
	}
	if _, ok := v.Exchange(src); !ok {
		notFound(w)
		return "", "", false
	}
	if toQueue {
		if lookupQueue(v, dst) == nil {
			notFound(w)
			return "", "", false
		}
	} else if _, ok := v.Exchange(dst); !ok {
		notFound(w)
		return "", "", false
	}
	return src, dst, true
}

func (s *Server) listBetween(toQueue bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, ok := s.readVHost(w, r, u)
		if !ok {
			return
		}
		src, dst, ok := bindingEnds(w, r, v, toQueue)
		if !ok {
			return
		}
		writeJSON(w, http.StatusOK, between(v, src, dst, toQueue))
	}
}

// createBinding is POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}:
// 201 with a Location naming the new binding by its properties key.
func (s *Server) createBinding(toQueue bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, ok := s.writeVHost(w, r, u)
		if !ok {
			return
		}
		src, dst, ok := bindingEnds(w, r, v, toQueue)
		if !ok {
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		key := strField(body, "routing_key")
		args := tableField(body, "arguments")
		if err := s.permitsTopic(u, v, auth.Read, src, key); err != nil {
			accessRefused(w)
			return
		}
		var c exchange.Command = exchange.ExchangeBind{Destination: dst, Source: src, Key: key, Args: args}
		if toQueue {
			c = exchange.QueueBind{Queue: dst, Exchange: src, Key: key, Args: args, Owner: ownerOf(v, dst)}
		}
		if _, ok := s.do(w, v, u, c); !ok {
			return
		}
		w.Header().Set("Location", url.PathEscape(dst)+"/"+url.PathEscape(propertiesKey(key, args)))
		w.WriteHeader(http.StatusCreated)
	}
}

// ownerOf returns the owner of an exclusive queue, so that management can
// bind it.
func ownerOf(v *exchange.VHost, queue string) any {
	if q := lookupQueue(v, queue); q != nil && q.Exclusive() {
		return q.Status().Owner
	}
	return nil
}

func (s *Server) findBinding(w http.ResponseWriter, r *http.Request, v *exchange.VHost, toQueue bool) (bindingJSON, bool) {
	src, dst, ok := bindingEnds(w, r, v, toQueue)
	if !ok {
		return bindingJSON{}, false
	}
	props := pathValue(r, "props")
	for _, b := range between(v, src, dst, toQueue) {
		if b.PropertiesKey == props {
			return b, true
		}
	}
	notFound(w)
	return bindingJSON{}, false
}

func (s *Server) getBinding(toQueue bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, ok := s.readVHost(w, r, u)
		if !ok {
			return
		}
		if b, ok := s.findBinding(w, r, v, toQueue); ok {
			writeJSON(w, http.StatusOK, b)
		}
	}
}

func (s *Server) deleteBinding(toQueue bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		v, ok := s.writeVHost(w, r, u)
		if !ok {
			return
		}
		b, ok := s.findBinding(w, r, v, toQueue)
		if !ok {
			return
		}
		var c exchange.Command = exchange.ExchangeUnbind{Destination: b.Destination, Source: b.Source, Key: b.RoutingKey, Args: b.Arguments}
		if toQueue {
			c = exchange.QueueUnbind{Queue: b.Destination, Exchange: b.Source, Key: b.RoutingKey, Args: b.Arguments, Owner: ownerOf(v, b.Destination)}
		}
		if _, ok := s.do(w, v, u, c); !ok {
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}
