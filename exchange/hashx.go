package exchange

import (
	"fmt"
	"github.com/trident-broker/trident/exchange/hashring"
	"slices"
	"time"
)

// Hash exchanges: RabbitMQ's x-consistent-hash (its consistent hash
// exchange plugin) and x-modulus-hash (its sharding plugin's type). Each
// routes a message to exactly one of its destinations, chosen by a hash.
//
// x-consistent-hash: a binding's key is its weight, a positive integer as
// a string ("The binding key must be an integer" / "... greater than 0",
// PRECONDITION_FAILED, as the plugin). What is hashed is the routing key,
// or the header named by the exchange argument hash-header, or the
// property named by hash-property (message_id, correlation_id or
// timestamp, the latter in seconds as a decimal string); the two
// arguments exclude each other. A message without the header or property
// hashes as "absent": all such messages go to one destination.
//
// The choice is weighted rendezvous hashing (highest random weight):
// every destination d, with w the sum of its bindings' weights, draws
// u = H(key, d) uniform in (0,1), and the destination with the least
// -ln(u)/w wins. Those are exponential variables of rate w, so d wins
// with probability exactly w/Σw: the spread is as even as the keys are
// random, where the plugin's ring (jump hashing over buckets numbered in
// binding order) is not; a key's destination is a pure function of the
// key and the set of (destination, weight) pairs, so it is the same after
// a restart, on every node, whatever the order bindings were made in;
// and adding, removing or re-weighting one destination only moves keys
// to or from that destination, since every other destination's score
// for a key is unchanged. The cost is one 64-bit mix, a table-driven
// fixed-point log2 and a 128-bit multiply per destination per message;
// there is no floating point, so every CPU computes the same bits. With
// all weights equal the log is skipped (the largest draw wins).
//
// x-modulus-hash: the hash of the routing key modulo the number of
// distinct destinations, taken in name order (exchanges before queues,
// as RabbitMQ sorts its resources); binding keys are not looked at.
//
// Hashes: FNV-1a (64-bit) of the bytes, finished by murmur3's fmix64;
// a destination's seed is the same hash of its kind and name. Both are
// fixed: no per-process seed.
const (
	KindConsistentHash = "x-consistent-hash"
	KindModulusHash    = "x-modulus-hash"
)

// What a consistent-hash exchange hashes.
const (
	hashOnKey = iota
	hashOnHeader
	hashOnProperty
)

var hashProperties = []string{"correlation_id", "message_id", "timestamp"}

// hashKindOf is the type an exchange of kind with args routes as: a
// delayed exchange's x-delayed-type may be a hash type.
func hashKindOf(kind string, args Table) string {
	if kind == KindDelayed {
		t, _ := args["x-delayed-type"].(string)
		return t
	}
	return kind
}

// validateHashArgs checks a new hash exchange's arguments, as the plugin's
// validate/1; and a delayed exchange's x-delayed-type, when that is a
// hash type the cluster has not enabled yet.
func (v *VHost) validateHashArgs(kind string, args Table) error {
	if kind == KindDelayed && !v.hashTypesEnabled(hashKindOf(kind, args)) {
		return errorf(KindPreconditionFailed, "Invalid argument, 'x-delayed-type' must be an existing exchange type")
	}
	if hashKindOf(kind, args) != KindConsistentHash {
		return nil
	}
	hv, hasH := args["hash-header"]
	pv, hasP := args["hash-property"]
	if hasH {
		if _, ok := hashArgString(hv); !ok {
			return errorf(KindPreconditionFailed, "Invalid argument, 'hash-header' must be a string")
		}
	}
	if hasP {
		p, ok := hashArgString(pv)
		if !ok {
			return errorf(KindPreconditionFailed, "Invalid argument, 'hash-property' must be a string")
		}
		if hasH {
			return errorf(KindPreconditionFailed, "hash-header and hash-property are mutually exclusive")
		}
		if !slices.Contains(hashProperties, p) {
			return errorf(KindPreconditionFailed, "Unsupported property: %s", p)
		}
	}
	return nil
}

func hashArgString(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}

// validateHashBinding checks a binding's key for an exchange of kind with
// args, as the plugin's validate_binding/2.
func validateHashBinding(kind string, args Table, key string) error {
	if hashKindOf(kind, args) != KindConsistentHash {
		return nil
	}
	if _, err := parseHashWeight(key); err != nil {
		return err
	}
	return nil
}

// parseHashWeight parses a consistent-hash binding key (hashring.ParseWeight),
// its refusal a PRECONDITION_FAILED.
func parseHashWeight(key string) (uint64, error) {
	w, err := hashring.ParseWeight(key)
	if err != nil {
		return 0, errorf(KindPreconditionFailed, "%s", err.Error())
	}
	return w, nil
}

// newHashRouter is the router of a hash exchange; nil for another kind.
func newHashRouter(kind string, args Table) router {
	switch kind {
	case KindConsistentHash:
		r := &chashRouter{hashRing: hashring.New[bindKey, *binding]()}
		if h, ok := hashArgString(args["hash-header"]); ok {
			r.on, r.field = hashOnHeader, h
		} else if p, ok := hashArgString(args["hash-property"]); ok {
			r.on, r.field = hashOnProperty, p
		}
		return r
	case KindModulusHash:
		return &modRouter{hashRing: hashring.New[bindKey, *binding]()}
	}
	return nil
}

// hashRing is a hash exchange's destinations, each a queue or an
// exchange (its bindings' bindKey with the key field empty) standing for
// one of its bindings.
type hashRing = hashring.Ring[bindKey, *binding]

func destOf(b *binding) bindKey { return bindKey{q: b.q, x: b.x} }

// takeDest returns b's destination in r, creating it if new.
func takeDest(r *hashRing, b *binding) (*hashring.Dest[bindKey, *binding], bool) {
	return r.Take(destOf(b), func() hashring.Dest[bindKey, *binding] {
		return hashring.NewDest(destOf(b), b, b.q != nil, b.destName())
	})
}

// releaseDest drops b from its destination in r (hashRing.Release); a
// destination that stays and was standing for b stands for another of
// its bindings: any one will do, route only reads the destination.
func releaseDest(r *hashRing, b *binding) (*hashring.Dest[bindKey, *binding], bool) {
	d, ok := r.Release(destOf(b))
	if ok && d != nil && d.Val == b {
		for _, o := range b.src.bindings {
			if o != b && destOf(o) == destOf(b) {
				d.Val = o
				break
			}
		}
	}
	return d, ok
}

// --- x-consistent-hash ---

type chashRouter struct {
	hashRing
	on    int
	field string // the header or property hashed
}

func (r *chashRouter) add(b *binding) {
	d, _ := takeDest(&r.hashRing, b)
	d.N++
	d.Weight += hashring.Weight(b.key)
	r.Reweigh()
}

func (r *chashRouter) remove(b *binding) {
	if d, ok := releaseDest(&r.hashRing, b); ok && d != nil {
		d.Weight -= hashring.Weight(b.key)
	}
	r.Reweigh()
}

func (r *chashRouter) clone() router {
	return &chashRouter{hashRing: r.Clone(), on: r.on, field: r.field}
}

// route is the router interface's (without the message's properties);
// routing calls routeMessage (messageRouter).
func (r *chashRouter) route(key string, h Table, out []*binding) []*binding {
	return r.routeHash(r.keyHash(key, h, nil), out)
}

func (r *chashRouter) routeMessage(m *Message, out []*binding) []*binding {
	return r.routeHash(r.keyHash(m.RoutingKey, m.Props.Headers, &m.Props), out)
}

func (r *chashRouter) routeHash(kh uint64, out []*binding) []*binding {
	if d := r.Pick(kh); d != nil {
		out = append(out, d.Val)
	}
	return out
}

// keyHash hashes what the exchange routes by; p nil is no properties.
func (r *chashRouter) keyHash(key string, h Table, p *Properties) uint64 {
	switch r.on {
	case hashOnHeader:
		v, ok := h[r.field]
		if !ok {
			return hashring.Absent
		}
		return hashValue(v)
	case hashOnProperty:
		if p == nil {
			return hashring.Absent
		}
		switch r.field {
		case "message_id":
			return hashOptString(p.MessageID)
		case "correlation_id":
			return hashOptString(p.CorrelationID)
		case "timestamp":
			if p.Timestamp.IsZero() {
				return hashring.Absent
			}
			return hashring.Int(p.Timestamp.Unix())
		}
		return hashring.Absent
	}
	return hashring.Key(key)
}

// --- x-modulus-hash ---

// modRouter keeps its destinations sorted: exchanges, then queues, each
// by name.
type modRouter struct{ hashRing }

func (r *modRouter) add(b *binding) {
	d, created := takeDest(&r.hashRing, b)
	d.N++
	if created {
		r.SortByName()
	}
}

func (r *modRouter) remove(b *binding) {
	if d, ok := releaseDest(&r.hashRing, b); ok && d == nil {
		r.SortByName()
	}
}

func (r *modRouter) clone() router {
	return &modRouter{r.Clone()}
}

func (r *modRouter) route(key string, _ Table, out []*binding) []*binding {
	if d := r.Modulus(hashring.Key(key)); d != nil {
		out = append(out, d.Val)
	}
	return out
}

// --- hashing ---

func hashOptString(s string) uint64 {
	if s == "" {
		return hashring.Absent
	}
	return hashring.Key(s)
}

// hashValue hashes a header's value: text by its bytes, an integer by its
// decimal digits (so 42 and "42", as MQTT and STOMP send it, agree),
// anything else by its printed form.
func hashValue(v any) uint64 {
	switch s := v.(type) {
	case string:
		return hashring.Key(s)
	case []byte:
		return hashring.KeyBytes(s)
	case nil:
		return hashring.Absent
	case time.Time:
		return hashring.Int(s.Unix())
	}
	if n, ok := asInt64(v); ok {
		return hashring.Int(n)
	}
	return hashring.Key(fmt.Sprint(v))
}

// messageRouter is a router that reads more of a message than its routing
// key and headers (a consistent-hash exchange's hash-property).
type messageRouter interface {
	routeMessage(m *Message, out []*binding) []*binding
}

// hashExchangesFlag is the cluster feature flag of the hash exchange
// types (cluster/featureflags.HashExchanges).
const hashExchangesFlag = "hash_exchanges"

// featureGate is a Cluster that knows the cluster's feature flags.
type featureGate interface {
	FeatureEnabled(name string) bool
}

// hashTypesEnabled reports whether an exchange of kind may be declared: a
// hash type only once every node of the cluster has it (until then it is
// an unknown type, as in RabbitMQ without the plugin).
func (v *VHost) hashTypesEnabled(kind string) bool {
	if kind != KindConsistentHash && kind != KindModulusHash {
		return true
	}
	g, ok := v.b.cluster.(featureGate)
	return !ok || g.FeatureEnabled(hashExchangesFlag)
}
