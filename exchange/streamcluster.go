package exchange

import (
	"fmt"
	"time"
)

// Clustered streams. In a cluster a stream is declared, like a quorum
// queue, with members (x-initial-cluster-size, default 3) and is a Raft
// group through the same machinery (cluster/quorum): the member that
// leads it appends through the group's log (a confirm means a majority
// committed the message and the leader's FSM wrote it to its store); every
// member's FSM writes the committed messages to its node's store under the
// stream's id, keyed by offset, and a consumer on any member reads its own
// node's store. A member that was down catches up through Raft (log
// entries, or a snapshot) when it comes back.
//
// In a cluster the log is one key range of the store (the stream's id).
// The leader cuts it into segments in memory, as a standalone stream
// cuts its log into key ranges: a segment rolls when the next message
// would take it past x-stream-max-segment-size-bytes (record sizes: the
// encoded message as appended, or the store's size estimate of each key
// when a node becomes the leader and cuts the range it finds again,
// greedily from its first offset). Those boundaries are the leader's
// alone; a follower's log is one segment from its store's first key,
// found by looking at its keys every followEvery (the watermark readers
// stop at).
//
// Retention (x-max-age, x-max-length-bytes) is the leader's, by whole
// segments as in a standalone stream (never the one appended to): one
// pass removes the head segments [from, to) with one range delete
// through the group's log (RangeLog), which every member's FSM applies
// as one range delete of its store. So every member drops the same head,
// and a follower's first offset jumps from one of the leader's
// boundaries to another. Only segments the leader's FSM has applied in
// full are removed (below its durable watermark), so that the count and
// bytes the op carries, read from the leader's store, are what every
// member holds there. After a leader change the new leader's boundaries
// start at the first retained offset, which is the old leader's last
// boundary; past it they match the old ones as far as the store's size
// estimates match the appended sizes (exact for records below the
// store's value threshold, within a few bytes above it). Offsets are
// dense (each leader goes on after the highest key its store holds). A
// node that is not a member has no copy: its consumers read the stream
// through a member (streamremote.go), its publishes are forwarded.

const followEvery = 20 * time.Millisecond

// RangeLog is implemented by a MessageLog that removes a key range as one
// op (a quorum group's log, cluster/quorum.Log): every message of qid
// whose key is in [from, to), which held count messages of bytes bytes
// (what this node's store holds there, every op before it applied). An
// error means nothing was queued.
type RangeLog interface {
	DeleteRange(qid, from, to uint64, count, bytes int64) error
}

// leads reports whether the log is a clustered stream's that this node leads.
func (l *streamLog) leads() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.repl && l.ml != nil
}

// retainReplicated removes, through the group's log, whole segments from
// the head, never the one appended to, while the log holds more than
// maxBytes (0: no limit) or a segment's last message is older than
// cutoff (unix ns, 0: no age limit): one range delete for all of them.
// It stops at a segment that is not durable (applied here) to its end.
func (l *streamLog) retainReplicated(id uint64, maxBytes, cutoff int64) error {
	l.mu.Lock()
	if !l.repl || l.ml == nil {
		l.mu.Unlock()
		return nil
	}
	ml := l.ml
	durable := l.durable.Load()
	var total int64
	for _, s := range l.segs {
		total += s.bytes
	}
	var from, to uint64
	dropped := false
	for len(l.segs) > 1 {
		s := l.segs[0]
		if s.next > durable || !((maxBytes > 0 && total > maxBytes) || (cutoff > 0 && s.lastTs < cutoff)) {
			break
		}
		if !dropped {
			from, dropped = s.first, true
		}
		total -= s.bytes
		l.segs = l.segs[1:]
		to = l.segs[0].first
	}
	l.mu.Unlock()
	if !dropped {
		return nil
	}
	l.cache.drop(to)
	// What the store holds of the range: every entry that wrote it is
	// applied (below the watermark), and no later op of this leader's
	// touches it (appends go past the last segment's start, retention
	// passes take disjoint ranges).
	var keys []uint64
	var count, bytes int64
	rl, ranged := ml.(RangeLog)
	err := l.st.MessageKeys(id, from, func(seq uint64, size int64) bool {
		if seq >= to {
			return false
		}
		count++
		bytes += size
		if !ranged {
			keys = append(keys, seq)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("stream retention: reading [%d, %d): %w", from, to, err)
	}
	if !ranged {
		for _, k := range keys { // a log without range ops: one by one
			ml.DeleteMessage(id, k)
		}
		return nil
	}
	if err := rl.DeleteRange(id, from, to, count, bytes); err != nil {
		return fmt.Errorf("stream retention: %w", err)
	}
	return nil
}

// followStore brings a follower's index (its one segment) up to what its
// store holds of key range id: with head, its first offset up to the
// store's first key (the leader's retention deleted what was before it),
// then the keys past the index's end (what the group committed since).
// It reports whether the index grew. It scans from the index's own end,
// not from the readers' watermark, and under fmu, so that whatever the
// store did between two calls (appends, and range deletes past the
// index's end while a restarted member catches up in one burst) the
// index counts each key of the store once and nothing it lacks.
func (l *streamLog) followStore(id uint64, head bool) bool {
	l.fmu.Lock()
	defer l.fmu.Unlock()
	l.mu.Lock()
	if !l.repl || l.ml != nil || len(l.segs) != 1 {
		l.mu.Unlock()
		return false // leading (or not a clustered stream's log)
	}
	g := l.segs[0]
	s := *g // only followStore and enterReplicated (under fmu) change it
	l.mu.Unlock()

	headMoved := false
	if head {
		var first uint64
		found := false
		_ = l.st.MessageKeys(id, 0, func(seq uint64, _ int64) bool {
			first, found = seq, true
			return false
		})
		if found && first > s.first {
			headMoved = true
			if first >= s.next {
				// Everything the index held is gone, and the store
				// goes on past its end: the tail below counts it.
				s = segment{id: s.id, first: first, next: first}
			} else {
				// Offsets are dense but for gaps a crash left: at
				// most next-first remain, of the average size.
				avg := s.bytes / max(s.count, 1)
				s.count = min(s.count, int64(s.next-first))
				s.bytes = s.count * avg
				s.first = first
				s.firstTs = 0
				if r, ok := l.readOne(s, first); ok {
					_, s.firstTs, _ = decodeMessage(r.data)
				}
			}
		}
	}
	// The tail: from the index's end, or, when the index holds nothing,
	// everything the store holds.
	from := s.next
	if s.count == 0 {
		from = 0
	}
	var n, bytes int64
	next, firstKey := from, uint64(0)
	_ = l.st.MessageKeys(id, from, func(seq uint64, size int64) bool {
		if n == 0 {
			firstKey = seq
		}
		n++
		bytes += size
		next = seq + 1
		return true
	})
	if n > 0 {
		if s.count == 0 {
			s.first = firstKey
			if r, ok := l.readOne(segment{id: id, first: firstKey, next: firstKey + 1}, firstKey); ok {
				_, s.firstTs, _ = decodeMessage(r.data)
			}
		}
		s.count += n
		s.bytes += bytes
		s.next = next
		if r, ok := l.readOne(segment{id: id, first: next - 1, next: next}, next-1); ok {
			_, ts, _ := decodeMessage(r.data)
			s.lastTs = max(s.lastTs, ts)
		}
	}
	if !headMoved && n == 0 {
		return false
	}
	l.mu.Lock()
	if !l.repl || l.ml != nil || len(l.segs) != 1 || l.segs[0] != g {
		l.mu.Unlock()
		return false // became the leader meanwhile: its index is its own
	}
	*g = s
	l.next = max(l.next, s.next)
	l.mu.Unlock()
	if headMoved {
		l.cache.drop(s.first)
	}
	if n == 0 {
		return false
	}
	l.raise(s.next)
	return true
}

// Replicated reports whether q's messages are kept by a Raft group: a
// quorum queue, or a stream in a cluster.
func (q *Queue) Replicated() bool {
	return q.xa.quorum || (q.st != nil && len(q.Members()) > 0)
}

// enterReplicated makes the log the key range id as the store holds it
// now (keys only are read, and each segment's first and last message):
// one segment if segBytes is 0 (a follower), else cut into segments of
// at most segBytes each, greedily from the first key (the leader).
func (l *streamLog) enterReplicated(id uint64, segBytes int64) {
	// Under fmu: a follower's refresh that read the store after this scan
	// must not have its result replaced by this older one.
	l.fmu.Lock()
	defer l.fmu.Unlock()
	var segs []*segment
	var cur *segment
	_ = l.st.MessageKeys(id, 0, func(seq uint64, size int64) bool {
		if cur == nil || (segBytes > 0 && cur.count > 0 && cur.bytes+size > segBytes) {
			cur = &segment{id: id, first: seq, next: seq}
			segs = append(segs, cur)
		}
		cur.count++
		cur.bytes += size
		cur.next = seq + 1
		return true
	})
	for _, s := range segs {
		if r, ok := l.readOne(*s, s.first); ok {
			_, s.firstTs, _ = decodeMessage(r.data)
		}
		if r, ok := l.readOne(*s, s.next-1); ok {
			_, s.lastTs, _ = decodeMessage(r.data)
		}
	}
	l.mu.Lock()
	if len(segs) == 0 {
		segs = []*segment{{id: id, first: l.next, next: l.next}}
	}
	l.segs = segs
	last := segs[len(segs)-1]
	l.next = max(l.next, last.next)
	l.repl = true
	l.mu.Unlock()
	l.raise(last.next)
}

// raise moves the durable watermark up to off (never down).
func (l *streamLog) raise(off uint64) {
	for {
		cur := l.durable.Load()
		if cur >= off || l.durable.CompareAndSwap(cur, off) {
			return
		}
	}
}

// streamLead makes this node the stream's writer: appends go through ml
// (the Raft group's log).
func (q *Queue) streamLead(ml MessageLog) {
	st := q.st
	st.log.enterReplicated(q.id, st.a.segBytes)
	// Under q.mu, which forward holds to publish to the remote, and the
	// log's lock, which appends hold: the publishes the proxy had not
	// sent are appended first, in order, and every later one after them.
	q.mu.Lock()
	old := q.remoteLocked()
	q.setRole(leadRole(ml, LogState{}))
	st.log.mu.Lock()
	st.log.ml = ml
	var failed []HeldPublish
	now := nowNano()
	for _, h := range handBack(old, st.enqueueLater) {
		takeForwardedWriter(h.Msg)
		if w := h.Msg.writer; w != nil && st.log.duplicateLocked(w) {
			st.log.afterTailLocked(h.Done) // a named producer's resend
			continue
		}
		if _, err := st.log.appendLocked(encodeMessage(h.Msg, now, nil), now, st.a.segBytes, h.Msg.writer, h.Done); err != nil {
			failed = append(failed, h)
			continue
		}
		st.log.noteWriterLocked(h.Msg.writer)
	}
	st.log.mu.Unlock()
	st.log.fireWaiters(nil)
	q.mu.Unlock()
	for _, h := range failed {
		go h.Done(errNotLeader)
	}
	if old != nil {
		old.Close()
	}
	st.start()
	st.stopFollowing()
	st.wakeWaiting()
}

// enqueueLater appends a publish a proxy took after it handed its held
// ones back.
func (st *stream) enqueueLater(m *Message, done func(error)) {
	go func() {
		if accepted, _, _ := st.enqueue(m, nil, done, nowNano(), nil); !accepted {
			done(errNotLeader)
		}
	}()
}

// streamFollow is the part of BecomeProxy a stream needs: publishes are
// forwarded to the leader (the queue's proxy role), reads stay local, the store is
// watched for what the group commits.
func (st *stream) streamFollow() {
	st.log.enterReplicated(st.q.id, 0)
	st.log.mu.Lock()
	st.log.ml = nil
	st.log.forgetWritersLocked() // it may hold appends the group never committed
	st.log.mu.Unlock()
	st.log.fireWaiters(errNotLeader)
	st.mu.Lock()
	if st.followStop == nil && !st.closed.Load() {
		stop := make(chan struct{})
		st.followStop = stop
		go st.follow(stop)
	}
	st.mu.Unlock()
	st.wakeWaiting()
}

func (st *stream) stopFollowing() {
	st.mu.Lock()
	if st.followStop != nil {
		close(st.followStop)
		st.followStop = nil
	}
	st.mu.Unlock()
}

// follow raises the watermark to what the node's store holds.
func (st *stream) follow(stop chan struct{}) {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	l := st.log
	for tick := 0; ; tick++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// The head (retention's range deletes) once a second: finding
		// the first key may step over many deleted ones.
		if l.followStore(st.q.id, tick%50 == 0) {
			st.onDurable()
		}
	}
}

// forward sends a publish to the leader (a follower's stream).
func (st *stream) forward(m *Message, done func(error)) (accepted, stored, refused bool) {
	q := st.q
	// Under q.mu, so that streamLead takes back what the remote holds
	// with no publish slipping in behind.
	q.mu.Lock()
	r := q.remoteLocked()
	if r == nil {
		q.mu.Unlock()
		if !st.log.following() {
			return st.enqueue(m, nil, done, nowNano(), nil) // this node leads now
		}
		if done != nil {
			return false, false, true // no leader known: a nack
		}
		return false, false, false
	}
	q.counters.publish.Add(1)
	confirm := done != nil
	if !confirm {
		done = func(error) {}
	}
	wait := publishRemote(r, m, done)
	q.mu.Unlock()
	if wait != nil {
		wait() // the leader's back-pressure, with no lock held
	}
	return true, confirm, false
}

// following reports whether the log is a clustered stream's that another
// node leads.
func (l *streamLog) following() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.repl && l.ml == nil
}
