package exchange

// Exchange types.
const (
	KindDirect  = "direct"
	KindFanout  = "fanout"
	KindTopic   = "topic"
	KindHeaders = "headers"
)

// Exchange routes messages to queues and other exchanges by its bindings.
// All fields are guarded by the vhost's lock.
type Exchange struct {
	vh         *VHost
	name       string
	kind       string
	durable    bool
	autoDelete bool
	internal   bool
	args       Table
	alternate  string
	hasAE      bool
	home       string // in a cluster, the node a non-durable exchange was declared on
	pol        *Policy
	event      bool // EventExchange (events.go)

	router   router
	delay    *delayer            // a delayed exchange's held messages (delayed.go)
	bindings []*binding          // this exchange as source
	inbound  []*binding          // this exchange as destination
	bindIdx  map[uint64]*binding // bindings, by a hash of destination and key, chained by sameNext (bindindex.go)
	bindPeak int                 // the most keys bindIdx held since it was last copied (shrink.go)

	counters msgCounters // atomics, no lock
}

// Name is the exchange's name ("" for the default exchange).
func (x *Exchange) Name() string { return x.name }

// Kind is the exchange type.
func (x *Exchange) Kind() string { return x.kind }

// Durable reports whether the exchange survives a restart.
func (x *Exchange) Durable() bool { return x.durable }

// AutoDelete reports whether the exchange goes with its last binding.
func (x *Exchange) AutoDelete() bool { return x.autoDelete }

// Internal reports whether clients may not publish to it directly.
func (x *Exchange) Internal() bool { return x.internal }

// Args are the declared arguments (do not modify).
func (x *Exchange) Args() Table { return x.args }

// ExchangeOpts describe an exchange declaration.
type ExchangeOpts struct {
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       Table
	Passive    bool
}

// predeclared are the exchanges every vhost has.
var predeclared = []struct{ name, kind string }{
	{"", KindDirect},
	{"amq.direct", KindDirect},
	{"amq.fanout", KindFanout},
	{"amq.topic", KindTopic},
	{"amq.headers", KindHeaders},
	{"amq.match", KindHeaders},
}

func validKind(k string) bool {
	switch k {
	case KindDirect, KindFanout, KindTopic, KindHeaders, KindDelayed, KindConsistentHash, KindModulusHash:
		return true
	}
	return false
}
