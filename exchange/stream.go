package exchange

import (
	"fmt"
	"github.com/trident-broker/trident/exchange/streamlog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A stream (x-queue-type stream, RabbitMQ 3.9+) is an append-only log:
// publishing appends, consuming reads from an offset without removing
// anything, retention (x-max-age, x-max-length-bytes) removes whole
// segments from the head. Its state lives in *stream, not in the Queue's
// fields: the Queue is only the handle the rest of the core and the front
// ends hold, and hands each call to the stream (q.st != nil) at its top.
//
// Consumers: each has a cursor with its own goroutine that reads ahead a
// bounded window from the log (outside every lock) and delivers it as the
// consumer's credit allows. Credit is the consumer's prefetch: an ack
// gives one back (nothing is removed). Delivery seqs carry the cursor's id
// and the offset (cursorShift), so that two consumers of a channel that
// both hold offset 5 unacked settle their own.
//
// Named consumers (x-stream-consumer-name, our extension; RabbitMQ has
// it only in its stream protocol): the highest offset the latest
// consumer of a name acked is kept in memory and written to the store at most every
// offsetFlushEvery (and when it cancels, and at a clean stop), under
// "streamoff/<vhost>\x00<queue>\x00<name>". A consumer of that name that
// gives no x-stream-offset resumes after it; after a crash it may see
// again what it acked in the last moment before it (at least once). In a
// cluster the record is the metadata group's, held by every node
// (applyStreamOffset), so a consumer of the name resumes after it through
// any member; a write that fails (no metadata leader for a while) is
// tried again at the next flush. Several nodes may write one name's
// record (see streamremote.go), so each record carries its consumer's
// epoch and records are ordered by (epoch, offset), whatever the commit
// order (namedOffset).
//
// Lock order: Queue.mu is not used by a stream. stream.flushMu →
// stream.mu → streamLog.mu.
// A cursor's Sink is called with stream.mu held.

const (
	cursorShift = 40 // Delivery.Seq = cursor id << cursorShift | offset
	offsetMask  = 1<<cursorShift - 1

	readAheadMsgs  = 256     // a cursor's window, in messages
	readAheadBytes = 1 << 20 // and in bytes

	offsetFlushEvery = 200 * time.Millisecond
)

type stream struct {
	q   *Queue
	a   streamArgs
	log *streamlog.Log

	flushMu sync.Mutex // serializes flushOffsets
	mu      sync.Mutex
	cursors map[uint32]*cursor
	cid     uint32
	nwait   atomic.Int32 // cursors waiting (for a durable message, credit...)
	offsets map[string]namedOffset
	dirty   map[string]bool
	clock   uint64 // the highest epoch taken or seen (namedOffset.epoch)
	flushT  *time.Timer
	retainT *time.Timer
	closed  atomic.Bool
	// followStop ends the store watch of a clustered stream's follower.
	followStop chan struct{}
	// durableC wakes wakeLoop: the store's notifier (which calls every
	// queue's callbacks in turn) never waits for stream.mu.
	durableC chan struct{}
	stopC    chan struct{}
	started  atomic.Bool
	// groups are the single-active groups by name (streamsac.go).
	groups map[string]*sacGroup
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

// cursor is one consumer's position and window.
type cursor struct {
	id      uint32
	c       *Consumer
	name    string // x-stream-consumer-name, "" if none
	next    uint64 // the next offset to deliver
	out     int    // delivered, not yet acked
	acked   int64  // the highest offset it acked, -1 none
	epoch   uint64 // a named one's (namedOffset)
	buf     []streamlog.Rec
	bufNext uint64 // where reading goes on after buf
	waiting bool
	stop    bool
	wake    chan struct{}
	// up, if not nil, is the consumer on a member of a clustered stream
	// this node has no copy of (streamremote.go); no goroutine runs.
	up *upstream
	// A single-active member's group and state (streamsac.go), and its
	// own x-stream-offset, where it starts if its group stored none.
	grp  *sacGroup
	sac  sacState
	spec offsetSpec
	// gen changes when the cursor is moved (activated, stepped down): a
	// read made before is dropped.
	gen uint64
}

func newStream(q *Queue, a streamArgs) *stream {
	b := q.vh.b
	st := &stream{q: q, a: a, cursors: map[uint32]*cursor{}, offsets: map[string]namedOffset{}, dirty: map[string]bool{}}
	st.log = streamlog.New(streamlog.Config{Store: b.store, NewID: b.nextQueueID,
		Prefix: "streamseg/" + q.vh.name + "\x00" + q.name + "\x00",
		Chunks: q.vh.StreamChunksEnabled, OnDurable: st.onDurable, TimeOf: recordTime})
	st.durableC, st.stopC = make(chan struct{}, 1), make(chan struct{})
	// wakeLoop and the retention timer start with the first consumer or
	// append (started): a Queue built from a record and dropped at once
	// (cluster.go's applyQueue) leaves nothing running.
	return st
}

func (st *stream) offsetPrefix() string {
	return "streamoff/" + st.q.vh.name + "\x00" + st.q.name + "\x00"
}

// recover loads the log and the named offsets.
func (st *stream) recover() (uint64, error) {
	maxID, err := st.log.Recover()
	if err != nil {
		return 0, err
	}
	if st.log.Segments() > 0 {
		st.start()
	}
	pfx := st.offsetPrefix()
	err = st.q.vh.b.store.LoadMeta(pfx, func(key string, val []byte) error {
		r, err := decodeRecord(val)
		if err != nil {
			return err
		}
		if off, ok := r["offset"].(uint64); ok {
			epoch, _ := r["epoch"].(uint64)
			st.offsets[key[len(pfx):]] = namedOffset{off: off, epoch: epoch}
			st.clock = max(st.clock, epoch)
		}
		return nil
	})
	return maxID, err
}

// enqueue appends a routed message (data is its encoded record).
func (st *stream) enqueue(m *Message, data []byte, done func(error), now int64, batch *Batch) (accepted, stored, refused bool) {
	q := st.q
	if st.closed.Load() {
		return false, false, false
	}
	if st.log.Following() {
		return st.forward(forwardable(m), done)
	}
	if takeForwardedWriter(m) {
		data = nil // encoded again, with its producer in the record
	}
	if data == nil {
		data = encodeMessage(m, now, nil)
	}
	if m.writer.Named() {
		st.log.PreloadWriters() // once after a start, with no lock held
	}
	st.log.Lock()
	if w := m.writer; w != nil && st.log.DuplicateLocked(w) {
		// A named producer's resend (streamlog/writers.go): not appended,
		// confirmed once its first copy is surely durable.
		if done != nil {
			st.log.FlushLocked() // the tail it waits for is written
			st.log.AfterTailLocked(done)
		}
		st.log.Unlock()
		st.log.FireWaiters(nil)
		return true, done != nil, false
	}
	segs := st.log.SegmentsLocked()
	_, err := st.log.AppendBatchLocked(data, now, st.a.segBytes, m.writer, done, logBatchOf(batch))
	if err == nil {
		st.log.NoteWriterLocked(m.writer)
	}
	rolled := st.log.SegmentsLocked() != segs
	st.log.Unlock()
	if err != nil {
		q.vh.b.log.Error("stream append failed", "queue", q.name, "err", err)
		return false, false, true
	}
	q.counters.publish.Add(1)
	st.start()
	if rolled && segs > 0 {
		go st.applyRetention()
	}
	return true, true, false
}

// recordTime is the enqueue time a stream's message record holds (the
// log's TimeOf).
func recordTime(data []byte) (int64, bool) {
	_, ts, err := decodeMessage(data)
	return ts, err == nil
}

// start runs the stream's wake loop and retention timer, once.
func (st *stream) start() {
	if st.started.Load() || !st.started.CompareAndSwap(false, true) {
		return
	}
	go st.wakeLoop()
	st.armRetention()
}

// onDurable wakes cursors waiting at the end of the log.
func (st *stream) onDurable() {
	if st.nwait.Load() == 0 {
		return
	}
	select {
	case st.durableC <- struct{}{}:
	default: // a wake is pending already
	}
}

// wakeLoop signals the cursors waiting for durable messages.
func (st *stream) wakeLoop() {
	for {
		select {
		case <-st.stopC:
			return
		case <-st.durableC:
		}
		st.wakeWaiting()
	}
}

func (st *stream) wakeWaiting() {
	st.mu.Lock()
	for _, c := range st.cursors {
		if c.waiting {
			c.signal()
		}
	}
	st.mu.Unlock()
}

func (c *cursor) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// --- consumers ---

// addConsumer starts a consumer at its x-stream-offset (or, named, after
// its stored offset).
func (st *stream) addConsumer(o ConsumeOpts) (*Consumer, error) {
	q := st.q
	if o.NoAck {
		return nil, errorf(KindNotImplemented, "automatic acknowledgement not supported by stream queues queue '%s' in vhost '%s'", q.name, q.vh.name)
	}
	if o.Prefetch <= 0 {
		return nil, errorf(KindPreconditionFailed, "consumer prefetch count is not set for 'queue '%s' in vhost '%s''", q.name, q.vh.name)
	}
	spec, given, err := parseOffsetSpec(o.Args["x-stream-offset"], nowNano())
	if err != nil {
		return nil, namedArgError(err, q.name, q.vh.name)
	}
	name := ""
	if v, ok := o.Args["x-stream-consumer-name"]; ok {
		s, isStr := v.(string)
		if !isStr || s == "" || len(s) > 255 {
			return nil, errorf(KindPreconditionFailed, "invalid arg 'x-stream-consumer-name' for queue '%s' in vhost '%s': a non-empty string of at most 255 bytes", q.name, q.vh.name)
		}
		name = s
	}
	group, err := st.sacArgs(o, name)
	if err != nil {
		return nil, err
	}
	var up *upstream
	if st.readsRemotely() || st.groupElsewhere(o, group) {
		if r := st.upstreamRemote(group); r != nil {
			up = &upstream{r: r, name: name, offset: o.Args["x-stream-offset"], since: time.Now(), tags: map[uint64]uint64{}}
			up.joinUpstream(o, group)
			name, group = "", "" // its offset and group are kept upstream
		}
	}
	start := st.resolve(spec)
	st.mu.Lock()
	if st.closed.Load() {
		st.mu.Unlock()
		return nil, errorf(KindNotFound, "no queue '%s' in vhost '%s'", q.name, q.vh.name)
	}
	if no, ok := st.offsets[name]; ok && name != "" && !given && up == nil {
		start = no.off + 1
	}
	epoch, ok := headerOffset(o.Args[consumerEpochArg])
	if !ok || epoch == 0 {
		epoch = st.epochLocked()
	}
	st.clock = max(st.clock, epoch)
	for _, c := range st.cursors {
		if c.c.excl {
			st.mu.Unlock()
			if up != nil {
				up.r.Close()
			}
			return nil, errorf(KindAccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.name, q.vh.name)
		}
	}
	if o.Exclusive && len(st.cursors) > 0 {
		st.mu.Unlock()
		if up != nil {
			up.r.Close()
		}
		return nil, errorf(KindAccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.name, q.vh.name)
	}
	st.cid++
	if st.cid == 0 || st.cid >= 1<<(64-cursorShift) {
		st.cid = 1
	}
	c := &Consumer{q: q, tag: o.Tag, excl: o.Exclusive, priority: o.Priority, prefetch: o.Prefetch, sink: o.Sink}
	cur := &cursor{id: st.cid, c: c, name: name, next: start, bufNext: start, acked: -1, epoch: epoch, wake: make(chan struct{}, 1), up: up, spec: spec}
	st.cursors[cur.id] = cur
	if group != "" {
		st.joinGroupLocked(cur, group, o.PartitionIndex)
	}
	if up != nil {
		cur.next = 0 // the upstream consumer says where it starts
		st.startUpstream(cur, up.offset)
		st.mu.Unlock()
		return c, nil
	}
	st.mu.Unlock()
	st.start()
	go st.run(cur)
	return c, nil
}

// resolve turns an offset spec into the first offset to deliver.
func (st *stream) resolve(s offsetSpec) uint64 {
	first, next := st.log.Bounds()
	switch s.kind {
	case offsetFirst:
		return first
	case offsetLast:
		if off, ok := st.log.LastOffset(); ok {
			return off
		}
		return next
	case offsetAt:
		return min(max(s.n, first), next)
	case offsetTime:
		return st.log.SeekTime(s.t)
	}
	return next
}

// run is a cursor's goroutine: read ahead (no lock held), deliver under
// st.mu as credit allows, wait when there is no credit or nothing new.
func (st *stream) run(cur *cursor) {
	for {
		st.mu.Lock()
		for !cur.stop && (cur.c.blocked || cur.out >= cur.c.prefetch || !cur.live() ||
			(len(cur.buf) == 0 && cur.bufNext >= st.log.Durable())) {
			cur.waiting = true
			st.nwait.Add(1)
			st.mu.Unlock()
			<-cur.wake
			st.mu.Lock()
			cur.waiting = false
			st.nwait.Add(-1)
		}
		if cur.stop {
			st.mu.Unlock()
			return
		}
		if len(cur.buf) == 0 {
			from, gen := cur.bufNext, cur.gen
			st.mu.Unlock()
			recs, next, err := st.log.Read(from, readAheadMsgs, readAheadBytes)
			st.mu.Lock()
			if cur.gen != gen {
				st.mu.Unlock() // moved meanwhile: read again from there
				continue
			}
			if err != nil {
				st.q.vh.b.log.Error("stream read failed", "queue", st.q.name, "offset", from, "err", err)
			}
			cur.buf, cur.bufNext = recs, next
			if len(recs) == 0 {
				cur.next = max(cur.next, next)
				st.mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
				}
				continue
			}
		}
		st.deliverLocked(cur)
		st.mu.Unlock()
	}
}

// deliverLocked hands buffered messages to the consumer while it has
// credit and its sink takes them.
func (st *stream) deliverLocked(cur *cursor) {
	q := st.q
	for len(cur.buf) > 0 && cur.out < cur.c.prefetch && !cur.c.blocked && !cur.stop && cur.live() {
		r := cur.buf[0]
		cur.buf[0] = streamlog.Rec{}
		cur.buf = cur.buf[1:]
		cur.next = r.Off + 1
		m, _, err := decodeMessage(r.Data)
		if err != nil {
			q.vh.b.log.Error("corrupt stream message skipped", "queue", q.name, "offset", r.Off, "err", err)
			q.vh.b.noteUnreadable(q, 1)
			continue
		}
		h := make(Table, len(m.Props.Headers)+1)
		for k, v := range m.Props.Headers {
			h[k] = v
		}
		h["x-stream-offset"] = int64(r.Off)
		m.Props.Headers = h
		cur.out++
		q.countDeliver(false, false, 1)
		if !cur.c.sink.Deliver(Delivery{Queue: q, Consumer: cur.c, Msg: m, Seq: uint64(cur.id)<<cursorShift | r.Off}) {
			cur.c.blocked = true
		}
	}
	if len(cur.buf) == 0 {
		cur.buf = nil
	}
}

// settle gives credit back for deliveries (acks and, since a stream
// requeues nothing, rejects) and records named consumers' offsets.
func (st *stream) settle(seqs []uint64, ack bool) {
	st.mu.Lock()
	flush := false
	for _, s := range seqs {
		cur := st.cursors[uint32(s>>cursorShift)]
		if cur == nil {
			continue
		}
		if cur.out > 0 {
			cur.out--
		}
		if cur.up != nil {
			if st.settleUpstreamLocked(cur, s&offsetMask, ack) {
				flush = true
			}
			if len(cur.up.pend) > 0 {
				// Local credit freed: an ack of a delivery made before a
				// reset has no upstream tag but lets a waiting one out.
				st.deliverUpstreamLocked(cur)
			}
			if cur.up.rejoin && cur.out == 0 {
				st.restartUpstreamLocked(cur)
			}
		}
		if ack {
			st.q.counters.ack.Add(1)
			st.q.vh.counters.ack.Add(1)
		}
		if off := int64(s & offsetMask); cur.name != "" && ack && off > cur.acked && st.mayStoreLocked(cur, off) {
			// The consumer's own position: a consumer that went back
			// (an explicit x-stream-offset) moves its name's offset back.
			cur.acked = off
			if no := (namedOffset{off: uint64(off), epoch: cur.epoch}); st.offsets[cur.name] != no {
				st.offsets[cur.name] = no
				st.dirty[cur.name] = true
				flush = true
			}
		}
		if cur.waiting {
			cur.signal()
		}
	}
	if flush && st.flushT == nil {
		st.flushT = time.AfterFunc(offsetFlushEvery, st.flushOffsets)
	}
	st.mu.Unlock()
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
		if err := st.q.vh.b.store.PutMeta(pfx+n, encodeRecord(Table{"offset": no.off, "epoch": no.epoch})); err != nil {
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

// resume lifts a sink's pause.
func (st *stream) resume(c *Consumer) {
	st.mu.Lock()
	c.blocked = false
	for _, cur := range st.cursors {
		if cur.c == c {
			cur.signal()
			if cur.up != nil {
				st.deliverUpstreamLocked(cur)
			}
		}
	}
	st.mu.Unlock()
}

// kick wakes every cursor.
func (st *stream) kick() {
	st.mu.Lock()
	for _, cur := range st.cursors {
		cur.signal()
		if cur.up != nil {
			st.deliverUpstreamLocked(cur)
		}
	}
	st.mu.Unlock()
}

func (st *stream) removeConsumer(c *Consumer) {
	st.mu.Lock()
	var named bool
	for id, cur := range st.cursors {
		if cur.c == c {
			cur.stop = true
			c.cancelled = true
			cur.signal()
			if cur.up != nil {
				cur.up.r.Close()
			}
			delete(st.cursors, id)
			st.leaveGroupLocked(cur)
			named = cur.name != "" || (cur.up != nil && st.dirty[cur.up.name])
		}
	}
	st.mu.Unlock()
	if named {
		st.flushOffsets()
	}
}

// stats are the counts a Queue's Stats reports: retained messages,
// deliveries not yet acked, consumers.
func (st *stream) stats() (msgs, unacked, consumers int) {
	n, _, _, _, _ := st.log.Stats()
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.cursors {
		unacked += c.out
	}
	return int(n), unacked, len(st.cursors)
}

// close stops the stream (deleted, or the broker stops): consumers are
// cancelled (cancelSinks) and named offsets flushed.
func (st *stream) close(cancelSinks bool) int {
	st.log.Flush() // the pending chunk (streamlog/chunk.go)
	st.flushOffsets()
	st.mu.Lock()
	if !st.closed.Swap(true) {
		close(st.stopC)
	}
	for id, cur := range st.cursors {
		cur.stop = true
		cur.c.cancelled = true
		cur.signal()
		if cur.up != nil {
			cur.up.r.Close()
		}
		if cancelSinks {
			cur.c.sink.Cancelled(cur.c)
		}
		delete(st.cursors, id)
	}
	st.groups = nil
	if st.flushT != nil {
		st.flushT.Stop()
	}
	if st.retainT != nil {
		st.retainT.Stop()
	}
	if st.followStop != nil {
		close(st.followStop)
		st.followStop = nil
	}
	st.mu.Unlock()
	st.log.FireWaiters(streamlog.ErrClosed)
	n, _, _, _, _ := st.log.Stats()
	return int(n)
}

// drop deletes the log and the named offsets (the stream was deleted).
func (st *stream) drop() error {
	if err := st.log.DropAll(); err != nil {
		return err
	}
	return st.q.vh.b.store.DeleteMetaPrefix(st.offsetPrefix())
}

// --- retention ---

// retentionEvery is how often a stream with x-max-age looks for expired
// segments (besides at every segment roll).
func (st *stream) retentionEvery() time.Duration {
	return min(max(st.a.maxAge/4, time.Second), time.Minute)
}

func (st *stream) armRetention() {
	// By size at each segment roll; in a cluster on the timer too (a
	// leader's pass skips segments its FSM has not applied in full yet).
	if st.a.maxAge <= 0 && (st.a.maxBytes <= 0 || len(st.q.Members()) == 0) {
		return
	}
	st.mu.Lock()
	if !st.closed.Load() {
		st.retainT = time.AfterFunc(st.retentionEvery(), func() {
			st.applyRetention()
			st.armRetention()
		})
	}
	st.mu.Unlock()
}

// applyRetention removes whole segments past x-max-length-bytes or
// x-max-age. Readers inside a removed segment go on at the new first
// offset.
func (st *stream) applyRetention() {
	var cutoff int64
	if st.a.maxAge > 0 {
		cutoff = nowNano() - int64(st.a.maxAge)
	}
	if st.log.Leads() {
		if err := st.log.RetainReplicated(st.q.id, st.a.maxBytes, cutoff); err != nil {
			st.q.vh.b.log.Warn("stream retention not applied", "queue", st.q.name, "err", err)
		}
		return
	}
	gone := st.log.Retain(st.a.maxBytes, cutoff)
	if len(gone) == 0 {
		return
	}
	if err := st.log.DropSegments(gone); err != nil {
		st.q.vh.b.log.Warn("stream segments not removed", "queue", st.q.name, "err", err)
	}
}

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

// --- the broker's part ---

// recoverStreams loads the logs of the recovered streams.
func (b *Broker) recoverStreams(queues []*Queue) error {
	for _, q := range queues {
		if q.st == nil {
			continue
		}
		maxID, err := q.st.recover()
		if err != nil {
			return fmt.Errorf("stream '%s' in vhost '%s': %w", q.name, q.vh.name, err)
		}
		if maxID > b.qid.Load() && b.cluster == nil {
			b.qid.Store(maxID)
		}
	}
	return nil
}

// closeStreams flushes every stream's named offsets (a clean stop).
func (b *Broker) closeStreams() {
	for _, vn := range b.VHosts() {
		v, ok := b.VHost(vn)
		if !ok {
			continue
		}
		for _, q := range v.Queues() {
			if q.st != nil {
				q.st.flushOffsets()
			}
		}
	}
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
			Priority: c.priority, Prefetch: c.prefetch, Active: cur.live(),
			SingleActive: cur.grp != nil || (cur.up != nil && cur.up.sac)})
	}
	return out
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

// logBatch is a *Batch as the log's streamlog.Batch: the log registers
// with it once per pending chunk, not per message.
type logBatch Batch

func (b *logBatch) Defer(f streamlog.Flusher) bool { return (*Batch)(b).Defer(f) }

// logBatchOf is b for the log, nil for none.
func logBatchOf(b *Batch) streamlog.Batch {
	if b == nil {
		return nil
	}
	return (*logBatch)(b)
}
