package exchange

import (
	"slices"
	"time"
)

// A stream as the management API and the queue's operations see it.

// --- the management view ---

// StreamInfo describes a stream for the management API.
type StreamInfo struct {
	Messages       int64
	Bytes          int64
	Segments       int
	FirstOffset    uint64
	LastOffset     int64 // -1 while empty
	FirstTimestamp time.Time
	LastTimestamp  time.Time
	MaxAge         string // as declared, "" none
	MaxBytes       int64  // 0 none
	SegmentBytes   int64
	Consumers      []StreamConsumerInfo // named consumers, by name
}

// StreamConsumerInfo is a named consumer's stored position.
type StreamConsumerInfo struct {
	Name   string
	Offset uint64 // the last offset it acked
	Lag    int64  // messages after it
	Active bool   // a consumer of that name is attached
}

// StreamInfo returns the stream's view, ok false if q is not a stream.
func (q *Queue) StreamInfo() (StreamInfo, bool) {
	st := q.st
	if st == nil {
		return StreamInfo{}, false
	}
	var si StreamInfo
	var fts, lts int64
	si.Messages, si.Bytes, si.Segments, fts, lts = st.log.Stats()
	if fts != 0 {
		si.FirstTimestamp = time.Unix(0, fts)
		si.LastTimestamp = time.Unix(0, lts)
	}
	si.FirstOffset, _ = st.log.Bounds()
	si.LastOffset = -1
	if off, ok := st.log.LastOffset(); ok {
		si.LastOffset = int64(off)
	}
	si.MaxAge, _ = q.args["x-max-age"].(string)
	si.MaxBytes, si.SegmentBytes = st.a.maxBytes, st.a.segBytes
	st.mu.Lock()
	active := map[string]bool{}
	for _, c := range st.cursors {
		if c.name != "" {
			active[c.name] = true
		}
	}
	for n, no := range st.offsets {
		si.Consumers = append(si.Consumers, StreamConsumerInfo{Name: n, Offset: no.off,
			Lag: max(si.LastOffset-int64(no.off), 0), Active: active[n]})
	}
	st.mu.Unlock()
	sortConsumerInfo(si.Consumers)
	return si, true
}

func sortConsumerInfo(cs []StreamConsumerInfo) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].Name < cs[j-1].Name; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// IsStream reports whether q is a stream.
func (q *Queue) IsStream() bool { return q.st != nil }

// errNotForStream is RabbitMQ's answer to an operation a stream does not
// support (AMQP 540 NOT_IMPLEMENTED, connection scope).
func errNotForStream(op string, q *Queue) error {
	return errorf(KindNotImplemented, "%s not supported by stream queues queue '%s' in vhost '%s'", op, q.name, q.vh.name)
}

// CheckGet returns the error basic.get on q gets, nil if q supports it.
func (q *Queue) CheckGet() error {
	if q.st != nil {
		return errNotForStream("basic.get", q)
	}
	return nil
}

// CheckPurge returns the error a purge of q gets, nil if q supports it.
func (q *Queue) CheckPurge() error {
	if q.st != nil {
		return errNotForStream("queue.purge", q)
	}
	return nil
}

// CheckReject returns the error basic.nack or basic.reject of a delivery
// from q gets, nil if q supports them.
func (q *Queue) CheckReject() error {
	if q.st != nil {
		return errNotForStream("basic.nack and basic.reject", q)
	}
	return nil
}

// status is a stream's QueueStatus: its retained messages count as ready
// (as RabbitMQ counts them), none of them in memory.
func (st *stream) status() QueueStatus {
	n, bytes, _, _, _ := st.log.Stats()
	s := QueueStatus{Ready: int(n), ReadyBytes: bytes, LastUsed: nowNano()}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.cursors {
		s.Unacked += c.out
		s.Consumers++
		for _, r := range c.buf {
			s.Memory += int64(len(r.Data))
		}
	}
	s.Deleted = st.closed.Load()
	return s
}

// consumers lists the stream's consumers, by cursor id (attach order).
func (st *stream) consumers() []ConsumerInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	ids := make([]uint32, 0, len(st.cursors))
	for id := range st.cursors {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]ConsumerInfo, 0, len(ids))
	for _, id := range ids {
		cur := st.cursors[id]
		c := cur.c
		out = append(out, ConsumerInfo{Tag: c.tag, AckRequired: true, Exclusive: c.excl,
			Priority: int(c.priority), Prefetch: c.prefetch, Active: cur.live(),
			SingleActive: cur.grp != nil || (cur.up != nil && cur.up.sac)})
	}
	return out
}
