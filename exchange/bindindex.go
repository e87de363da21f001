package exchange

import (
	"hash/maphash"
	"strings"
	"unsafe"
)

// Bindings at scale. An exchange can have hundreds of thousands of
// bindings (one per MQTT subscription on amq.topic, one per device queue
// on a fan-out): binding, unbinding and applying a binding record must
// not cost a scan of them all. So an exchange indexes its bindings by
// (destination, routing key) for the duplicate check, and every list a
// binding is in (its source's bindings, its destination's, its router's)
// knows the binding's position in it, so removing it is a swap with the
// last one. Lists are unordered: nothing routes or lists by their order.

// The index is keyed by a 64-bit hash of (destination, routing key), not
// by the triple itself: a slot of 16 bytes, not 40 (a map's slots are
// most of its memory, and amq.topic's index holds one key for every MQTT
// subscription). Bindings whose hashes are equal (the same key with other
// arguments, rare, or a collision, rarer) are chained through sameNext,
// and every lookup compares the binding's own fields.

// bindKey is a binding's destination and key (a hash ring's destination
// leaves key empty: hashx.go).
type bindKey struct {
	q   *Queue
	x   *Exchange
	key string
}

// bindSeed seeds the index's hash: a per-process seed, so that routing
// keys chosen to collide cannot be prepared in advance.
var bindSeed = maphash.MakeSeed()

// bindHash is the index's key for a binding to (q, dx) with key (a
// variable: a test makes every key collide).
var bindHash = seededBindHash

func seededBindHash(q *Queue, dx *Exchange, key string) uint64 {
	h := maphash.String(bindSeed, key)
	h = mix64(h ^ uint64(uintptr(unsafe.Pointer(q))))
	return mix64(h ^ uint64(uintptr(unsafe.Pointer(dx))))
}

// mix64 is splitmix64's finaliser: every input bit moves every output bit.
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// findBinding returns x's binding to (q, dx) with key and args, or nil.
func (x *Exchange) findBinding(q *Queue, dx *Exchange, key string, args Table) *binding {
	for b := x.bindIdx[bindHash(q, dx, key)]; b != nil; b = b.sameNext {
		if b.q == q && b.x == dx && b.key == key && tablesEqual(b.args, args) {
			return b
		}
	}
	return nil
}

// indexBinding puts b first in its hash's chain. The index holds one
// binding a hash and chains the others through sameNext: a slice a key
// was 8 bytes of its own and 16 more in the map's slot, for every MQTT
// subscription.
func (x *Exchange) indexBinding(b *binding) {
	if x.bindIdx == nil {
		x.bindIdx = map[uint64]*binding{}
	}
	k := bindHash(b.q, b.x, b.key)
	b.sameNext = x.bindIdx[k]
	x.bindIdx[k] = b
}

func (x *Exchange) unindexBinding(b *binding) {
	k := bindHash(b.q, b.x, b.key)
	first := x.bindIdx[k]
	switch {
	case first == b && b.sameNext == nil:
		delete(x.bindIdx, k)
		x.bindIdx = shrinkMap(x.bindIdx, &x.bindPeak)
	case first == b:
		x.bindIdx[k] = b.sameNext
	default:
		for o := first; o != nil; o = o.sameNext {
			if o.sameNext == b {
				o.sameNext = b.sameNext
				break
			}
		}
	}
	b.sameNext = nil
}

// listAdd appends b to *l, recording its position in *pos.
func listAdd(l *[]*binding, b *binding, pos func(*binding) *int32) {
	*pos(b) = int32(len(*l))
	*l = append(*l, b)
}

// listRemove removes b from *l by swapping the last binding into its
// place; pos gives a binding's position field for this list.
func listRemove(l *[]*binding, b *binding, pos func(*binding) *int32) {
	s := *l
	i := int(*pos(b))
	if i < 0 || i >= len(s) || s[i] != b {
		return // not in this list
	}
	last := s[len(s)-1]
	s[i] = last
	*pos(last) = int32(i)
	s[len(s)-1] = nil
	*l = shrinkSlice(s[:len(s)-1])
	*pos(b) = -1
}

func srcPos(b *binding) *int32 { return &b.srcPos }
func dstPos(b *binding) *int32 { return &b.dstPos }
func rPos(b *binding) *int32   { return &b.rPos }

// bindingByRecordKey finds the binding whose record key is key: through
// the index, for the key's source, destination and routing key; by a scan
// of the vhost's bindings only if the key does not parse (a name with a
// NUL in it).
func (v *VHost) bindingByRecordKey(key string) *binding {
	base := strings.TrimPrefix(key, "t")
	if rest, ok := strings.CutPrefix(base, "binding/"+v.name+"\x00"); ok {
		if parts := strings.Split(rest, "\x00"); len(parts) == 4 && len(parts[1]) > 0 {
			sx := v.exchanges[parts[0]]
			var q *Queue
			var dx *Exchange
			switch dn := parts[1][1:]; parts[1][0] {
			case 'q':
				q = v.queues[dn]
			case 'e':
				dx = v.exchanges[dn]
			}
			if sx != nil && (q != nil || dx != nil) {
				for b := sx.bindIdx[bindHash(q, dx, parts[2])]; b != nil; b = b.sameNext {
					if v.recordKeyOf(b) == key {
						return b
					}
				}
			}
			return nil
		}
	}
	for _, x := range v.exchanges {
		for _, b := range x.bindings {
			if v.recordKeyOf(b) == key {
				return b
			}
		}
	}
	return nil
}
