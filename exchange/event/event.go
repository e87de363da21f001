// Package event carries the broker's events to the amq.rabbitmq.event
// exchange (RabbitMQ's rabbitmq_event_exchange plugin).
//
// Front ends and the core report to one Bus. Reporting costs one atomic
// load while nobody listens: a caller asks On() before it builds an
// event, and Emit does nothing either when On is false, so that the
// connection and topology paths allocate nothing for events unless a
// queue is bound to the event exchange. Events are handed to the sink by
// one goroutine at a time, in the order they were emitted, never under the
// caller's locks: Emit only appends to a bounded queue (MaxPending; past
// it events are dropped and counted), so it may be called with core locks
// held.
package event

import (
	"sync"
	"sync/atomic"
	"time"
)

// MaxPending bounds the events waiting for the sink (besides the batch it
// is handling); past it new ones are dropped (Dropped counts them).
const MaxPending = 16384

// Event names, as RabbitMQ's event exchange routes them.
const (
	ConnectionCreated = "connection.created"
	ConnectionClosed  = "connection.closed"
	ChannelCreated    = "channel.created"
	ChannelClosed     = "channel.closed"
	ConsumerCreated   = "consumer.created"
	ConsumerDeleted   = "consumer.deleted"
	QueueCreated      = "queue.created"
	QueueDeleted      = "queue.deleted"
	ExchangeCreated   = "exchange.created"
	ExchangeDeleted   = "exchange.deleted"
	BindingCreated    = "binding.created"
	BindingDeleted    = "binding.deleted"
	VHostCreated      = "vhost.created"
	VHostDeleted      = "vhost.deleted"
	PolicySet         = "policy.set"
	PolicyCleared     = "policy.cleared"
	AlarmSet          = "alarm.set"
	AlarmCleared      = "alarm.cleared"
	UserAuthSuccess   = "user.authentication.success"
	UserAuthFailure   = "user.authentication.failure"
	UserCreated       = "user.created"
	UserDeleted       = "user.deleted"
	PermissionCreated = "permission.created"
	PermissionDeleted = "permission.deleted"
)

// Prop is one property of an event; it becomes a message header. Value is
// a string, bool, int64, a map[string]any or a []any.
type Prop struct {
	Key   string
	Value any
}

// Event is one event: its name (the routing key), when it happened and
// its properties.
type Event struct {
	Name  string
	At    time.Time
	Props []Prop
}

// Bus collects events for a sink. The zero value is not usable; a nil
// *Bus is off (On false, Emit a no-op).
type Bus struct {
	listening atomic.Bool
	dropped   atomic.Uint64
	sink      func(Event)

	mu      sync.Mutex
	pending []Event
	running bool // a goroutine is draining pending
}

// NewBus returns a bus that hands events to sink.
func NewBus(sink func(Event)) *Bus { return &Bus{sink: sink} }

// On reports whether anyone listens: callers build an event only then.
func (b *Bus) On() bool { return b != nil && b.listening.Load() }

// SetListening turns the bus on (someone is bound to the event exchange)
// or off.
func (b *Bus) SetListening(on bool) {
	if b != nil {
		b.listening.Store(on)
	}
}

// Dropped is the number of events dropped because MaxPending were waiting.
func (b *Bus) Dropped() uint64 {
	if b == nil {
		return 0
	}
	return b.dropped.Load()
}

// Emit reports an event named name with props, if anyone listens. It
// never blocks on the sink.
func (b *Bus) Emit(name string, props ...Prop) {
	if !b.On() {
		return
	}
	e := Event{Name: name, At: time.Now(), Props: props}
	b.mu.Lock()
	if len(b.pending) >= MaxPending {
		b.mu.Unlock()
		b.dropped.Add(1)
		return
	}
	b.pending = append(b.pending, e)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.drain()
	}
}

// drain hands the pending events to the sink until there are none.
func (b *Bus) drain() {
	for {
		b.mu.Lock()
		batch := b.pending
		b.pending = nil
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		for _, e := range batch {
			b.sink(e)
		}
	}
}

// EmitKV is Emit with the properties as key, value pairs (a string key
// then its value); for callers that do not import this package (auth).
func (b *Bus) EmitKV(name string, kv ...any) {
	if !b.On() {
		return
	}
	props := make([]Prop, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		props = append(props, Prop{Key: k, Value: kv[i+1]})
	}
	b.Emit(name, props...)
}
