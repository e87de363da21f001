package exchange

import (
	"math"
	"sync/atomic"
)

// Protocol is the front end a publisher or consumer speaks, the label of
// the latency histograms (PublishOpts.Protocol, ConsumeOpts.Protocol).
type Protocol uint8

// The protocols; ProtoOther is the zero value (the broker's own
// publishes, shovels, the HTTP API).
const (
	ProtoOther Protocol = iota
	ProtoAMQP
	ProtoMQTT
	ProtoSTOMP
	ProtoStream
	numProtocols
)

var protocolNames = [numProtocols]string{"other", "amqp091", "mqtt", "stomp", "stream"}

// String is the protocol's label value.
func (p Protocol) String() string {
	if p >= numProtocols {
		return "other"
	}
	return protocolNames[p]
}

// index is p as an array index: an unknown protocol is ProtoOther.
func (p Protocol) index() Protocol {
	if p >= numProtocols {
		return ProtoOther
	}
	return p
}

// Protocols lists every protocol, for whoever exports the histograms.
func Protocols() []Protocol {
	return []Protocol{ProtoOther, ProtoAMQP, ProtoMQTT, ProtoSTOMP, ProtoStream}
}

// Latency names one of a vhost's latency histograms.
type Latency uint8

// The latencies measured, each per vhost and protocol.
const (
	// LatPublishConfirm is from the core accepting a publish that asked
	// for a confirm (PublishOpts.Confirmer) to its outcome being known
	// (the Confirmer called, or Publish returning a final outcome).
	LatPublishConfirm Latency = iota
	// LatEnqueueDeliver is how long a message waited in a queue until
	// its first delivery (to a consumer or by get).
	LatEnqueueDeliver
	// LatDeliverAck is from a delivery that needs an acknowledgement to
	// its ack.
	LatDeliverAck
	numLatencies
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

// histogram is a latency histogram that observes without a lock and
// without allocating: one atomic add for a message delivered as it arrives
// (the zero bucket), two for any other duration (its slot and the sum).
//
// The slots are the native buckets cut where a classic bound falls inside
// one, so that one slot belongs to exactly one native and one classic
// bucket: snapshot adds them up both ways.
type histogram struct {
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
// classic bucket too (snapshot adds it there; TestHistogramLayout).
var zeroNs = int64(math.Floor(NativeZeroThreshold * 1e9))

// observe records a duration in nanoseconds (negative ones count as 0).
func (h *histogram) observe(ns int64) {
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

// HistogramSnapshot is a histogram's counts at one moment.
type HistogramSnapshot struct {
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

func (h *histogram) snapshot() HistogramSnapshot {
	var s HistogramSnapshot
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

// latencySet is one vhost's histograms for one protocol.
type latencySet [numLatencies]histogram

// observe records a latency of ns nanoseconds for protocol p; the
// protocol's histograms are made on first use.
func (v *VHost) observe(p Protocol, k Latency, ns int64) {
	p = p.index()
	s := v.lat[p].Load()
	if s == nil {
		s = new(latencySet)
		if !v.lat[p].CompareAndSwap(nil, s) {
			s = v.lat[p].Load()
		}
	}
	s[k].observe(ns)
}

// Latencies calls fn for each of the vhost's histograms that observed
// anything, by protocol and latency.
func (v *VHost) Latencies(fn func(p Protocol, k Latency, h HistogramSnapshot)) {
	for p := range v.lat {
		s := v.lat[p].Load()
		if s == nil {
			continue
		}
		for k := range s {
			fn(Protocol(p), Latency(k), s[k].snapshot())
		}
	}
}

// StoreRound is the store's notifier telling the broker that a round of
// done callbacks begins (true) or ended (false) (store.Badger.OnRounds,
// wired by the node): the confirms of one round take its start as their
// end time, one clock reading per round instead of one per confirm. A
// confirm that completes elsewhere (a remote or a quorum queue's) while a
// round runs takes it too when its publish began before the round: it is
// off by at most the round's length, a few hundred microseconds for
// thousands of confirms; one whose publish began later reads the clock.
func (b *Broker) StoreRound(begin bool) {
	if begin {
		b.roundNow.Store(nowNano())
	} else {
		b.roundNow.Store(0)
	}
}

// confirmClock is now for the latency of a confirm whose publish began at
// start: the running store round's start, or the clock (no round, or one
// that began before the publish).
func (b *Broker) confirmClock(start int64) int64 {
	if t := b.roundNow.Load(); t != 0 && t >= start {
		return t
	}
	return nowNano()
}

// observeWait records, for a message's first delivery, how long it
// waited in q (its enqueue time is the message's, m.ts: 8 bytes every
// message already has for x-message-ttl).
func (q *Queue) observeWait(p Protocol, e *entry, now int64) {
	if e.deliveries == 1 && e.msg.ts != 0 {
		q.vh.observe(p, LatEnqueueDeliver, now-e.msg.ts)
	}
}

// observeAck records a settled delivery's deliver-to-ack latency.
func (q *Queue) observeAck(u *unackedEntry, now int64) {
	if u.at == 0 {
		return
	}
	p := ProtoAMQP // basic.get
	if u.c != nil {
		p = u.c.proto
	}
	q.vh.observe(p, LatDeliverAck, now-u.at)
}
