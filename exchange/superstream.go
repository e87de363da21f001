package exchange

import (
	"math"
	"sort"
	"strconv"
)

// Super streams (RabbitMQ 3.11's partitioned streams). A super stream is
// nothing but topology: a direct exchange with the argument
// x-super-stream true, bound to its partitions, streams named
// <name>-0 … <name>-(N-1) by default, each with a binding key (the
// partition's index as a string by default, or the routing keys given)
// and the binding argument x-stream-partition-order (the partition's
// index). So it is declared over any path that declares exchanges,
// queues and bindings (the HTTP API, AMQP, the stream protocol's
// CreateSuperStream, DeclareSuperStream below), and recognised by its
// exchange's argument alone; the lookups here read the exchange's
// bindings each time, so they follow every bind and unbind.
//
// Partitions lists a super stream's streams in partition order (by
// x-stream-partition-order, bindings without one after those with, then
// by name); Route lists the streams bound with a routing key, in the
// same order; PartitionOf gives a stream's super stream and index, which
// the stream protocol passes as ConsumeOpts.PartitionIndex so that a
// single-active group whose members consume every partition spreads the
// partitions over them (streamsac.go).

// Arguments of a super stream's exchange and bindings (RabbitMQ's names).
const (
	ArgSuperStream    = "x-super-stream"
	ArgPartitionOrder = "x-stream-partition-order"
)

// IsSuperStream reports whether x is a super stream's exchange.
func (x *Exchange) IsSuperStream() bool { return truthy(x.args[ArgSuperStream]) }

func truthy(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// partitionOrder is a binding's x-stream-partition-order, ok false when
// absent or not a whole number.
func partitionOrder(args Table) (int64, bool) {
	switch v := args[ArgPartitionOrder].(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v), true
		}
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

type partition struct {
	stream, key string
	order       int64
	ordered     bool
}

// partitionsLocked is x's stream bindings in partition order, one per
// stream (its first binding in that order). Under v.mu.
func partitionsLocked(x *Exchange) []partition {
	var ps []partition
	for _, b := range x.bindings {
		if b.q == nil || !b.q.IsStream() {
			continue
		}
		o, ok := partitionOrder(b.args)
		ps = append(ps, partition{stream: b.q.name, key: b.key, order: o, ordered: ok})
	}
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.ordered != b.ordered {
			return a.ordered
		}
		if a.order != b.order {
			return a.order < b.order
		}
		return a.stream < b.stream
	})
	seen := make(map[string]bool, len(ps))
	out := ps[:0]
	for _, p := range ps {
		if !seen[p.stream] {
			seen[p.stream] = true
			out = append(out, p)
		}
	}
	return out
}

// superLocked is the super stream's exchange named super. Under v.mu.
func (v *VHost) superLocked(super string) (*Exchange, bool) {
	x := v.exchanges[super]
	if x == nil || !x.IsSuperStream() {
		return nil, false
	}
	return x, true
}

// Partitions lists the super stream's partitions in order; ok false if
// super is not a super stream.
func (v *VHost) Partitions(super string) (streams []string, ok bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	x, ok := v.superLocked(super)
	if !ok {
		return nil, false
	}
	for _, p := range partitionsLocked(x) {
		streams = append(streams, p.stream)
	}
	return streams, true
}

// Route lists the partitions of the super stream bound with routingKey
// (a direct exchange's match), in partition order; ok false if super is
// not a super stream.
func (v *VHost) Route(super, routingKey string) (streams []string, ok bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	x, ok := v.superLocked(super)
	if !ok {
		return nil, false
	}
	seen := map[string]bool{}
	var all []partition
	for _, b := range x.bindings {
		if b.q != nil && b.q.IsStream() && b.key == routingKey && !seen[b.q.name] {
			seen[b.q.name] = true
		}
	}
	for _, p := range partitionsLocked(x) {
		if seen[p.stream] {
			all = append(all, p)
		}
	}
	// A stream bound twice is listed once, under its first binding's
	// order, even if that binding has another key.
	for _, p := range all {
		streams = append(streams, p.stream)
	}
	return streams, true
}

// PartitionOf reports the super stream that stream is a partition of and
// its index among the partitions; ok false if it is none's (the first
// super stream by name if it is bound to several).
func (v *VHost) PartitionOf(stream string) (super string, index int, ok bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	q := v.queues[stream]
	if q == nil || !q.IsStream() {
		return "", 0, false
	}
	for _, b := range q.bindings {
		x := b.src
		if !x.IsSuperStream() || (ok && x.name >= super) {
			continue
		}
		for i, p := range partitionsLocked(x) {
			if p.stream == stream {
				super, index, ok = x.name, i, true
				break
			}
		}
	}
	return super, index, ok
}

// SuperStreamPartitions lists the partitions of x, a super stream's
// exchange, in order (nil for any other exchange).
func (x *Exchange) SuperStreamPartitions() []string {
	if !x.IsSuperStream() {
		return nil
	}
	ps, _ := x.vh.Partitions(x.name)
	return ps
}
