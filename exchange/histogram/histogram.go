// Package histogram is the latency histogram of the core: a fixed layout
// of Prometheus native buckets (schema 2) cut at the classic buckets'
// bounds, so that one set of counters answers both exports.
//
// Guarantees: Observe takes no lock and allocates nothing (one atomic add
// for a zero duration, two for any other); Snapshot may run while
// observations go on and returns counts consistent with their total. The
// package imports only the standard library; the core (exchange) keeps a
// set of histograms per vhost, protocol and latency.
package histogram

import (
	"math"
	"sync/atomic"
)

// The histograms' layout. Native buckets follow Prometheus's native
// histogram schema 2 (each bucket 2^(1/4) ≈ 1.19 times the one below),
// from 2^-17 s (7.6 µs, anything below is in the zero bucket) up to
// 2^16 s (18 h, anything above counts in the last bucket). The classic
// buckets are ClassicBounds.
const (
	// NativeSchema is the native histograms' schema.
	NativeSchema = 2
	nativeMinKey = -17 * 4
	nativeMaxKey = 16 * 4
	nNative      = nativeMaxKey - nativeMinKey + 1
)

// NativeZeroThreshold is the upper bound of the native histograms' zero
// bucket, in seconds: the lower bound of the first bucket.
var NativeZeroThreshold = math.Ldexp(1, -17)

// ClassicBounds are the classic buckets' upper bounds in seconds.
var ClassicBounds = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

var classicNs = func() []int64 {
	ns := make([]int64, len(ClassicBounds))
	for i, b := range ClassicBounds {
		ns[i] = int64(math.Round(b * 1e9))
	}
	return ns
}()

// schema 2's bucket boundaries within one power of two, as fractions
// (math.Frexp's mantissa): 2^(-k/4) for k = 4, 3, 2, 1.
var nativeFracs = [4]float64{0.5, math.Exp2(-0.75), math.Exp2(-0.5), math.Exp2(-0.25)}

// Histogram is a latency histogram that observes without a lock and
// without allocating: one atomic add for a message delivered as it arrives
// (the zero bucket), two for any other duration (its slot and the sum).
//
// The slots are the native buckets cut where a classic bound falls inside
// one, so that one slot belongs to exactly one native and one classic
// bucket: Snapshot adds them up both ways.
type Histogram struct {
	// No count: it is the sum of the slots and the zero bucket.
	sumNs atomic.Uint64
	zero  atomic.Uint64
	slots [nSlots]atomic.Uint64
}

// nClassic is len(ClassicBounds)+1, the classic buckets with +Inf
// (TestHistogramLayout).
const nClassic = 19

// nSlots is the number of slots: each native bucket has one, plus one
// more for each classic bound inside it (TestHistogramLayout).
const nSlots = nNative + nClassic - 1

// zeroNs is the native zero bucket's bound in nanoseconds: the largest
// duration whose seconds are at most NativeZeroThreshold. It is below the
// first classic bound, so the zero bucket's count belongs to the first
// classic bucket too (Snapshot adds it there; TestHistogramLayout).
var zeroNs = int64(math.Floor(NativeZeroThreshold * 1e9))

// Observe records a duration in nanoseconds (negative ones count as 0).
func (h *Histogram) Observe(ns int64) {
	if ns <= zeroNs {
		if ns > 0 {
			h.sumNs.Add(uint64(ns))
		}
		h.zero.Add(1)
		return
	}
	h.sumNs.Add(uint64(ns))
	h.slots[slotOf(ns)].Add(1)
}

// slotOf is the slot of a duration above zeroNs.
func slotOf(ns int64) int {
	// The native key, from the float's bits (as math.Frexp would give
	// them, without its call): the value is frac·2^exp with frac in
	// [0.5, 1), and k counts the quarter-powers of two below it.
	bits := math.Float64bits(float64(ns) * 1e-9)
	exp := int(bits>>52&0x7ff) - 1022
	mant := bits & (1<<52 - 1)
	k := 0
	for k < 4 && nativeMant[k] < mant {
		k++
	}
	key := (exp-1)*4 + k
	key = min(max(key, nativeMinKey+1), nativeMaxKey)
	n := key - nativeMinKey
	// The classic bucket: from the first one the native bucket's lower
	// bound may fall in (at most one classic bound lies inside a native
	// bucket, so this loop runs at most once or twice).
	i := int(classicFrom[n])
	for i < len(classicNs) && ns > classicNs[i] {
		i++
	}
	return int(slotBase[n]) + min(i-int(classicFrom[n]), int(slotBase[n+1]-slotBase[n])-1)
}

// nativeMant are nativeFracs doubled (into [1, 2)) as float64 mantissa
// bits: frac > nativeFracs[k] exactly when a value's mantissa bits are
// above nativeMant[k].
var nativeMant = func() (m [4]uint64) {
	for k, f := range nativeFracs {
		m[k] = math.Float64bits(2*f) & (1<<52 - 1)
	}
	return m
}()

// classicFrom gives, for each native bucket, how many classic bounds lie
// below its lower bound (less one nanosecond, for rounding): where the
// search for a value's classic bucket starts.
var classicFrom = func() (t [nNative + 1]uint8) {
	for i := range t {
		lower := int64(math.Floor(math.Exp2(float64(i+nativeMinKey-1)/4)*1e9)) - 1
		n := 0
		for n < len(classicNs) && classicNs[n] < lower {
			n++
		}
		t[i] = uint8(n)
	}
	t[nNative] = uint8(len(classicNs))
	return t
}()

// slotBase is each native bucket's first slot: a native bucket has one
// slot per classic bucket its values may fall in (classicFrom of it up to
// that of the next bucket); slotBase[nNative] is the number of slots.
var slotBase = func() (t [nNative + 1]uint16) {
	for n := 0; n < nNative; n++ {
		span := int(classicFrom[n+1]) - int(classicFrom[n]) + 1
		t[n+1] = t[n] + uint16(span)
	}
	return t
}()

// Snapshot is a histogram's counts at one moment.
type Snapshot struct {
	Count uint64
	Sum   float64 // seconds
	// Classic are cumulative counts for ClassicBounds (one each).
	Classic []uint64
	// ZeroCount is the native zero bucket's count; Native the counts of
	// native buckets NativeOffset, NativeOffset+1, ... (schema
	// NativeSchema), trailing empty ones trimmed.
	ZeroCount    uint64
	NativeOffset int32
	Native       []uint64
}

// Snapshot reads h's counts.
func (h *Histogram) Snapshot() Snapshot {
	var s Snapshot
	s.Sum = float64(h.sumNs.Load()) * 1e-9
	s.ZeroCount = h.zero.Load()
	var classic [nClassic]uint64 // non-cumulative
	classic[0] = s.ZeroCount     // the zero bucket is in the first (zeroNs)
	first, last := -1, -1
	counts := make([]uint64, nNative)
	var total uint64
	for n := range counts {
		for j := slotBase[n]; j < slotBase[n+1]; j++ {
			c := h.slots[j].Load()
			counts[n] += c
			classic[int(classicFrom[n])+int(j-slotBase[n])] += c
		}
		if counts[n] != 0 {
			if first < 0 {
				first = n
			}
			last = n
			total += counts[n]
		}
	}
	s.Classic = make([]uint64, len(ClassicBounds))
	cum := uint64(0)
	for i := range ClassicBounds {
		cum += classic[i]
		s.Classic[i] = cum
	}
	if first >= 0 {
		s.NativeOffset = int32(first + nativeMinKey)
		s.Native = counts[first : last+1]
	}
	// Count is the total of what was read, so that it is consistent with
	// the buckets (observations go on meanwhile).
	s.Count = s.ZeroCount + total
	return s
}
