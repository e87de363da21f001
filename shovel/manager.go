package shovel

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// Store is what the manager needs to keep definitions across restarts: a
// node's metadata records (store.Badger has these methods).
type Store interface {
	PutMeta(key string, val []byte) error
	DeleteMeta(key string) error
	LoadMeta(prefix string, fn func(key string, val []byte) error) error
}

// Config wires a Manager.
type Config struct {
	Store Store
	// Local opens an in-process AMQP connection logged in as user: the
	// transport of "amqp://" URIs.
	Local func(user string) (net.Conn, error)
	// Node is this node's name, reported in the shovels' status.
	Node string
	Log  *slog.Logger
}

// Manager runs the dynamic shovels of a node and keeps their definitions.
type Manager struct {
	st    Store
	local func(string) (net.Conn, error)
	node  string
	log   *slog.Logger

	mu      sync.Mutex
	workers map[string]*worker // by key
	closed  bool
}

// ErrClosed is returned by Put after Close.
var ErrClosed = errors.New("shovel: manager closed")

const recordPrefix = "shovel/"

func recordKey(vhost, name string) string { return recordPrefix + vhost + "\x00" + name }

type record struct {
	VHost string         `json:"vhost"`
	Name  string         `json:"name"`
	User  string         `json:"user"`
	Value map[string]any `json:"value"`
}

// New creates a manager; Start runs the stored shovels.
func New(cfg Config) *Manager {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{st: cfg.Store, local: cfg.Local, node: cfg.Node, log: log, workers: map[string]*worker{}}
}

// Start runs every stored shovel. A stored definition that no longer
// validates is logged and skipped.
func (m *Manager) Start() error {
	var recs []record
	err := m.st.LoadMeta(recordPrefix, func(key string, val []byte) error {
		var r record
		if err := json.Unmarshal(val, &r); err != nil {
			m.log.Error("stored shovel definition unreadable, skipped", "key", key, "err", err)
			return nil
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		d, err := Parse(r.Value)
		if err != nil {
			m.log.Error("stored shovel definition invalid, skipped", "vhost", r.VHost, "shovel", r.Name, "err", err)
			continue
		}
		m.startLocked(r, d)
	}
	return nil
}

func (m *Manager) startLocked(r record, d Definition) {
	if prev := m.workers[recordKey(r.VHost, r.Name)]; prev != nil {
		prev.cancel() // a concurrent Put of the same name won
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{m: m, vhost: r.VHost, name: r.Name, user: r.User, def: d, value: r.Value,
		cancel: cancel, done: make(chan struct{}), state: StateStarting, since: time.Now()}
	m.workers[recordKey(r.VHost, r.Name)] = w
	go w.run(ctx)
}

// Put declares (or replaces) shovel name of vhost, run as user on
// "amqp://" URIs. The definition is stored before the shovel starts. A
// value that does not validate is a *FieldError.
func (m *Manager) Put(vhost, name, user string, value map[string]any) (created bool, err error) {
	d, err := Parse(value)
	if err != nil {
		return false, err
	}
	r := record{VHost: vhost, Name: name, User: user, Value: value}
	data, err := json.Marshal(r)
	if err != nil {
		return false, &FieldError{Field: "value", Msg: err.Error()}
	}
	k := recordKey(vhost, name)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false, ErrClosed
	}
	if err := m.st.PutMeta(k, data); err != nil {
		m.mu.Unlock()
		return false, err
	}
	old := m.workers[k]
	delete(m.workers, k)
	m.mu.Unlock()
	if old != nil {
		// Stopped first (outside mu, which a completing worker takes):
		// its connections close, so nothing it held unacked is lost.
		old.cancel()
		<-old.done
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.startLocked(r, d)
	}
	return old == nil, nil
}

// Delete stops and forgets a shovel; false if there was none.
func (m *Manager) Delete(vhost, name string) (bool, error) {
	k := recordKey(vhost, name)
	m.mu.Lock()
	w := m.workers[k]
	delete(m.workers, k)
	m.mu.Unlock()
	if w == nil {
		return false, nil
	}
	w.cancel()
	<-w.done
	return true, m.st.DeleteMeta(k)
}

// completed forgets a shovel whose src-delete-after was reached, as
// RabbitMQ deletes such a dynamic shovel.
func (m *Manager) completed(w *worker) {
	k := recordKey(w.vhost, w.name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.workers[k] != w {
		return
	}
	delete(m.workers, k)
	if err := m.st.DeleteMeta(k); err != nil {
		m.log.Error("completed shovel's definition not removed", "vhost", w.vhost, "shovel", w.name, "err", err)
	}
	m.log.Info("shovel completed and deleted", "vhost", w.vhost, "shovel", w.name, "moved", w.moved.Load())
}

// Close stops every shovel (their definitions stay for the next start).
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	ws := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	for _, w := range ws {
		w.cancel()
	}
	for _, w := range ws {
		<-w.done
	}
}

// Param is a shovel definition as /api/parameters shows it.
type Param struct {
	Component string         `json:"component"`
	VHost     string         `json:"vhost"`
	Name      string         `json:"name"`
	Value     map[string]any `json:"value"`
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

func (m *Manager) sorted(vhost string) []*worker {
	m.mu.Lock()
	ws := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		if vhost == "" || w.vhost == vhost {
			ws = append(ws, w)
		}
	}
	m.mu.Unlock()
	sort.Slice(ws, func(i, j int) bool {
		if ws[i].vhost != ws[j].vhost {
			return ws[i].vhost < ws[j].vhost
		}
		return ws[i].name < ws[j].name
	})
	return ws
}

// Params lists the definitions of vhost ("" for all).
func (m *Manager) Params(vhost string) []Param {
	out := []Param{}
	for _, w := range m.sorted(vhost) {
		out = append(out, Param{Component: "shovel", VHost: w.vhost, Name: w.name, Value: w.value})
	}
	return out
}

// Param returns one definition.
func (m *Manager) Param(vhost, name string) (Param, bool) {
	m.mu.Lock()
	w := m.workers[recordKey(vhost, name)]
	m.mu.Unlock()
	if w == nil {
		return Param{}, false
	}
	return Param{Component: "shovel", VHost: w.vhost, Name: w.name, Value: w.value}, true
}

// Statuses lists the shovels of vhost ("" for all) with their state.
func (m *Manager) Statuses(vhost string) []Status {
	out := []Status{}
	for _, w := range m.sorted(vhost) {
		w.mu.Lock()
		s := Status{Node: m.node, Timestamp: w.since.UTC().Format("2006-01-02 15:04:05"), Name: w.name, VHost: w.vhost,
			Type: "dynamic", State: w.state, Reason: w.reason, SrcURI: w.src, DestURI: w.dst,
			SrcProtocol: "amqp091", DestProtocol: "amqp091",
			SrcQueue: w.def.SrcQueue, SrcExchange: w.def.SrcExchange, SrcXKey: w.def.SrcExchangeKey,
			DestQueue: w.def.DestQueue, DestExchange: w.def.DestExchange, DestXKey: w.def.DestExchangeKey,
			Transferred: w.moved.Load()}
		w.mu.Unlock()
		if s.SrcURI == "" {
			s.SrcURI = redact(strings.Join(w.def.SrcURIs, ","))
		}
		if s.DestURI == "" {
			s.DestURI = redact(strings.Join(w.def.DestURIs, ","))
		}
		out = append(out, s)
	}
	return out
}
