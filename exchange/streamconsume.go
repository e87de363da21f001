package exchange

import (
	"time"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// A stream's consumers: each has a cursor that reads ahead from the log
// and delivers as its credit allows (stream.go).

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
	c := &Consumer{q: q, tag: o.Tag, excl: o.Exclusive, priority: clampInt32(o.Priority), prefetch: o.Prefetch, sink: o.Sink,
		noOffsetHeader: o.NoOffsetHeader || o.StoredRuns}
	cur := &cursor{id: st.cid, c: c, name: name, next: start, bufNext: start, acked: -1, epoch: epoch, wake: make(chan struct{}, 1), up: up, spec: spec}
	if rs, ok := o.Sink.(RunSink); ok && o.StoredRuns {
		cur.runs = rs
	}
	st.cursors[cur.id] = cur
	if c.noOffsetHeader && up == nil {
		st.share.addRaw()
	}
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
		for !cur.stop && (cur.c.blocked || cur.full() || !cur.live() ||
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
			ahead := readAheadMsgs
			if cur.runs != nil {
				ahead = runRecs
			}
			recs, next, err := st.log.ReadAppend(cur.arr[:0], from, min(ahead, cur.c.prefetch), readAheadBytes)
			if cap(recs) <= 2*ahead {
				cur.arr = recs[:0]
			}
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

// StreamOffset is the offset of d, a delivery from a stream (false for a
// delivery from another kind of queue). Its Seq holds it, whether the
// delivery carries an x-stream-offset header or not
// (ConsumeOpts.NoOffsetHeader).
func StreamOffset(d Delivery) (uint64, bool) {
	if d.Queue == nil || d.Queue.st == nil {
		return 0, false
	}
	return d.Seq & offsetMask, true
}

// deliverLocked hands buffered messages to the consumer while it has
// credit and its sink takes them.
func (st *stream) deliverLocked(cur *cursor) {
	q := st.q
	if rs := cur.runs; rs != nil {
		for len(cur.buf) > 0 && !cur.full() && !cur.c.blocked && !cur.stop && cur.live() {
			st.deliverRunLocked(cur, rs)
		}
		return
	}
	for len(cur.buf) > 0 && cur.out < cur.c.prefetch && !cur.c.blocked && !cur.stop && cur.live() {
		r := cur.buf[0]
		cur.buf[0] = streamlog.Rec{}
		cur.buf = cur.buf[1:]
		cur.next = r.Off + 1
		m, _, err := q.vh.b.decodeRecord(r.Data)
		if err != nil {
			q.vh.b.log.Error("corrupt stream message skipped", "queue", q.name, "offset", r.Off, "err", err)
			q.vh.b.noteUnreadable(q, 1)
			continue
		}
		if !cur.c.noOffsetHeader {
			h := make(Table, len(m.Props.Headers)+1)
			for k, v := range m.Props.Headers {
				h[k] = v
			}
			h["x-stream-offset"] = int64(r.Off)
			m.Props.Headers = h
		}
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
		if ack && st.ackedLocked(cur, int64(s&offsetMask)) {
			flush = true
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
			if c.noOffsetHeader && cur.up == nil {
				st.share.dropRaw()
			}
			st.leaveGroupLocked(cur)
			named = cur.name != "" || (cur.up != nil && st.dirty[cur.up.name])
		}
	}
	reading := false
	for _, cur := range st.cursors {
		reading = reading || cur.up == nil
	}
	st.mu.Unlock()
	if !reading {
		// The last reader of this node's log went: give back the
		// chunks it cached for readers (streamlog's read cache).
		st.log.DropCache()
	}
	if named {
		st.flushOffsets()
	}
}
