package shovel

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeclareStatic runs an MQTT bridge of the configuration file: on this
// node only (no placement), not stored (the file declares it at every
// start), and neither replaced nor deleted through the API (ErrStatic).
// It acts here as user in vhost. A value that does not validate is a
// *FieldError. Call it before Start, so that a stored bridge of the same
// name gives way to it.
func (m *Manager) DeclareStatic(vhost, name, user string, value map[string]any) error {
	r := record{Component: ComponentMQTTBridge, VHost: vhost, Name: name, User: user, Value: value}
	sd := &shovelDef{rec: r, static: true}
	if err := sd.parse(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	k := r.key()
	if cur := m.defs[k]; cur != nil {
		if cur.static {
			return &FieldError{Field: "name", Msg: fmt.Sprintf("bridge '%s' in vhost '%s' is declared twice", name, vhost)}
		}
		if cur.w != nil {
			cur.w.cancel() // stops on its own; its successor's connections come after
		}
	}
	m.defs[k] = sd
	m.startLocked(sd)
	return nil
}

// clustered reports whether the manager runs in a cluster (SetOwner).
func (m *Manager) clustered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owner != nil
}

// dropBridgeQueue deletes a deleted bridge's out queue, as the user who
// declared it; a failure is logged (the queue is an ordinary one an
// operator may delete).
func (m *Manager) dropBridgeQueue(vhost, name, user string) {
	w := &worker{m: m, vhost: vhost, name: name, user: user}
	c, err := w.dialOne(localURI(vhost))
	if err != nil {
		m.log.Warn("deleted bridge's queue not deleted", "vhost", vhost, "bridge", name, "err", err)
		return
	}
	defer c.Close()
	ch, err := c.Channel()
	if err == nil {
		_, err = ch.QueueDelete(BridgeQueue(name), false, false, false)
	}
	var ae *amqp.Error
	if err != nil && !(asAMQP(err, &ae) && ae.Code == amqp.NotFound) {
		m.log.Warn("deleted bridge's queue not deleted", "vhost", vhost, "bridge", name, "err", err)
	}
}

// defaultClientID is a bridge's client id on the remote broker when its
// definition has none: as Mosquitto's "<hostname>.<connection name>",
// with this node's name (and the vhost, unless "/").
func defaultClientID(node, vhost, name string) string {
	if vhost != "/" {
		return node + "." + vhost + "." + name
	}
	return node + "." + name
}

// BridgeStatus is an MQTT bridge's state as /api/mqtt/bridges shows it.
type BridgeStatus struct {
	Node      string `json:"node"`
	Timestamp string `json:"timestamp"`
	Name      string `json:"name"`
	VHost     string `json:"vhost"`
	// Type is "dynamic" (declared through the API) or "static" (by the
	// configuration file).
	Type   string `json:"type"`
	User   string `json:"user"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Address is the remote broker's address in use, or the configured
	// ones.
	Address         string        `json:"address"`
	ProtocolVersion string        `json:"bridge_protocol_version"`
	TLS             bool          `json:"tls"`
	ClientID        string        `json:"remote_clientid"`
	CleanSession    bool          `json:"cleansession"`
	Topics          []BridgeTopic `json:"topics"`
	Queue           string        `json:"queue,omitempty"` // the out-direction's local queue
	// MessagesIn and MessagesOut count the messages forwarded from and to
	// the remote broker since this node started the bridge.
	MessagesIn  int64 `json:"messages_in"`
	MessagesOut int64 `json:"messages_out"`
}

// BridgeStatuses lists the MQTT bridges of vhost ("" for all) with their
// state.
func (m *Manager) BridgeStatuses(vhost string) []BridgeStatus {
	out := []BridgeStatus{}
	for _, sd := range m.sorted(ComponentMQTTBridge, vhost) {
		d := sd.bridge
		s := BridgeStatus{Node: m.node, Name: sd.rec.Name, VHost: sd.rec.VHost, Type: "dynamic", User: sd.rec.User,
			ProtocolVersion: d.ProtocolVersion, TLS: d.TLS, ClientID: d.ClientID, CleanSession: d.CleanSession, Topics: d.Topics}
		if sd.static {
			s.Type = "static"
		}
		if s.ClientID == "" {
			s.ClientID = defaultClientID(m.node, sd.rec.VHost, sd.rec.Name)
		}
		for _, t := range d.Topics {
			if t.out() {
				s.Queue = BridgeQueue(sd.rec.Name)
			}
		}
		if w := sd.w; w != nil {
			w.mu.Lock()
			s.Timestamp, s.State, s.Reason, s.Address = w.since.UTC().Format(time.DateTime), w.state, w.reason, w.dst
			w.mu.Unlock()
			s.MessagesIn, s.MessagesOut = w.in.Load(), w.out.Load()
		} else {
			s.State = StateRemote
			m.mu.Lock()
			if m.owner != nil {
				_, s.Node = m.owner(componentKey(ComponentMQTTBridge, sd.rec.VHost, sd.rec.Name))
			}
			m.mu.Unlock()
			s.Reason = "runs on node " + s.Node
		}
		if s.Address == "" {
			s.Address = fmt.Sprint(d.Addresses)
		}
		out = append(out, s)
	}
	return out
}

func asAMQP(err error, target **amqp.Error) bool { return errors.As(err, target) }
