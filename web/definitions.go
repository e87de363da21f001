package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Definitions are RabbitMQ's definitions.json: users, vhosts,
// permissions, topic permissions, policies, exchanges, queues and
// bindings. Parameters are the shovels' definitions (component "shovel"),
// exported and imported through the API's shovel manager; others are
// ignored.
type Definitions struct {
	RabbitVersion    string               `json:"rabbit_version,omitempty"`
	RabbitMQVersion  string               `json:"rabbitmq_version,omitempty"`
	ProductName      string               `json:"product_name,omitempty"`
	ProductVersion   string               `json:"product_version,omitempty"`
	Users            []DefUser            `json:"users,omitempty"`
	VHosts           []DefVHost           `json:"vhosts,omitempty"`
	Permissions      []DefPermission      `json:"permissions,omitempty"`
	TopicPermissions []DefTopicPermission `json:"topic_permissions,omitempty"`
	Parameters       []map[string]any     `json:"parameters"`
	GlobalParameters []map[string]any     `json:"global_parameters,omitempty"`
	Policies         []map[string]any     `json:"policies"`
	Queues           []DefQueue           `json:"queues"`
	Exchanges        []DefExchange        `json:"exchanges"`
	Bindings         []DefBinding         `json:"bindings"`
}

// DefUser is a user in definitions. Tags is a list in 3.10 exports and a
// comma-separated string in older ones.
type DefUser struct {
	Name             string         `json:"name"`
	PasswordHash     string         `json:"password_hash"`
	HashingAlgorithm string         `json:"hashing_algorithm,omitempty"`
	Tags             any            `json:"tags"`
	Limits           map[string]any `json:"limits,omitempty"`
}

type DefVHost struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Tags        any            `json:"tags,omitempty"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

type DefPermission struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

// DefTopicPermission is a topic permission in definitions.
type DefTopicPermission struct {
	User     string `json:"user"`
	VHost    string `json:"vhost"`
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

type DefQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost,omitempty"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

type DefExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost,omitempty"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type DefBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost,omitempty"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// ExportDefinitions collects the definitions of vhost, or of everything
// (users, vhosts and permissions included) when vhost is "". Exclusive
// queues and the predeclared exchanges are left out, as RabbitMQ does.
func (s *Server) ExportDefinitions(vhost string) Definitions {
	d := Definitions{Parameters: []map[string]any{}, Policies: []map[string]any{},
		Queues: []DefQueue{}, Exchanges: []DefExchange{}, Bindings: []DefBinding{}}
	d.RabbitVersion = rabbitVersion
	names := []string{vhost}
	if vhost == "" {
		d.RabbitMQVersion, d.ProductName, d.ProductVersion = rabbitVersion, productName, s.version
		d.Users, d.VHosts, d.Permissions = []DefUser{}, []DefVHost{}, []DefPermission{}
		d.TopicPermissions, d.GlobalParameters = []DefTopicPermission{}, s.globalParameters()
		for _, u := range s.users.ListUsers() {
			tags := u.Tags()
			if tags == nil {
				tags = []string{}
			}
			d.Users = append(d.Users, DefUser{Name: u.Name(), PasswordHash: u.PasswordHash(),
				HashingAlgorithm: u.HashingAlgorithm(), Tags: tags, Limits: map[string]any{}})
		}
		names = s.core.VHosts()
		for _, n := range names {
			m := s.meta(n)
			d.VHosts = append(d.VHosts, DefVHost{Name: n, Description: m.Description, Tags: m.Tags,
				Metadata: map[string]any{"description": m.Description, "tags": m.Tags}})
		}
		for _, p := range s.users.ListPermissions() {
			d.Permissions = append(d.Permissions, DefPermission(p))
		}
		for _, p := range s.users.ListTopicPermissions() {
			d.TopicPermissions = append(d.TopicPermissions, DefTopicPermission(p))
		}
	}
	for _, n := range names {
		v, ok := s.core.VHost(n)
		if !ok {
			continue
		}
		vn := n
		if vhost != "" {
			vn = "" // per-vhost exports omit the vhost field
		}
		if s.shovels != nil {
			params := s.shovels.Params(n)
			if s.bridges != nil {
				params = append(params, s.bridges.ParamsComponent(bridgeComponent, n)...)
			}
			for _, p := range params {
				if p.Static {
					continue // the configuration file's
				}
				e := map[string]any{"component": p.Component, "vhost": vn, "name": p.Name, "value": p.Value}
				if vn == "" {
					delete(e, "vhost")
				}
				d.Parameters = append(d.Parameters, e)
			}
		}
		for _, p := range v.Policies() {
			d.Policies = append(d.Policies, map[string]any{"vhost": vn, "name": p.Name, "pattern": p.Pattern,
				"apply-to": p.ApplyTo, "definition": nonNil(p.Definition), "priority": p.Priority})
			if vn == "" {
				delete(d.Policies[len(d.Policies)-1], "vhost")
			}
		}
		qs := v.Queues()
		sort.Slice(qs, func(i, j int) bool { return qs[i].Name() < qs[j].Name() })
		for _, q := range qs {
			if q.Exclusive() {
				continue
			}
			d.Queues = append(d.Queues, DefQueue{Name: q.Name(), VHost: vn, Durable: q.Durable(),
				AutoDelete: q.AutoDelete(), Arguments: nonNil(q.Args())})
		}
		xs := v.Exchanges()
		sort.Slice(xs, func(i, j int) bool { return xs[i].Name() < xs[j].Name() })
		for _, x := range xs {
			if x.Name() == "" || strings.HasPrefix(x.Name(), "amq.") {
				continue
			}
			d.Exchanges = append(d.Exchanges, DefExchange{Name: x.Name(), VHost: vn, Type: x.Kind(),
				Durable: x.Durable(), AutoDelete: x.AutoDelete(), Internal: x.Internal(), Arguments: nonNil(x.Args())})
		}
		for _, b := range vhostBindings(v) {
			if b.Source == "" {
				continue
			}
			if q := lookupQueue(v, b.Destination); b.DestinationType == "queue" && q != nil && q.Exclusive() {
				continue
			}
			d.Bindings = append(d.Bindings, DefBinding{Source: b.Source, VHost: vn, Destination: b.Destination,
				DestinationType: b.DestinationType, RoutingKey: b.RoutingKey, Arguments: b.Arguments})
		}
	}
	return d
}

func nonNil(t map[string]any) map[string]any {
	if t == nil {
		return map[string]any{}
	}
	return t
}

// ErrDefinitions wraps every error of ImportDefinitions.
var ErrDefinitions = errors.New("web: definitions")

// ImportDefinitions applies definitions in RabbitMQ's format: users,
// vhosts, permissions, topic permissions, policies, exchanges, queues,
// then bindings, each topology object through the core's permission check
// as "as" (exchange.VHost.Do). Objects that
// exist are left as they are when equivalent. If vhost is not "", items
// without a vhost field go there (a per-vhost file). Streams are declared
// as streams; quorum queues are declared classic with a warning. Every failure is collected; the rest is still applied.
func ImportDefinitions(core Core, users *auth.Users, as exchange.Authorizer, data []byte, vhost string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d, err := parseDefinitions(data)
	if err != nil {
		return err
	}
	var errs []error
	fail := func(what string, err error) {
		errs = append(errs, fmt.Errorf("%s: %v", what, err))
	}
	for _, u := range d.Users {
		if err := users.PutUserHash(u.Name, u.PasswordHash, tagList(u.Tags)); err != nil {
			fail("user "+u.Name, err)
		}
	}
	for _, v := range d.VHosts {
		if err := core.EnsureVHost(v.Name); err != nil {
			fail("vhost "+v.Name, err)
		}
	}
	for _, p := range d.Permissions {
		if _, ok := core.VHost(p.VHost); !ok {
			fail("permission of "+p.User, fmt.Errorf("no vhost %q", p.VHost))
			continue
		}
		if err := users.SetPermissions(p.User, p.VHost, p.Configure, p.Write, p.Read); err != nil {
			fail("permission of "+p.User+" in "+p.VHost, err)
		}
	}
	for _, p := range d.TopicPermissions {
		if _, ok := core.VHost(p.VHost); !ok {
			fail("topic permission of "+p.User, fmt.Errorf("no vhost %q", p.VHost))
			continue
		}
		if err := users.SetTopicPermissions(p.User, p.VHost, p.Exchange, p.Write, p.Read); err != nil {
			fail("topic permission of "+p.User+" in "+p.VHost, err)
		}
	}
	vh := func(name string) (*exchange.VHost, error) {
		if name == "" {
			name = vhost
		}
		v, ok := core.VHost(name)
		if !ok {
			return nil, fmt.Errorf("no vhost %q", name)
		}
		return v, nil
	}
	for _, m := range d.Policies {
		name, _ := m["name"].(string)
		vn, _ := m["vhost"].(string)
		v, err := vh(vn)
		if err == nil {
			var p exchange.Policy
			if p, err = policyFromBody(m); err == nil {
				p.Name = name
				_, err = v.SetPolicy(p)
			}
		}
		if err != nil {
			fail("policy "+name, err)
		}
	}
	for _, x := range d.Exchanges {
		v, err := vh(x.VHost)
		if err == nil {
			if strings.HasPrefix(x.Name, "amq.") || x.Name == "" {
				continue
			}
			_, err = v.Do(as, exchange.ExchangeDeclare{Name: x.Name, Type: x.Type, Opts: exchange.ExchangeOpts{Durable: x.Durable,
				AutoDelete: x.AutoDelete, Internal: x.Internal, Args: x.Arguments}})
		}
		if err != nil {
			fail("exchange "+x.Name, err)
		}
	}
	for _, q := range d.Queues {
		v, err := vh(q.VHost)
		if err == nil {
			args := q.Arguments
			if t, _ := args["x-queue-type"].(string); t != "" && t != "classic" && t != "stream" {
				log.Warn("queue type not supported yet, declared classic", "queue", q.Name, "type", t)
				args = withoutKeys(args, "x-queue-type", "x-quorum-initial-group-size", "x-delivery-limit",
					"x-max-in-memory-length", "x-max-in-memory-bytes", "x-max-age", "x-stream-max-segment-size-bytes")
			}
			_, err = v.Do(as, exchange.QueueDeclare{Name: q.Name, Opts: exchange.QueueOpts{Durable: q.Durable, AutoDelete: q.AutoDelete, Args: args}})
		}
		if err != nil {
			fail("queue "+q.Name, err)
		}
	}
	for _, b := range d.Bindings {
		v, err := vh(b.VHost)
		if err == nil {
			var c exchange.Command = exchange.ExchangeBind{Destination: b.Destination, Source: b.Source, Key: b.RoutingKey, Args: b.Arguments}
			if b.DestinationType == "queue" {
				c = exchange.QueueBind{Queue: b.Destination, Exchange: b.Source, Key: b.RoutingKey, Args: b.Arguments}
			}
			_, err = v.Do(as, c)
		}
		if err != nil {
			fail("binding "+b.Source+" -> "+b.Destination, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrDefinitions, errors.Join(errs...))
	}
	return nil
}

func withoutKeys(t map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

func parseDefinitions(data []byte) (Definitions, error) {
	// One pass into the typed struct (an import's memory is a few times
	// its body, guard.go); numbers are json.Number until normalised, so
	// that integers in arguments and policies stay integers.
	var d Definitions
	if len(bytes.TrimSpace(data)) == 0 {
		return d, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("%w: %v", ErrDefinitions, err)
	}
	table := func(m map[string]any) map[string]any {
		return nonNil(normalizeNumbers(m).(map[string]any))
	}
	for i := range d.Users {
		d.Users[i].Tags = normalizeNumbers(d.Users[i].Tags)
		d.Users[i].Limits, _ = normalizeNumbers(d.Users[i].Limits).(map[string]any)
	}
	for i := range d.VHosts {
		d.VHosts[i].Tags = normalizeNumbers(d.VHosts[i].Tags)
		d.VHosts[i].Metadata, _ = normalizeNumbers(d.VHosts[i].Metadata).(map[string]any)
	}
	for _, l := range [][]map[string]any{d.Parameters, d.GlobalParameters, d.Policies} {
		for i := range l {
			l[i], _ = normalizeNumbers(l[i]).(map[string]any)
		}
	}
	for i := range d.Queues {
		d.Queues[i].Arguments = table(d.Queues[i].Arguments)
	}
	for i := range d.Exchanges {
		d.Exchanges[i].Arguments = table(d.Exchanges[i].Arguments)
	}
	for i := range d.Bindings {
		d.Bindings[i].Arguments = table(d.Bindings[i].Arguments)
	}
	return d, nil
}

func (s *Server) getDefinitions(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	d := s.ExportDefinitions("")
	if r.URL.Query().Get("download") != "" {
		w.Header().Set("Content-Disposition", `attachment; filename="`+r.URL.Query().Get("download")+`"`)
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) getVHostDefinitions(w http.ResponseWriter, r *http.Request, _ *auth.User) {
	name := pathValue(r, "vhost")
	if _, ok := s.core.VHost(name); !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.ExportDefinitions(name))
}

// readDefinitionsBody reads a JSON body, which guard limited to
// http.max_definitions_body. (RabbitMQ's UI uploads a multipart form; the
// API takes JSON only, guard.go, and Trident's UI sends the file as JSON.)
func readDefinitionsBody(r *http.Request) ([]byte, error) {
	return io.ReadAll(r.Body)
}

// importSlot waits for the one definitions import that may run at a time,
// so that concurrent imports cost the memory of one; ok false when the
// client went away first.
func (s *Server) importSlot(r *http.Request) (release func(), ok bool) {
	select {
	case s.imports <- struct{}{}:
		return func() { <-s.imports }, true
	case <-r.Context().Done():
		return nil, false
	}
}

func (s *Server) postDefinitions(vhostScoped bool) handler {
	return func(w http.ResponseWriter, r *http.Request, u *auth.User) {
		vhost := ""
		if vhostScoped {
			vhost = pathValue(r, "vhost")
			if _, ok := s.core.VHost(vhost); !ok {
				notFound(w)
				return
			}
		}
		release, ok := s.importSlot(r)
		if !ok {
			return
		}
		defer release()
		data, err := readDefinitionsBody(r)
		if err != nil {
			badRequest(w, err.Error())
			return
		}
		if err := ImportDefinitions(s.core, s.users, s.actor(u), data, vhost, s.log); err != nil {
			badRequest(w, err.Error())
			return
		}
		s.importVHostMeta(data)
		if err := s.importShovels(data, vhost, u); err != nil {
			badRequest(w, err.Error())
			return
		}
		s.log.Info("definitions imported via the API", "by", u.Name(), "vhost", vhost)
		w.WriteHeader(http.StatusNoContent)
	}
}

// importShovels declares the shovels among the parameters of imported
// definitions, as u.
func (s *Server) importShovels(data []byte, vhost string, u *auth.User) error {
	if s.shovels == nil {
		return nil
	}
	return ImportShovels(s.shovels, s.core, data, vhost, u.Name())
}

// ImportShovels declares the shovels (and the MQTT bridges, when sh runs
// them too: Bridges) among the parameters of definitions (data), run as
// user on "amqp://" URIs; a parameter without a vhost goes to vhost (""
// for "/"). The node calls it for the definitions file it reads at boot,
// once its shovel manager runs.
func ImportShovels(sh Shovels, core Core, data []byte, vhost, user string) error {
	d, err := parseDefinitions(data)
	if err != nil {
		return err
	}
	var errs []error
	bridges, _ := sh.(Bridges)
	for _, p := range d.Parameters {
		component, _ := p["component"].(string)
		if component != "shovel" && (component != bridgeComponent || bridges == nil) {
			continue
		}
		name, _ := p["name"].(string)
		vn, _ := p["vhost"].(string)
		if vn == "" {
			vn = vhost
		}
		if vn == "" {
			vn = "/"
		}
		value, _ := p["value"].(map[string]any)
		if _, ok := core.VHost(vn); !ok {
			errs = append(errs, fmt.Errorf("shovel %s: no vhost %q", name, vn))
			continue
		}
		if component == bridgeComponent {
			if _, err := bridges.PutComponent(component, vn, name, user, value); err != nil {
				errs = append(errs, fmt.Errorf("mqtt bridge %s in %s: %v", name, vn, err))
			}
			continue
		}
		if _, err := sh.Put(vn, name, user, value); err != nil {
			errs = append(errs, fmt.Errorf("shovel %s in %s: %v", name, vn, err))
		}
	}
	return errors.Join(errs...)
}

// importVHostMeta keeps the descriptions and tags of imported vhosts.
func (s *Server) importVHostMeta(data []byte) {
	d, err := parseDefinitions(data)
	if err != nil {
		return
	}
	for _, v := range d.VHosts {
		desc, tags := v.Description, v.Tags
		if desc == "" && v.Metadata != nil {
			desc, _ = v.Metadata["description"].(string)
		}
		if tags == nil && v.Metadata != nil {
			tags = v.Metadata["tags"]
		}
		if desc != "" || tags != nil {
			if err := s.core.SetVHostMetadata(v.Name, desc, tagList(tags)); err != nil {
				s.log.Warn("vhost metadata from definitions", "vhost", v.Name, "err", err)
			}
		}
	}
}
