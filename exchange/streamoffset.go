package exchange

import "time"

// Stored offsets set and read directly, as RabbitMQ's stream protocol does
// (store_offset, query_offset): the same named offsets a named consumer's
// acks keep (stream.go), under the same records, so a stream-protocol
// client and an AMQP consumer of one name share a position.

// StoreStreamOffset records off as name's offset on stream q; it is
// written to the store (in a cluster: the metadata group) within
// offsetFlushEvery. A later store of the name wins, lower or not.
func (q *Queue) StoreStreamOffset(name string, off uint64) error {
	st := q.st
	if st == nil {
		return errorf(KindPreconditionFailed, "queue '%s' in vhost '%s' is not a stream", q.name, q.vh.name)
	}
	if name == "" || len(name) > 255 {
		return errorf(KindPreconditionFailed, "invalid offset reference for queue '%s' in vhost '%s': a non-empty string of at most 255 bytes", q.name, q.vh.name)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed.Load() {
		return errorf(KindNotFound, "no queue '%s' in vhost '%s'", q.name, q.vh.name)
	}
	st.offsets[name] = namedOffset{off: off, epoch: st.epochLocked()}
	st.dirty[name] = true
	if st.flushT == nil {
		st.flushT = time.AfterFunc(offsetFlushEvery, st.flushOffsets)
	}
	return nil
}

// StreamOffset returns name's stored offset on stream q, ok false if it
// has none (or q is not a stream).
func (q *Queue) StreamOffset(name string) (off uint64, ok bool) {
	st := q.st
	if st == nil {
		return 0, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	no, ok := st.offsets[name]
	return no.off, ok
}
