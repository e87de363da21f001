package hashring

import (
	"cmp"
	"math/bits"
	"slices"
)

// Dest is one destination of a hash exchange: K identifies it (the
// core's queue or exchange), Val is what a route returns for it (one of
// its bindings).
type Dest[K comparable, T any] struct {
	Key    K
	Val    T
	Seed   uint64
	Weight uint64 // sum of its bindings' weights (consistent hash)
	N      int    // how many bindings it has
	IsQ    bool
	Name   string
}

// NewDest is the destination of kind queue (isQ) or exchange named name.
func NewDest[K comparable, T any](k K, v T, isQ bool, name string) Dest[K, T] {
	kind := "e"
	if isQ {
		kind = "q"
	}
	return Dest[K, T]{Key: k, Val: v, IsQ: isQ, Name: name, Seed: Seed(kind, name)}
}

// Ring is a hash exchange's destinations. A Ring made by New is changed
// by Take and Release (under the owner's topology lock); a Clone only
// routes (Pick, Modulus), which reads it and never writes, so a routing
// table's copy is read by many publishers at once without a lock.
type Ring[K comparable, T any] struct {
	Dests   []Dest[K, T]
	idx     map[K]int // nil in a Clone
	uniform bool      // every destination has the same weight (Reweigh)
}

// New returns an empty ring that Take and Release change.
func New[K comparable, T any]() Ring[K, T] {
	return Ring[K, T]{idx: map[K]int{}}
}

// Take returns k's destination, creating it (at the end) as d if new.
func (r *Ring[K, T]) Take(k K, d func() Dest[K, T]) (*Dest[K, T], bool) {
	if i, ok := r.idx[k]; ok {
		return &r.Dests[i], false
	}
	r.idx[k] = len(r.Dests)
	r.Dests = append(r.Dests, d())
	return &r.Dests[len(r.Dests)-1], true
}

// Release drops one binding from k's destination: it returns the
// destination, or nil if that was its last binding (the last destination
// is swapped into its place); false if k has no destination.
func (r *Ring[K, T]) Release(k K) (*Dest[K, T], bool) {
	i, ok := r.idx[k]
	if !ok {
		return nil, false
	}
	d := &r.Dests[i]
	d.N--
	if d.N > 0 {
		return d, true
	}
	delete(r.idx, k)
	last := len(r.Dests) - 1
	if i != last {
		r.Dests[i] = r.Dests[last]
		r.idx[r.Dests[i].Key] = i
	}
	r.Dests[last] = Dest[K, T]{}
	r.Dests = r.Dests[:last]
	return nil, true
}

// Clone is a copy that only routes.
func (r *Ring[K, T]) Clone() Ring[K, T] {
	return Ring[K, T]{Dests: slices.Clone(r.Dests), uniform: r.uniform}
}

// --- x-consistent-hash: weighted rendezvous hashing ---

// Reweigh notes the destinations' weights after a change (Pick skips the
// logarithm when they are all equal).
func (r *Ring[K, T]) Reweigh() {
	r.uniform = true
	for i := range r.Dests {
		if r.Dests[i].Weight != r.Dests[0].Weight {
			r.uniform = false
		}
	}
}

// Pick is the weighted rendezvous choice for a key's hash kh: the least
// -log2(u)/w, ties to the larger draw, then to the smaller seed, then to
// the smaller name (so the order of r.Dests never matters); nil if no
// destination has a weight.
func (r *Ring[K, T]) Pick(kh uint64) *Dest[K, T] {
	var best *Dest[K, T]
	var bh, ba uint64
	for i := range r.Dests {
		d := &r.Dests[i]
		if d.Weight == 0 {
			continue
		}
		h := Mix(kh ^ d.Seed)
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
			// a/d.Weight < ba/best.Weight, in 128 bits.
			lh, ll := bits.Mul64(a, best.Weight)
			rh, rl := bits.Mul64(ba, d.Weight)
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

func destLess[K comparable, T any](a, b *Dest[K, T]) bool {
	if a.Seed != b.Seed {
		return a.Seed < b.Seed
	}
	if a.IsQ != b.IsQ {
		return !a.IsQ
	}
	return a.Name < b.Name
}

// --- x-modulus-hash ---

// SortByName puts the destinations in name order, exchanges before
// queues (as RabbitMQ sorts its resources): Modulus's order.
func (r *Ring[K, T]) SortByName() {
	slices.SortFunc(r.Dests, func(a, b Dest[K, T]) int {
		if a.IsQ != b.IsQ {
			if a.IsQ {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	for i := range r.Dests {
		r.idx[r.Dests[i].Key] = i
	}
}

// Modulus is the destination of key hash kh: kh modulo the number of
// destinations, in SortByName's order; nil if there is none.
func (r *Ring[K, T]) Modulus(kh uint64) *Dest[K, T] {
	n := uint64(len(r.Dests))
	if n == 0 {
		return nil
	}
	return &r.Dests[kh%n]
}
