package shovel

import (
	"sort"
	"strings"
)

// Param is a shovel definition as /api/parameters shows it.
type Param struct {
	Component string         `json:"component"`
	VHost     string         `json:"vhost"`
	Name      string         `json:"name"`
	Value     map[string]any `json:"value"`
	// Static: a bridge of the configuration file (not exported with the
	// definitions).
	Static bool `json:"-"`
}

// Status is a shovel's state as /api/shovels shows it.
type Status struct {
	Node      string `json:"node"`
	Timestamp string `json:"timestamp"`
	Name      string `json:"name"`
	VHost     string `json:"vhost"`
	Type      string `json:"type"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`

	SrcURI       string `json:"src_uri,omitempty"`
	SrcProtocol  string `json:"src_protocol"`
	SrcQueue     string `json:"src_queue,omitempty"`
	SrcExchange  string `json:"src_exchange,omitempty"`
	SrcXKey      string `json:"src_exchange_key,omitempty"`
	DestURI      string `json:"dest_uri,omitempty"`
	DestProtocol string `json:"dest_protocol"`
	DestQueue    string `json:"dest_queue,omitempty"`
	DestExchange string `json:"dest_exchange,omitempty"`
	DestXKey     string `json:"dest_exchange_key,omitempty"`
	// Transferred counts the messages settled at the source since this
	// node started the shovel.
	Transferred int64 `json:"messages_transferred"`
}

func (m *Manager) sorted(component, vhost string) []*shovelDef {
	m.mu.Lock()
	out := make([]*shovelDef, 0, len(m.defs))
	for _, sd := range m.defs {
		if (vhost == "" || sd.rec.VHost == vhost) && sd.rec.component() == component {
			c := *sd
			out = append(out, &c)
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].rec.VHost != out[j].rec.VHost {
			return out[i].rec.VHost < out[j].rec.VHost
		}
		return out[i].rec.Name < out[j].rec.Name
	})
	return out
}

func redactAll(uris []string) string {
	out := make([]string, len(uris))
	for i, u := range uris {
		out[i] = redact(u)
	}
	return strings.Join(out, ",")
}

// Params lists the definitions of vhost ("" for all), as stored: with the
// URIs' passwords (Redacted hides them).
func (m *Manager) Params(vhost string) []Param { return m.ParamsComponent(ComponentShovel, vhost) }

// ParamsComponent lists the definitions of component in vhost ("" for
// all), as Params. A bridge of the configuration file is listed too.
func (m *Manager) ParamsComponent(component, vhost string) []Param {
	out := []Param{}
	for _, sd := range m.sorted(component, vhost) {
		out = append(out, Param{Component: component, VHost: sd.rec.VHost, Name: sd.rec.Name, Value: sd.rec.Value, Static: sd.static})
	}
	return out
}

// Param returns one definition.
func (m *Manager) Param(vhost, name string) (Param, bool) {
	return m.ParamComponent(ComponentShovel, vhost, name)
}

// ParamComponent returns one definition of component.
func (m *Manager) ParamComponent(component, vhost, name string) (Param, bool) {
	if checkComponent(component) != nil {
		return Param{}, false
	}
	m.mu.Lock()
	sd := m.defs[componentKey(component, vhost, name)]
	m.mu.Unlock()
	if sd == nil {
		return Param{}, false
	}
	return Param{Component: component, VHost: sd.rec.VHost, Name: sd.rec.Name, Value: sd.rec.Value, Static: sd.static}, true
}

// StateRemote is the state this node reports of a shovel that runs on
// another node of the cluster (Status.Node names it); that node's API
// has its running state.
const StateRemote = "remote"

// Statuses lists the shovels of vhost ("" for all) with their state.
func (m *Manager) Statuses(vhost string) []Status {
	out := []Status{}
	for _, sd := range m.sorted(ComponentShovel, vhost) {
		d := sd.def
		s := Status{Node: m.node, Name: sd.rec.Name, VHost: sd.rec.VHost, Type: "dynamic",
			SrcProtocol: "amqp091", DestProtocol: "amqp091",
			SrcQueue: d.SrcQueue, SrcExchange: d.SrcExchange, SrcXKey: d.SrcExchangeKey,
			DestQueue: d.DestQueue, DestExchange: d.DestExchange, DestXKey: d.DestExchangeKey}
		if w := sd.w; w != nil {
			w.mu.Lock()
			s.Timestamp, s.State, s.Reason, s.SrcURI, s.DestURI = w.since.UTC().Format("2006-01-02 15:04:05"), w.state, w.reason, w.src, w.dst
			s.Transferred = w.moved.Load()
			w.mu.Unlock()
		} else {
			s.State = StateRemote
			m.mu.Lock()
			if m.owner != nil {
				_, s.Node = m.owner(recordKey(sd.rec.VHost, sd.rec.Name))
			}
			m.mu.Unlock()
			s.Reason = "runs on node " + s.Node
		}
		if s.SrcURI == "" {
			s.SrcURI = redactAll(d.SrcURIs)
		}
		if s.DestURI == "" {
			s.DestURI = redactAll(d.DestURIs)
		}
		out = append(out, s)
	}
	return out
}
