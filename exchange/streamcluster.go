package exchange

import "time"

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
// In a cluster the log is one key range (the stream's id), not segments;
// what a follower's store holds is found by looking at its keys every
// followEvery (the watermark readers stop at). Offsets are dense (each
// leader goes on after the highest key its store holds). Retention
// (x-max-age, x-max-length-bytes) is the leader's: it deletes the oldest
// messages through the group's log, by message rather than by segment
// (there are no segments to drop); followers see their first key move. A
// node that is not a member has no copy: its consumers read the stream
// through a member (streamremote.go), its publishes are forwarded.

const followEvery = 20 * time.Millisecond

// retainBatch bounds the messages one retention pass of a clustered stream
// deletes.
const retainBatch = 100_000

// leads reports whether the log is a clustered stream's that this node leads.
func (l *streamLog) leads() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.repl && l.ml != nil
}

// retainReplicated deletes, through the group's log, the oldest messages
// while the log holds more than maxBytes (0: no limit; the size of a
// message is the log's average) or they are older than cutoff (0: none).
func (l *streamLog) retainReplicated(id uint64, maxBytes, cutoff int64) {
	l.mu.Lock()
	if len(l.segs) != 1 || l.ml == nil {
		l.mu.Unlock()
		return
	}
	s := *l.segs[0]
	ml := l.ml
	l.mu.Unlock()
	n := int64(s.next - s.first)
	if n <= 1 {
		return
	}
	avg := max(s.bytes/max(s.count, 1), 1)
	var drop int64
	if maxBytes > 0 && n*avg > maxBytes {
		drop = n - maxBytes/avg
	}
	if cutoff > 0 && s.firstTs < cutoff {
		// Read forward from the head to the first message young enough.
		off := s.first + uint64(drop)
		for off < s.next-1 && int64(off-s.first) < retainBatch {
			recs, next, err := l.readRange(off, 256, 1<<62)
			if err != nil || len(recs) == 0 {
				break
			}
			young := false
			for _, r := range recs {
				if _, ts, err := decodeMessage(r.data); err == nil && ts >= cutoff {
					off, young = r.off, true
					break
				}
				off = r.off + 1
			}
			if young {
				break
			}
			off = max(off, next)
		}
		drop = max(drop, int64(off-s.first))
	}
	drop = min(drop, n-1, retainBatch) // never the newest message
	if drop <= 0 {
		return
	}
	cut := s.first + uint64(drop)
	for off := s.first; off < cut; off++ {
		ml.DeleteMessage(id, off)
	}
	var firstTs int64
	if r, ok := l.readOne(segment{id: id, first: cut, next: s.next}, cut); ok {
		_, firstTs, _ = decodeMessage(r.data)
	}
	l.mu.Lock()
	if len(l.segs) == 1 {
		g := l.segs[0]
		g.first = max(g.first, cut)
		g.count = int64(g.next - g.first)
		g.bytes = g.count * avg
		if firstTs != 0 {
			g.firstTs = firstTs
		}
	}
	l.mu.Unlock()
	l.cache.drop(cut)
}

// followFirst moves a follower's first offset up to its store's first key
// (the leader's retention deleted the messages before it).
func (l *streamLog) followFirst(id uint64) {
	var first uint64
	found := false
	_ = l.st.MessageKeys(id, 0, func(seq uint64, _ int64) bool {
		first, found = seq, true
		return false
	})
	if !found {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) != 1 || first <= l.segs[0].first {
		return
	}
	g := l.segs[0]
	avg := g.bytes / max(g.count, 1)
	g.first = first
	g.count = int64(g.next - g.first)
	g.bytes = g.count * avg
	l.cache.drop(first)
}

// Replicated reports whether q's messages are kept by a Raft group: a
// quorum queue, or a stream in a cluster.
func (q *Queue) Replicated() bool {
	return q.xa.quorum || (q.st != nil && len(q.Members()) > 0)
}

// enterReplicated makes the log the single key range id, as the store
// holds it now (keys only are read).
func (l *streamLog) enterReplicated(id uint64) {
	s := &segment{id: id}
	first := true
	_ = l.st.MessageKeys(id, 0, func(seq uint64, size int64) bool {
		if first {
			s.first, first = seq, false
		}
		s.count++
		s.bytes += size
		s.next = seq + 1
		return true
	})
	if r, ok := l.readOne(*s, s.first); ok && s.count > 0 {
		_, s.firstTs, _ = decodeMessage(r.data)
	}
	if r, ok := l.readOne(*s, s.next-1); ok && s.count > 0 {
		_, s.lastTs, _ = decodeMessage(r.data)
	}
	l.mu.Lock()
	if s.count == 0 {
		s.first, s.next = l.next, l.next
	}
	l.segs = []*segment{s}
	l.next = max(l.next, s.next)
	l.repl = true
	l.mu.Unlock()
	l.raise(s.next)
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
	st.log.enterReplicated(q.id)
	// Under q.mu, which forward holds to publish to the remote, and the
	// log's lock, which appends hold: the publishes the proxy had not
	// sent are appended first, in order, and every later one after them.
	q.mu.Lock()
	old := q.remote
	q.remote, q.log = nil, ml
	st.log.mu.Lock()
	st.log.ml = ml
	var failed []HeldPublish
	now := nowNano()
	for _, h := range handBack(old, st.enqueueLater) {
		if _, err := st.log.appendLocked(encodeMessage(h.Msg, now, nil), now, st.a.segBytes, h.Done); err != nil {
			failed = append(failed, h)
		}
	}
	st.log.mu.Unlock()
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
		if accepted, _, _ := st.enqueue(m, nil, done, nowNano()); !accepted {
			done(errNotLeader)
		}
	}()
}

// streamFollow is the part of BecomeProxy a stream needs: publishes are
// forwarded to the leader (q.remote), reads stay local, the store is
// watched for what the group commits.
func (st *stream) streamFollow() {
	st.log.enterReplicated(st.q.id)
	st.log.mu.Lock()
	st.log.ml = nil
	st.log.mu.Unlock()
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
		if tick%50 == 0 {
			l.followFirst(st.q.id)
		}
		from := l.durable.Load()
		var n, bytes int64
		next := from
		_ = l.st.MessageKeys(st.q.id, from, func(seq uint64, size int64) bool {
			n++
			bytes += size
			next = seq + 1
			return true
		})
		if next == from {
			continue
		}
		var lastTs int64
		if r, ok := l.readOne(segment{id: st.q.id, first: next - 1, next: next}, next-1); ok {
			_, lastTs, _ = decodeMessage(r.data)
		}
		l.mu.Lock()
		if len(l.segs) == 1 {
			s := l.segs[0]
			if s.count == 0 {
				s.first = from
				s.firstTs = lastTs
			}
			s.count += n
			s.bytes += bytes
			s.next = max(s.next, next)
			s.lastTs = max(s.lastTs, lastTs)
		}
		l.next = max(l.next, next)
		l.mu.Unlock()
		l.raise(next)
		st.onDurable()
	}
}

// forward sends a publish to the leader (a follower's stream).
func (st *stream) forward(m *Message, done func(error)) (accepted, stored, refused bool) {
	q := st.q
	// Under q.mu, so that streamLead takes back what the remote holds
	// with no publish slipping in behind.
	q.mu.Lock()
	r := q.remote
	if r == nil {
		q.mu.Unlock()
		if !st.log.following() {
			return st.enqueue(m, nil, done, nowNano()) // this node leads now
		}
		if done != nil {
			return false, false, true // no leader known: a nack
		}
		return false, false, false
	}
	q.counters.publish.Add(1)
	if done != nil {
		r.Publish(m, done)
	} else {
		r.Publish(m, func(error) {})
	}
	q.mu.Unlock()
	return true, done != nil, false
}

// following reports whether the log is a clustered stream's that another
// node leads.
func (l *streamLog) following() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.repl && l.ml == nil
}
