package exchange

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
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

// maxHashWeight bounds a binding's effective weight, so that weights
// summed over a destination's bindings cannot overflow; a larger weight
// is accepted (as the plugin accepts any positive integer) and counts as
// this one.
const maxHashWeight = 1 << 40

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

// parseHashWeight parses a consistent-hash binding key as Erlang's
// list_to_integer does (an optional sign, then decimal digits only).
func parseHashWeight(key string) (uint64, error) {
	digits, neg := key, false
	if digits != "" && (digits[0] == '+' || digits[0] == '-') {
		digits, neg = digits[1:], digits[0] == '-'
	}
	valid := digits != ""
	for i := 0; i < len(digits) && valid; i++ {
		valid = digits[i] >= '0' && digits[i] <= '9'
	}
	if !valid {
		return 0, errorf(KindPreconditionFailed, "The binding key must be an integer: <<%s>>", strconv.Quote(key))
	}
	if neg || strings.Trim(digits, "0") == "" {
		return 0, errorf(KindPreconditionFailed, "The binding key must be greater than 0")
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n > maxHashWeight {
		n = maxHashWeight // out of range: a very large positive weight
	}
	return n, nil
}

// hashWeight is a binding's weight in its router; 0 (never chosen) for a
// key that validateHashBinding refuses, which only a record written by
// something else could hold.
func hashWeight(key string) uint64 {
	w, err := parseHashWeight(key)
	if err != nil {
		return 0
	}
	return w
}

// newHashRouter is the router of a hash exchange; nil for another kind.
func newHashRouter(kind string, args Table) router {
	switch kind {
	case KindConsistentHash:
		r := &chashRouter{hashRing: hashRing{idx: map[bindKey]int{}}}
		if h, ok := hashArgString(args["hash-header"]); ok {
			r.on, r.field = hashOnHeader, h
		} else if p, ok := hashArgString(args["hash-property"]); ok {
			r.on, r.field = hashOnProperty, p
		}
		return r
	case KindModulusHash:
		return &modRouter{hashRing: hashRing{idx: map[bindKey]int{}}}
	}
	return nil
}

// hashDest is one destination of a hash exchange.
type hashDest struct {
	b      *binding // one of its bindings: what route returns
	seed   uint64
	weight uint64 // sum of its bindings' weights (consistent hash)
	n      int    // how many bindings it has
	isQ    bool
	name   string
}

// hashRing is a hash exchange's destinations; idx (by destination, the
// key field empty) is nil in a routing table's copy, which only routes.
type hashRing struct {
	dests []hashDest
	idx   map[bindKey]int
}

func destOf(b *binding) bindKey { return bindKey{q: b.q, x: b.x} }

func newHashDest(b *binding) hashDest {
	kind := "e"
	if b.q != nil {
		kind = "q"
	}
	name := b.destName()
	return hashDest{b: b, isQ: b.q != nil, name: name, seed: fmix64(fnvString(fnvString(fnvOffset, kind), name))}
}

// take returns b's destination, creating it (at the end) if new.
func (r *hashRing) take(b *binding) (*hashDest, bool) {
	if i, ok := r.idx[destOf(b)]; ok {
		return &r.dests[i], false
	}
	r.idx[destOf(b)] = len(r.dests)
	r.dests = append(r.dests, newHashDest(b))
	return &r.dests[len(r.dests)-1], true
}

// release drops b from its destination: it returns the destination, or
// nil if that went with b (the last one is swapped into its place); false
// if b's destination is not there.
func (r *hashRing) release(b *binding) (*hashDest, bool) {
	i, ok := r.idx[destOf(b)]
	if !ok {
		return nil, false
	}
	d := &r.dests[i]
	d.n--
	if d.n > 0 {
		if d.b == b {
			// Another binding of the same destination stands for it:
			// any one will do, route only reads the destination.
			for _, o := range b.src.bindings {
				if o != b && destOf(o) == destOf(b) {
					d.b = o
					break
				}
			}
		}
		return d, true
	}
	delete(r.idx, destOf(b))
	last := len(r.dests) - 1
	if i != last {
		r.dests[i] = r.dests[last]
		r.idx[destOf(r.dests[i].b)] = i
	}
	r.dests[last] = hashDest{}
	r.dests = r.dests[:last]
	return nil, true
}

// --- x-consistent-hash ---

type chashRouter struct {
	hashRing
	on      int
	field   string // the header or property hashed
	uniform bool   // every destination has the same weight
}

func (r *chashRouter) add(b *binding) {
	d, _ := r.take(b)
	d.n++
	d.weight += hashWeight(b.key)
	r.reweigh()
}

func (r *chashRouter) remove(b *binding) {
	if d, ok := r.release(b); ok && d != nil {
		d.weight -= hashWeight(b.key)
	}
	r.reweigh()
}

func (r *chashRouter) reweigh() {
	r.uniform = true
	for i := range r.dests {
		if r.dests[i].weight != r.dests[0].weight {
			r.uniform = false
		}
	}
}

func (r *chashRouter) clone() router {
	return &chashRouter{hashRing: hashRing{dests: slices.Clone(r.dests)}, on: r.on, field: r.field, uniform: r.uniform}
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
	if d := r.pick(kh); d != nil {
		out = append(out, d.b)
	}
	return out
}

// keyHash hashes what the exchange routes by; p nil is no properties.
func (r *chashRouter) keyHash(key string, h Table, p *Properties) uint64 {
	switch r.on {
	case hashOnHeader:
		v, ok := h[r.field]
		if !ok {
			return hashAbsent
		}
		return hashValue(v)
	case hashOnProperty:
		if p == nil {
			return hashAbsent
		}
		switch r.field {
		case "message_id":
			return hashOptString(p.MessageID)
		case "correlation_id":
			return hashOptString(p.CorrelationID)
		case "timestamp":
			if p.Timestamp.IsZero() {
				return hashAbsent
			}
			var buf [24]byte
			return fmix64(fnvBytes(fnvOffset, strconv.AppendInt(buf[:0], p.Timestamp.Unix(), 10)))
		}
		return hashAbsent
	}
	return fmix64(fnvString(fnvOffset, key))
}

// pick is the weighted rendezvous choice for a key's hash kh: the least
// -log2(u)/w, ties to the larger draw, then to the smaller seed, then to
// the smaller name (so the order of r.dests never matters).
func (r *chashRouter) pick(kh uint64) *hashDest {
	var best *hashDest
	var bh, ba uint64
	for i := range r.dests {
		d := &r.dests[i]
		if d.weight == 0 {
			continue
		}
		h := fmix64(kh ^ d.seed)
		if best == nil {
			best, bh = d, h
			if !r.uniform {
				ba = negLog2(h)
			}
			continue
		}
		var better bool
		if r.uniform {
			better = h > bh || (h == bh && destLess(d, best))
		} else {
			a := negLog2(h)
			// a/d.weight < ba/best.weight, in 128 bits.
			lh, ll := bits.Mul64(a, best.weight)
			rh, rl := bits.Mul64(ba, d.weight)
			switch {
			case lh != rh:
				better = lh < rh
			case ll != rl:
				better = ll < rl
			default:
				better = h > bh || (h == bh && destLess(d, best))
			}
			if better {
				ba = a
			}
		}
		if better {
			best, bh = d, h
		}
	}
	return best
}

func destLess(a, b *hashDest) bool {
	if a.seed != b.seed {
		return a.seed < b.seed
	}
	if a.isQ != b.isQ {
		return !a.isQ
	}
	return a.name < b.name
}

// --- x-modulus-hash ---

// modRouter keeps its destinations sorted: exchanges, then queues, each
// by name.
type modRouter struct{ hashRing }

func (r *modRouter) add(b *binding) {
	d, created := r.take(b)
	d.n++
	if created {
		r.sort()
	}
}

func (r *modRouter) remove(b *binding) {
	if d, ok := r.release(b); ok && d == nil {
		r.sort()
	}
}

func (r *modRouter) sort() {
	slices.SortFunc(r.dests, func(a, b hashDest) int {
		if a.isQ != b.isQ {
			if a.isQ {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.name, b.name)
	})
	for i := range r.dests {
		r.idx[destOf(r.dests[i].b)] = i
	}
}

func (r *modRouter) clone() router {
	return &modRouter{hashRing{dests: slices.Clone(r.dests)}}
}

func (r *modRouter) route(key string, _ Table, out []*binding) []*binding {
	if n := uint64(len(r.dests)); n > 0 {
		out = append(out, r.dests[fmix64(fnvString(fnvOffset, key))%n].b)
	}
	return out
}

// --- hashing ---

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashAbsent is the hash of a header or property a message lacks.
var hashAbsent = fmix64(fnvString(fnvOffset, "\x00absent"))

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvBytes(h uint64, s []byte) uint64 {
	for _, c := range s {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// fmix64 is murmur3's 64-bit finalizer: a bijection with full avalanche.
func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func hashOptString(s string) uint64 {
	if s == "" {
		return hashAbsent
	}
	return fmix64(fnvString(fnvOffset, s))
}

// hashValue hashes a header's value: text by its bytes, an integer by its
// decimal digits (so 42 and "42", as MQTT and STOMP send it, agree),
// anything else by its printed form.
func hashValue(v any) uint64 {
	switch s := v.(type) {
	case string:
		return fmix64(fnvString(fnvOffset, s))
	case []byte:
		return fmix64(fnvBytes(fnvOffset, s))
	case nil:
		return hashAbsent
	case time.Time:
		var buf [24]byte
		return fmix64(fnvBytes(fnvOffset, strconv.AppendInt(buf[:0], s.Unix(), 10)))
	}
	if n, ok := asInt64(v); ok {
		var buf [24]byte
		return fmix64(fnvBytes(fnvOffset, strconv.AppendInt(buf[:0], n, 10)))
	}
	return fmix64(fnvString(fnvOffset, fmt.Sprint(v)))
}

// negLog2 is -log2(u) for u = (h|1)/2^64 in (0,1), in fixed point with 32
// fractional bits (at most 64<<32): an exponential variable, up to scale.
func negLog2(h uint64) uint64 {
	return 64<<32 - log2Fixed(h|1)
}

// log2Fixed is log2(x) for x ≥ 1 with 32 fractional bits: the exponent,
// plus log2 of the mantissa from log2Table, interpolated linearly
// (error below 2e-7). Monotone in x.
func log2Fixed(x uint64) uint64 {
	e := uint64(63 - bits.LeadingZeros64(x))
	f := x << (64 - e) // the mantissa's fraction bits (the leading 1 dropped; 0 for x = 1)
	i := f >> (64 - log2TableBits)
	rem := (f >> (64 - log2TableBits - 32)) & (1<<32 - 1)
	lo, hi := log2Table[i], log2Table[i+1]
	return e<<32 + lo + ((hi-lo)*rem)>>32
}

const log2TableBits = 10

// log2Table[i] is log2(1 + i/1024) with 32 fractional bits, computed by
// integer arithmetic alone (log2Frac) so that it is the same on every CPU.
var log2Table = func() (t [1<<log2TableBits + 1]uint64) {
	for i := range t {
		t[i] = log2Frac(uint64(1<<log2TableBits + i))
	}
	return t
}()

// log2Frac returns log2(m/1024) for m in [1024, 2048], 32 fractional bits,
// rounded: by repeated squaring in fixed point with 62 fractional bits.
func log2Frac(m uint64) uint64 {
	if m == 2<<log2TableBits {
		return 1 << 32
	}
	const one = uint64(1) << 62
	y := m << (62 - log2TableBits) // in [1, 2)
	var r uint64
	for k := 0; k < 34; k++ {
		hi, lo := bits.Mul64(y, y)
		y = hi<<2 | lo>>62 // y² with 62 fractional bits, in [1, 4)
		r <<= 1
		if y >= 2*one {
			r |= 1
			y >>= 1
		}
	}
	return (r + 2) >> 2 // 34 bits to 32, rounded
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
