package shovel

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Store is what the manager needs to keep definitions across restarts: a
// node's metadata records (store.Badger has these methods).
type Store interface {
	PutMeta(key string, val []byte) error
	DeleteMeta(key string) error
	LoadMeta(prefix string, fn func(key string, val []byte) error) error
}

// Replicator writes records cluster-wide and returns once they are
// committed: keys[i] gets vals[i], or is deleted when vals[i] is nil.
type Replicator interface {
	ReplicateMeta(keys []string, vals [][]byte) error
}

// Config wires a Manager.
type Config struct {
	Store Store
	// Replicator, in a cluster, writes the definitions while the
	// cluster's topology commands are off: records every node holds
	// (cluster/meta.Replicator). nil (standalone): they go to Store.
	Replicator Replicator
	// Local opens an in-process AMQP connection logged in as user: the
	// transport of "amqp://" URIs. With user "" the connection
	// authenticates the credentials the client sends (a URI's userinfo)
	// as a remote client's, never as from loopback.
	Local func(user string) (net.Conn, error)
	// Sockets records the shovels' own TCP connections, so that this
	// node's AMQP listeners never take them for loopback ones (nil: not
	// recorded).
	Sockets *Sockets
	// Node is this node's name, reported in the shovels' status.
	Node string
	// MQTTExchange is the topic exchange the MQTT front end publishes to
	// and binds from: the local end of MQTT bridges ("" amq.topic).
	MQTTExchange string
	Log          *slog.Logger
}

// Manager keeps the dynamic shovels' definitions and runs those this node
// owns. Standalone it owns them all. In a cluster the definitions are
// cluster-wide records (written through Config.Replicator, and every
// node hands the committed ones to ApplyMeta), and each shovel runs on one
// node, the one SetOwner's function names (the node's choice among the
// alive members); when that node goes, another takes the shovel over. A
// shovel moves messages at least once across such a move (on-confirm: the
// source's unsettled messages are redelivered), as RabbitMQ's do.
type Manager struct {
	st      Store
	repl    Replicator // nil: definitions go to st (Config.Replicator)
	local   func(string) (net.Conn, error)
	sockets *Sockets
	node    string
	log     *slog.Logger

	mqttExchange string

	mu     sync.Mutex
	defs   map[string]*shovelDef // by key
	owner  func(key string) (self bool, node string)
	closed bool
	kick   chan struct{}
	done   chan struct{}

	proposer atomic.Pointer[proposerBox] // command.go; nil: standalone
}

// shovelDef is one definition and, if it runs here, its worker.
type shovelDef struct {
	rec    record
	data   []byte // rec as stored
	def    Definition
	bridge *BridgeDefinition // an MQTT bridge's (def unused); nil for a shovel
	static bool              // from the configuration file: not stored, runs on this node
	// unbind: the binding keys of the out rules of the bridge this one
	// replaced that it does not have (its worker removes them).
	unbind []string
	w      *worker // nil unless running here
}

// ErrClosed is returned by Put after Close.
var ErrClosed = errors.New("shovel: manager closed")

// ErrUnknownComponent is returned for a parameter component the manager
// does not run.
var ErrUnknownComponent = errors.New("shovel: unknown parameter component")

func checkComponent(component string) error {
	if component != ComponentShovel && component != ComponentMQTTBridge {
		return ErrUnknownComponent
	}
	return nil
}

// ErrStatic is returned when the API changes a bridge that the
// configuration file declares.
var ErrStatic = errors.New("shovel: declared in the configuration file")

// New creates a manager; Start runs the stored shovels.
func New(cfg Config) *Manager {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ex := cfg.MQTTExchange
	if ex == "" {
		ex = "amq.topic"
	}
	return &Manager{st: cfg.Store, repl: cfg.Replicator, local: cfg.Local, sockets: cfg.Sockets, node: cfg.Node, log: log, defs: map[string]*shovelDef{},
		mqttExchange: ex, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// Start runs every stored shovel this node owns. A stored definition that
// no longer validates is logged and skipped.
func (m *Manager) Start() error {
	var recs [][]byte
	for _, prefix := range recordPrefixes {
		err := m.st.LoadMeta(prefix, func(key string, val []byte) error {
			recs = append(recs, append([]byte(nil), val...))
			return nil
		})
		if err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, data := range recs {
		m.upsertLocked(data)
	}
	return nil
}

// upsertLocked installs a stored record (data), replacing a different one
// of the same name that does not run here; one that runs is returned, not
// replaced (replace stops it first). A record that does not decode or
// validate is logged and skipped.
func (m *Manager) upsertLocked(data []byte) (old *worker, ok bool) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		m.log.Error("shovel definition unreadable, skipped", "err", err)
		return nil, false
	}
	sd := &shovelDef{rec: r, data: data}
	if err := sd.parse(); err != nil {
		m.log.Error("shovel definition invalid, skipped", "component", r.component(), "vhost", r.VHost, "shovel", r.Name, "err", err)
		return nil, false
	}
	k := r.key()
	if cur := m.defs[k]; cur != nil {
		if cur.static {
			return nil, true // the configuration file's stands
		}
		if string(cur.data) == string(data) {
			return nil, true // the same (this node's own write, applied)
		}
		if cur.w != nil {
			return cur.w, false // the caller stops it first (replace)
		}
		if cur.bridge != nil && sd.bridge != nil {
			sd.unbind = staleKeys(cur.bridge, sd.bridge, cur.unbind)
		}
	}
	m.defs[k] = sd
	if !m.closed && m.ownsLocked(k) {
		m.startLocked(sd)
	}
	return nil, true
}

// parse validates sd's value by its component.
func (sd *shovelDef) parse() error {
	r := &sd.rec
	if err := checkComponent(r.component()); err != nil {
		return err
	}
	if r.component() == ComponentMQTTBridge {
		b, err := ParseBridge(r.Value)
		sd.bridge = &b
		return err
	}
	d, err := Parse(r.Value)
	sd.def = d
	return err
}

func (m *Manager) startLocked(sd *shovelDef) {
	r := sd.rec
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{m: m, vhost: r.VHost, name: r.Name, user: r.User, def: sd.def, bridge: sd.bridge, unbind: sd.unbind, value: r.Value,
		cancel: cancel, done: make(chan struct{}), state: StateStarting, since: time.Now()}
	sd.w = w
	go w.run(ctx)
}

// Put declares (or replaces) shovel name of vhost, run as user on
// "amqp://" URIs. The definition is stored (cluster-wide in a cluster)
// before the shovel starts. A value that does not validate is a
// *FieldError.
func (m *Manager) Put(vhost, name, user string, value map[string]any) (created bool, err error) {
	return m.PutComponent(ComponentShovel, vhost, name, user, value)
}

// PutComponent declares (or replaces) a definition of component (a
// shovel or an MQTT bridge), as Put. A bridge the configuration file
// declares cannot be replaced (ErrStatic).
func (m *Manager) PutComponent(component, vhost, name, user string, value map[string]any) (created bool, err error) {
	r := record{VHost: vhost, Name: name, User: user, Value: value}
	if component != ComponentShovel {
		r.Component = component
	}
	if err := (&shovelDef{rec: r}).parse(); err != nil {
		return false, err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return false, &FieldError{Field: "value", Msg: err.Error()}
	}
	k := r.key()
	m.mu.Lock()
	closed := m.closed
	cur, existed := m.defs[k]
	static := existed && cur.static
	m.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	if static {
		return false, ErrStatic
	}
	if p := m.commandsOn(); p != nil {
		// Committed and applied on every node (ApplyCommitted), this one
		// included, when it returns.
		// The user who defines a shovel is the one it runs as
		// (RabbitMQ's), and the one the command acts for.
		c := Command{Op: OpPut, Actor: user, Component: r.Component, VHost: vhost, Name: name, User: user, Value: value}
		if err := p.ProposeParameters(EncodeCommand(c)); err != nil {
			return false, err
		}
	} else if err := m.putRecord(k, data); err != nil {
		// In a cluster without commands the write returns once the record
		// is committed and applied here (ApplyMeta may have installed it
		// already).
		return false, err
	}
	m.replace(data)
	return !existed, nil
}

// replace installs data, stopping the shovel it replaces first: its
// connections close, so nothing it held unacked is lost.
func (m *Manager) replace(data []byte) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		m.log.Error("shovel definition unreadable, skipped", "err", err)
		return
	}
	k := r.key()
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return
		}
		cur := m.defs[k]
		if cur != nil && (cur.static || string(cur.data) == string(data)) {
			m.mu.Unlock()
			return
		}
		if cur != nil && cur.w != nil {
			w := cur.w
			cur.w = nil
			m.mu.Unlock()
			w.cancel()
			<-w.done
			continue
		}
		m.upsertLocked(data)
		m.mu.Unlock()
		return
	}
}

// remove forgets key's definition and stops its shovel (not one of the
// configuration file's).
func (m *Manager) remove(key string) bool {
	m.mu.Lock()
	sd := m.defs[key]
	if sd != nil && sd.static {
		m.mu.Unlock()
		return false
	}
	delete(m.defs, key)
	m.mu.Unlock()
	if sd == nil {
		return false
	}
	if sd.w != nil {
		sd.w.cancel()
		<-sd.w.done
	}
	return true
}

// Delete stops and forgets a shovel for user actor (the command's
// Actor); false if there was none.
func (m *Manager) Delete(actor, vhost, name string) (bool, error) {
	return m.DeleteComponent(actor, ComponentShovel, vhost, name)
}

// DeleteComponent stops and forgets a definition of component; false if
// there was none. One the configuration file declares is ErrStatic.
func (m *Manager) DeleteComponent(actor, component, vhost, name string) (bool, error) {
	if err := checkComponent(component); err != nil {
		return false, err
	}
	k := componentKey(component, vhost, name)
	m.mu.Lock()
	sd := m.defs[k]
	m.mu.Unlock()
	if sd != nil && sd.static {
		return true, ErrStatic
	}
	if sd == nil {
		return false, nil
	}
	// The record goes first (a proposal that fails leaves the shovel as
	// it was), then the shovel here (ApplyCommitted or ApplyMeta may have
	// removed it already).
	var err error
	if p := m.commandsOn(); p != nil {
		c := Command{Op: OpDelete, Actor: actor, VHost: vhost, Name: name}
		if component != ComponentShovel {
			c.Component = component
		}
		err = p.ProposeParameters(EncodeCommand(c))
	} else {
		err = m.deleteRecord(k)
	}
	if err != nil {
		return true, err
	}
	m.remove(k)
	if component == ComponentMQTTBridge && sd != nil && sd.bridge != nil {
		for _, t := range sd.bridge.Topics {
			if t.out() {
				m.dropBridgeQueue(vhost, name, sd.rec.User)
				break
			}
		}
	}
	return true, nil
}

// ErrNotHere is returned by Restart for a shovel that runs on another node
// of the cluster: that node's API restarts it.
var ErrNotHere = errors.New("shovel: runs on another node")

// Restart stops a shovel that runs here and starts it again from its
// definition (new connections; what it held unacked is redelivered at
// the source), as RabbitMQ's restart does; false if there is none.
func (m *Manager) Restart(vhost, name string) (bool, error) {
	return m.RestartComponent(ComponentShovel, vhost, name)
}

// RestartComponent restarts a definition of component, as Restart.
func (m *Manager) RestartComponent(component, vhost, name string) (bool, error) {
	if err := checkComponent(component); err != nil {
		return false, err
	}
	k := componentKey(component, vhost, name)
	m.mu.Lock()
	sd := m.defs[k]
	if sd == nil || m.closed {
		m.mu.Unlock()
		return false, nil
	}
	w := sd.w
	if w == nil {
		m.mu.Unlock()
		return true, ErrNotHere
	}
	sd.w = nil
	m.mu.Unlock()
	w.cancel()
	<-w.done
	m.mu.Lock()
	defer m.mu.Unlock()
	// Deleted, replaced or moved meanwhile: the new state stands.
	if cur := m.defs[k]; cur == sd && sd.w == nil && !m.closed && m.ownsLocked(k) {
		m.startLocked(sd)
	}
	return true, nil
}

// completed forgets a shovel whose src-delete-after was reached, as
// RabbitMQ deletes such a dynamic shovel.
func (m *Manager) completed(w *worker) {
	k := recordKey(w.vhost, w.name) // bridges never complete
	m.mu.Lock()
	sd := m.defs[k]
	if sd == nil || sd.w != w {
		m.mu.Unlock()
		return
	}
	delete(m.defs, k)
	m.mu.Unlock()
	var err error
	if p := m.commandsOn(); p != nil {
		err = p.ProposeParameters(EncodeCommand(Command{Op: OpDelete, VHost: w.vhost, Name: w.name}))
	} else {
		err = m.deleteRecord(k)
	}
	if err != nil {
		m.log.Error("completed shovel's definition not removed", "vhost", w.vhost, "shovel", w.name, "err", err)
	}
	m.log.Info("shovel completed and deleted", "vhost", w.vhost, "shovel", w.name, "moved", w.moved.Load())
}

// Close stops every shovel (their definitions stay for the next start).
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.done)
	var ws []*worker
	for _, sd := range m.defs {
		if sd.w != nil {
			ws = append(ws, sd.w)
		}
	}
	m.mu.Unlock()
	for _, w := range ws {
		w.cancel()
	}
	for _, w := range ws {
		<-w.done
	}
}

// putRecord writes a definition's record: through the Replicator in a
// cluster (every node holds it), else to the store.
func (m *Manager) putRecord(k string, data []byte) error {
	if m.repl != nil {
		return m.repl.ReplicateMeta([]string{k}, [][]byte{data})
	}
	return m.st.PutMeta(k, data)
}

// deleteRecord deletes a definition's record as putRecord writes it.
func (m *Manager) deleteRecord(k string) error {
	if m.repl != nil {
		return m.repl.ReplicateMeta([]string{k}, [][]byte{nil})
	}
	return m.st.DeleteMeta(k)
}
