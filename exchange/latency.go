package exchange

import (
	"github.com/trident-broker/trident/exchange/histogram"
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

// NativeSchema is the native histograms' schema (histogram.NativeSchema).
const NativeSchema = histogram.NativeSchema

// NativeZeroThreshold is the upper bound of the native histograms' zero
// bucket, in seconds (histogram.NativeZeroThreshold).
var NativeZeroThreshold = histogram.NativeZeroThreshold

// ClassicBounds are the classic buckets' upper bounds in seconds
// (histogram.ClassicBounds).
var ClassicBounds = histogram.ClassicBounds

// HistogramSnapshot is a histogram's counts at one moment.
type HistogramSnapshot = histogram.Snapshot

// latencySet is one vhost's histograms for one protocol.
type latencySet [numLatencies]histogram.Histogram

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
	s[k].Observe(ns)
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
			fn(Protocol(p), Latency(k), s[k].Snapshot())
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
