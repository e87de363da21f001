package exchange

import (
	"slices"
	"strconv"
	"time"
)

// A consumer of a clustered stream on a node that is not one of its
// members (this node has no copy) reads the stream through a member, as
// RabbitMQ's do: each such consumer has its own upstream consumer (a
// StreamRemote from Cluster.StreamRemote) on a member, started with its
// x-stream-offset and x-stream-consumer-name and its prefetch. The
// member's deliveries carry x-stream-offset already; they are handed to
// the local consumer in offset order, and an ack (or reject) here gives
// the credit back upstream (acks it there: a named consumer's offset is
// kept by the member, and being a metadata record it is the cluster's,
// see settleUpstreamLocked for the acks no member sees, and
// keepAckedLocked for those of a member that died before it wrote
// them). When the upstream consumer is lost (the
// member went down, another member is picked) it starts again at the
// offset after the last one delivered here (what was pushed and not yet
// delivered is dropped and read again), and what arrives twice is
// dropped; deliveries made before the loss stay unacked here and their
// acks free local credit only. Until something was pushed it starts again
// with the consumer's own x-stream-offset (from next or last: from the
// second the consumer subscribed in, so that what was published while the
// member was lost is not skipped).
//
// A single-active member on any node but its stream's home is such a
// consumer too (streamsac.go), on the home: its StreamRemote goes where
// the home is at each connection, this node included, so that after the
// home's death the members on every node join one group again, on the
// next home. One that held deliveries when its upstream consumer was lost
// joins again only once it settled them (its acks store the group's
// offset here meanwhile): while its credit is taken it would, active,
// hold the whole group.
//
// The consumer's prefetch bounds its unacked deliveries here, not only
// upstream: after a loss the new upstream consumer has a fresh prefetch
// while the deliveries of the old one may still be unacked here, so what
// it pushes waits (at most prefetch messages) until acks free local
// credit.
//
// Publishes need nothing of this: the stream's proxy role forwards
// them to a member, which forwards them to the leader if it is not it;
// the confirm comes back once the leader's group committed them.
//
// Lock order: stream.mu → the StreamRemote's own lock (its methods do not
// block). Its callbacks are called without its lock.

// StreamRemote is a Remote whose consumer carries basic.consume arguments
// and a per-consumer prefetch.
type StreamRemote interface {
	Remote
	// ConsumeWith is Consume with args; a later call (from reset, say)
	// sets the args of the next upstream consumer.
	ConsumeWith(args Table, prefetch int, push func(m *Message, tag uint64, redelivered bool), reset func())
}

// upstream is a remote cursor's state, under stream.mu.
type upstream struct {
	r      StreamRemote
	name   string            // x-stream-consumer-name, passed upstream
	sac    bool              // x-single-active-consumer, passed upstream
	offset any               // the consumer's own x-stream-offset, nil none
	since  time.Time         // when the consumer subscribed
	pushed bool              // something was pushed: cur.next is where to go on
	tags   map[uint64]uint64 // offset → upstream tag, delivered and not settled
	pend   []upMsg           // pushed, not yet delivered (the sink paused)
	// A single-active member whose name is not its stored offset's (the
	// stream protocol's): its group, passed upstream as sacGroupArg; ask:
	// its sink is an ActivationSink, told on the first push (streamsac.go).
	group           string
	ask, told, held bool
	// rejoin: a single-active member lost its upstream consumer while it
	// held deliveries; the next one starts once they are settled.
	rejoin bool
}

type upMsg struct {
	m   *Message
	off uint64
}

// readsRemotely reports whether q is a clustered stream of which this
// node is not a member.
func (st *stream) readsRemotely() bool {
	c := st.q.vh.b.cluster
	ms := st.q.Members()
	return c != nil && len(ms) > 0 && !slices.Contains(ms, c.NodeName())
}

// startUpstream starts cur's upstream consumer with the consumer's own
// x-stream-offset (args) or, after a loss, at cur.next.
func (st *stream) startUpstream(cur *cursor, offset any) {
	args := Table{}
	if offset != nil {
		args["x-stream-offset"] = offset
	}
	if cur.up.name != "" {
		args["x-stream-consumer-name"] = cur.up.name
		args[consumerEpochArg] = int64(cur.epoch)
		if cur.up.sac {
			args["x-single-active-consumer"] = true
		}
	} else if cur.up.group != "" {
		args[sacGroupArg] = cur.up.group
		args[consumerEpochArg] = int64(cur.epoch)
	}
	cur.up.r.ConsumeWith(args, cur.c.prefetch,
		func(m *Message, tag uint64, _ bool) { st.pushUpstream(cur, m, tag) },
		func() { st.resetUpstream(cur) })
}

// pushUpstream takes a delivery of cur's upstream consumer.
func (st *stream) pushUpstream(cur *cursor, m *Message, tag uint64) {
	off, ok := headerOffset(m.Props.Headers["x-stream-offset"])
	st.mu.Lock()
	defer st.mu.Unlock()
	if cur.stop {
		return
	}
	if !ok || off < cur.next {
		// Seen already (a restarted upstream consumer), or not a stream's
		// delivery: its credit goes back at once.
		if !ok {
			st.q.vh.b.log.Error("upstream stream delivery without x-stream-offset dropped", "queue", st.q.name)
		}
		cur.up.r.Ack(tag)
		return
	}
	cur.next, cur.up.pushed = off+1, true
	cur.up.tags[off] = tag
	cur.up.pend = append(cur.up.pend, upMsg{m: m, off: off})
	st.toldUpstreamLocked(cur)
	st.deliverUpstreamLocked(cur)
}

// resetUpstream restarts cur's upstream consumer after the offset last
// delivered; the tags of the lost one are dead, and what it pushed that
// was not delivered yet is read again from the new one (so that pend
// never holds more than one upstream consumer's prefetch).
func (st *stream) resetUpstream(cur *cursor) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if cur.stop {
		return
	}
	st.keepAckedLocked(cur)
	clear(cur.up.tags)
	if len(cur.up.pend) > 0 {
		cur.next = cur.up.pend[0].off
		clear(cur.up.pend)
		cur.up.pend = nil
	}
	if cur.up.sac && cur.out > 0 {
		// A single-active member holding deliveries of its group's lost
		// home joins the group again once it settled them (settle):
		// until then the StreamRemote starts no new upstream consumer.
		cur.up.rejoin = true
		cur.up.r.StopConsuming()
		return
	}
	st.restartUpstreamLocked(cur)
}

// restartUpstreamLocked starts cur's next upstream consumer after a loss.
func (st *stream) restartUpstreamLocked(cur *cursor) {
	cur.up.rejoin = false
	if !cur.up.pushed {
		// Nothing pushed yet: the consumer's own start, but for one
		// from the end of the stream: the new member's end is later
		// than the lost one's was, so it starts from the second it
		// subscribed in (a message of up to a second before its
		// subscription may come too; none after it is skipped).
		off := cur.up.offset
		if fromEnd(off) && cur.up.name == "" {
			off = time.Unix(cur.up.since.Unix(), 0)
		}
		st.startUpstream(cur, off)
		return
	}
	st.startUpstream(cur, int64(cur.next))
}

// keepAckedLocked makes this node keep a named consumer's offset when
// its upstream consumer is lost: the member that delivered what it acked
// kept the name's offset, but a member that died (SIGKILL) may not have
// written it (it writes every offsetFlushEvery, then the metadata group
// commits it), and the next consumer of the name, or the single-active
// group formed again on another member, would start behind it. This node
// saw the acks; it stores the highest one, unless it holds as much or a
// later consumer's offset already (namedOffset.before).
func (st *stream) keepAckedLocked(cur *cursor) {
	u := cur.up
	if u.name == "" || cur.acked < 0 {
		return
	}
	no := namedOffset{off: uint64(cur.acked), epoch: cur.epoch}
	if have, ok := st.offsets[u.name]; ok && !have.before(no) {
		return
	}
	st.offsets[u.name] = no
	st.dirty[u.name] = true
	if st.flushT == nil {
		st.flushT = time.AfterFunc(offsetFlushEvery, st.flushOffsets)
	}
}

// fromEnd reports whether an x-stream-offset starts at the end of the
// stream: next (the default) or last (which, from an empty stream, is the
// next message too).
func fromEnd(off any) bool {
	switch off {
	case nil, "next", "last":
		return true
	}
	return false
}

// deliverUpstreamLocked hands pushed messages to the consumer while it
// has credit (its prefetch, counting deliveries of a lost upstream
// consumer still unacked here) and its sink takes them.
func (st *stream) deliverUpstreamLocked(cur *cursor) {
	u := cur.up
	for len(u.pend) > 0 && cur.out < cur.c.prefetch && !cur.c.blocked && !cur.stop && !u.held {
		p := u.pend[0]
		u.pend[0] = upMsg{}
		u.pend = u.pend[1:]
		cur.out++
		st.q.countDeliver(false, false, 1)
		if !cur.c.sink.Deliver(Delivery{Queue: st.q, Consumer: cur.c, Msg: p.m, Seq: uint64(cur.id)<<cursorShift | p.off}) {
			cur.c.blocked = true
		}
	}
	if len(u.pend) == 0 {
		u.pend = nil
	}
}

// settleUpstreamLocked gives the credit of offset off back upstream. For
// a named consumer's ack it also follows the highest offset acked: the
// member that delivered off keeps the name's offset when the ack reaches
// it, but the ack of a delivery whose upstream consumer was lost (its tag
// is dead) reaches no member, so this node stores the offset itself when
// such an ack moves it (it reports that it did, for a flush); a later ack
// that reaches a member takes over again.
func (st *stream) settleUpstreamLocked(cur *cursor, off uint64, ack bool) (stored bool) {
	u := cur.up
	tag, live := u.tags[off]
	if live {
		delete(u.tags, off)
		u.r.Ack(tag)
	}
	if !ack || u.name == "" || int64(off) <= cur.acked {
		return false
	}
	cur.acked = int64(off)
	if live {
		delete(st.dirty, u.name) // the member stores the newer offset
		return false
	}
	st.offsets[u.name] = namedOffset{off: off, epoch: cur.epoch}
	st.dirty[u.name] = true
	return true
}

// headerOffset reads an x-stream-offset header as the wire decoded it.
func headerOffset(v any) (uint64, bool) {
	switch n := v.(type) {
	case int64:
		return uint64(n), n >= 0
	case int32:
		return uint64(n), n >= 0
	case int:
		return uint64(n), n >= 0
	case uint64:
		return n, true
	case uint32:
		return uint64(n), true
	case string:
		u, err := strconv.ParseUint(n, 10, 64)
		return u, err == nil
	}
	return 0, false
}
