package exchange

import (
	"fmt"
	"strings"
	"time"
)

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

// namedOffset is a named consumer's stored offset and the epoch of the
// consumer that acked it. In a cluster several nodes write one name's
// record: the member a consumer on a non-member reads through, the next
// member after a failover (while acks of what the first one delivered
// may still reach it), the non-member itself for the acks no member sees,
// each retrying while there is no metadata leader; a write proposed or
// made earlier may commit later. So records are ordered by (epoch,
// offset), not by commit order (the metadata applier leaves an older one
// out on every node alike, MetaStamp): a later consumer of the name wins
// (one that went back with an explicit x-stream-offset moves it back),
// and one consumer's offset only rises, whichever node wrote it.
//
// The epoch is a hybrid logical clock taken when the consumer subscribed:
// the wall clock in nanoseconds, but above every epoch the stream took or
// saw. A non-member passes its consumer's epoch to the upstream consumer
// (x-stream-consumer-epoch, consumerEpochArg), so that all the records of
// one consumer carry it.
type namedOffset struct {
	off, epoch uint64
}

// before reports whether a is older than b.
func (a namedOffset) before(b namedOffset) bool {
	return a.epoch < b.epoch || (a.epoch == b.epoch && a.off < b.off)
}

// consumerEpochArg carries a non-member's consumer's epoch to its upstream
// consumer on a member. It is an argument a client could give too: it
// orders only its own name's records (a client that sets it can make its
// offsets lose to, or beat, another consumer of its own name, nothing else).
const consumerEpochArg = "x-stream-consumer-epoch"

// epochLocked returns an epoch above every one this stream took or saw.
func (st *stream) epochLocked() uint64 {
	st.clock = max(st.clock+1, uint64(time.Now().UnixNano()))
	return st.clock
}

// flushOffsets writes dirty named offsets to the store.
func (st *stream) flushOffsets() {
	// One flush at a time, so that the records are committed in the
	// order their values were taken: a flush of the timer still waiting
	// for its commit would otherwise be overtaken by the last flush of a
	// cancelled consumer, and its older offset committed after it.
	st.flushMu.Lock()
	defer st.flushMu.Unlock()
	st.mu.Lock()
	st.flushT = nil
	if st.closed.Load() {
		st.mu.Unlock()
		return
	}
	out := make(map[string]namedOffset, len(st.dirty))
	for n := range st.dirty {
		out[n] = st.offsets[n]
	}
	clear(st.dirty)
	st.mu.Unlock()
	pfx := st.offsetPrefix()
	var failed map[string]namedOffset
	for n, no := range out {
		if err := st.q.vh.b.replicate(pfx+n, encodeRecord(Table{"offset": no.off, "epoch": no.epoch})); err != nil {
			st.q.vh.b.log.Warn("stream consumer offset not stored", "queue", st.q.name, "consumer", n, "err", err)
			if failed == nil {
				failed = map[string]namedOffset{}
			}
			failed[n] = no
		}
	}
	if len(failed) > 0 {
		st.retryOffsets(failed)
	}
}

// retryOffsets marks named offsets that could not be stored (in a cluster:
// no metadata leader for a while, as after a node's death) dirty again,
// unless they moved meanwhile (a newer value is dirty already, or another
// node's newer record replaced it), so that the next flush writes them
// (with the epoch they were taken with): one that stays unwritten would be
// lost once its consumer is gone.
func (st *stream) retryOffsets(failed map[string]namedOffset) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed.Load() {
		return
	}
	again := false
	for n, no := range failed {
		if cur, ok := st.offsets[n]; ok && cur == no && !st.dirty[n] {
			st.dirty[n] = true
			again = true
		}
	}
	if again && st.flushT == nil {
		st.flushT = time.AfterFunc(offsetFlushEvery, st.flushOffsets)
	}
}

// streamOffsetPrefix starts the key of a stream's named offset record:
// "streamoff/<vhost>\x00<queue>\x00<name>".
const streamOffsetPrefix = "streamoff/"

// applyStreamOffsetRecord takes a committed named-offset record (rest is
// its key after streamOffsetPrefix): not topology, so not a command, but
// the one other record the core follows (ApplyMeta). A record of a vhost
// this node does not have is nothing.
func (b *Broker) applyStreamOffsetRecord(rest string, val []byte) error {
	vn, rest, ok := strings.Cut(rest, "\x00")
	if !ok {
		return nil
	}
	v, ok := b.VHost(vn)
	if !ok {
		return nil
	}
	return v.applyStreamOffset(rest, val)
}

// applyStreamOffset takes a named consumer's offset as the metadata group
// committed it (a record "streamoff/<vhost>\x00<queue>\x00<name>", from
// any node), unless this node holds a later one (namedOffset.before: its
// own, not yet stored or not yet committed): what a node holds is the
// cluster's record, or newer. The applier has left out a record older
// than the stored one already (MetaStamp); a later one replaces a value of
// this node's still dirty, which the applier would leave out in turn.
func (v *VHost) applyStreamOffset(rest string, val []byte) error {
	qn, name, ok := strings.Cut(rest, "\x00")
	if !ok {
		return fmt.Errorf("stream offset key %q: no consumer name", rest)
	}
	v.mu.RLock()
	q := v.queues[qn]
	v.mu.RUnlock()
	if q == nil || q.st == nil {
		return nil
	}
	st := q.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if val == nil {
		if !st.dirty[name] {
			delete(st.offsets, name)
		}
		return nil
	}
	r, err := decodeRecord(val)
	if err != nil {
		return err
	}
	off, ok := r["offset"].(uint64)
	if !ok {
		return fmt.Errorf("stream offset record without an offset")
	}
	epoch, _ := r["epoch"].(uint64)
	st.clock = max(st.clock, epoch)
	no := namedOffset{off: off, epoch: epoch}
	if cur, ok := st.offsets[name]; ok && no.before(cur) {
		return nil
	}
	st.offsets[name] = no
	delete(st.dirty, name)
	return nil
}

// MetaStamp returns the order of a metadata record whose key is ordered
// by its value (a stream's named offset: its consumer's epoch, then the
// offset): of two records of such a key the later one is kept, whichever
// committed last (the cluster's metadata applier asks it,
// cluster/meta.StoreApplier.Stamp). ok is false for every other key; a
// record without an epoch (an older build's) has epoch 0.
func MetaStamp(key string, val []byte) (epoch, seq uint64, ok bool) {
	if !strings.HasPrefix(key, "streamoff/") {
		return 0, 0, false
	}
	r, err := decodeRecord(val)
	if err != nil {
		return 0, 0, true
	}
	epoch, _ = r["epoch"].(uint64)
	seq, _ = r["offset"].(uint64)
	return epoch, seq, true
}
