package exchange

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// sink records deliveries under a mutex. With pause set, Deliver asks the
// queue to stop dispatching.
type sink struct {
	mu        sync.Mutex
	ds        []Delivery
	cancelled int
	pause     bool
}

func (s *sink) Deliver(d Delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ds = append(s.ds, d)
	return !s.pause
}

func (s *sink) Cancelled(*Consumer) {
	s.mu.Lock()
	s.cancelled++
	s.mu.Unlock()
}

func (s *sink) deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.ds...)
}

func (s *sink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ds)
}

func (s *sink) bodies() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.ds))
	for i, d := range s.ds {
		out[i] = string(d.Msg.Body)
	}
	return out
}

func (s *sink) cancels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// dropSink drops everything; for benchmarks.
type dropSink struct{}

func (dropSink) Deliver(Delivery) bool { return true }
func (dropSink) Cancelled(*Consumer)   {}

// confirms records Confirm calls.
type confirms struct {
	mu    sync.Mutex
	calls map[uint64][]bool
	ch    chan struct{}
}

func newConfirms() *confirms {
	return &confirms{calls: map[uint64][]bool{}, ch: make(chan struct{}, 1024)}
}

func (c *confirms) Confirm(tag uint64, ok bool) {
	c.mu.Lock()
	c.calls[tag] = append(c.calls[tag], ok)
	c.mu.Unlock()
	c.ch <- struct{}{}
}

func (c *confirms) get(tag uint64) []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]bool(nil), c.calls[tag]...)
}

func newTestBroker(t testing.TB, st Store) *Broker {
	t.Helper()
	b, err := New(st, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// newTestVHost returns vhost "/" of a fresh broker over a fresh fake store.
func newTestVHost(t testing.TB) (*VHost, *fakeStore) {
	t.Helper()
	st := newFakeStore()
	b := newTestBroker(t, st)
	return mustVHost(t, b, "/"), st
}

func mustVHost(t testing.TB, b *Broker, name string) *VHost {
	t.Helper()
	if err := b.EnsureVHost(name); err != nil {
		t.Fatalf("EnsureVHost: %v", err)
	}
	v, ok := b.VHost(name)
	if !ok {
		t.Fatalf("vhost %q missing", name)
	}
	return v
}

func declareQ(t testing.TB, v *VHost, name string, o QueueOpts) *Queue {
	t.Helper()
	info, err := v.DeclareQueue(name, o)
	if err != nil {
		t.Fatalf("DeclareQueue(%q): %v", name, err)
	}
	q, err := v.Queue(info.Name, o.Owner)
	if err != nil {
		t.Fatalf("Queue(%q): %v", info.Name, err)
	}
	return q
}

func declareX(t testing.TB, v *VHost, name, kind string, o ExchangeOpts) {
	t.Helper()
	if err := v.DeclareExchange(name, kind, o); err != nil {
		t.Fatalf("DeclareExchange(%q): %v", name, err)
	}
}

func bindQ(t testing.TB, v *VHost, q, x, key string, args Table) {
	t.Helper()
	if err := v.BindQueue(q, x, key, args, nil); err != nil {
		t.Fatalf("BindQueue(%q, %q, %q): %v", q, x, key, err)
	}
}

func consume(t testing.TB, v *VHost, q string, o ConsumeOpts) (*Consumer, *sink) {
	t.Helper()
	s := &sink{}
	if o.Sink == nil {
		o.Sink = s
	}
	c, err := v.Consume(q, o)
	if err != nil {
		t.Fatalf("Consume(%q): %v", q, err)
	}
	return c, s
}

func publish(t testing.TB, v *VHost, x, key, body string) PublishResult {
	t.Helper()
	return publishM(t, v, &Message{Exchange: x, RoutingKey: key, Body: []byte(body)}, PublishOpts{})
}

func publishM(t testing.TB, v *VHost, m *Message, o PublishOpts) PublishResult {
	t.Helper()
	r, err := v.Publish(m, o)
	if err != nil {
		t.Fatalf("Publish(%q, %q): %v", m.Exchange, m.RoutingKey, err)
	}
	return r
}

func ready(q *Queue) int { r, _, _ := q.Stats(); return r }

// getBodies drains q with basic.get (no-ack) and returns the bodies.
func getBodies(q *Queue) []string {
	var out []string
	for {
		d, ok := q.Get(true)
		if !ok {
			return out
		}
		out = append(out, string(d.Msg.Body))
	}
}

func wantKind(t testing.TB, err error, k Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want kind %d", k)
	}
	if got := KindOf(err); got != k {
		t.Fatalf("error %q: kind %d, want %d", err, got, k)
	}
}

func wantText(t testing.TB, err error, want string) {
	t.Helper()
	var e *Error
	if err == nil {
		t.Fatalf("got nil error, want %q", want)
	}
	if ee, ok := err.(*Error); ok {
		e = ee
	}
	if e == nil || !strings.Contains(e.Text, want) {
		t.Fatalf("error %q, want text containing %q", err, want)
	}
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
