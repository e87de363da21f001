package exchange

// Committed delivery: a quorum queue led here delivers only what its Raft
// group has committed.
//
// The leader appends a publish to the group's log (AppendMessage) and puts
// it in its ready list at once, under q.mu, so that seqs, priorities and
// paging stay as for a classic queue. Until the log reports the append
// applied by this node's FSM (LogApplied, which a majority's commit
// precedes) the message is uncommitted: the publish may still fail (the
// leader loses its leadership, done(err)), and then no consumer may have
// seen it. RabbitMQ's quorum queues likewise deliver only what their state
// machine applied.
//
// The log applies appends in the order of their seqs (they are queued
// under q.mu, in seq order), so what is committed is every seq up to a
// watermark, q.released. In each lane (priority level) the uncommitted
// messages are the newest, after every committed one: a requeued message
// was delivered, so committed, and mid (paged out) holds only committed
// messages (canPage). An uncommitted message is not in the queue yet for
// anything a client or another queue can see:
//
//   - it is not delivered nor given to basic.get; the next message to
//     deliver is the front of the highest priority lane whose front is
//     committed;
//   - it does not expire: its deadline (from its publish time, as ever) is
//     looked at once it is committed, so a message whose TTL ran out while
//     it was being committed (x-message-ttl 0 among them) expires then,
//     dead-lettered if the queue has a DLX, and never reaches a consumer;
//   - drop-head (x-max-length, x-max-length-bytes with overflow drop-head)
//     counts only committed messages and drops only committed ones: the
//     limit is enforced as each watermark rise commits more, which is what
//     applying the publishes one by one would have done;
//   - reject-publish and reject-publish-dlx count uncommitted messages too
//     (the admission is decided at publish, before the commit: counting
//     them keeps concurrent publishes from overshooting the limit);
//   - dead-lettering and x-delivery-limit need a delivery or an expiry or a
//     drop, so they see only committed messages;
//   - a purge drops uncommitted messages too: its deletes follow their
//     appends in the log, as the purge follows the publishes.
//
// The ready count (Stats, management) includes uncommitted messages;
// basic.get-ok's message count does not.
//
// Only a log that reports its commits (CommitLog) gates deliveries: a
// MessageLog that never calls LogApplied (the node's Store, tests) would
// otherwise hold every message back for ever. Classic queues, proxies and
// streams never gate: their hot path pays one branch on q.gated.
//
// Locks: LogApplied is called from the log's own goroutine holding none
// of the log's locks, and takes q.mu (Queue.mu → the log's locks is the
// order AppendMessage follows). It delivers what it releases under q.mu,
// as a publish does, with one Batch so that each consumer's writer is
// woken once per release, and dead-letters after releasing q.mu.

// CommitLog is implemented by a MessageLog that reports, through the
// queue's LogApplied, each append its FSM has applied: a quorum queue's
// Raft group. A queue that becomes local with a CommitLog whose
// ReportsApplied is true delivers only what it reported.
type CommitLog interface {
	ReportsApplied() bool
}

// pendingMsg is an uncommitted ready message: its seq and body size.
type pendingMsg struct {
	seq  uint64
	size int64
}

// pendingList is the uncommitted ready messages of a gated queue, in seq
// order, with their count and bytes.
type pendingList struct {
	buf   []pendingMsg
	head  int
	n     int
	bytes int64
}

func (p *pendingList) push(seq uint64, size int64) {
	if p.head > 0 && p.head == len(p.buf) {
		p.buf, p.head = p.buf[:0], 0
	} else if p.head > 1024 && p.head*2 > len(p.buf) {
		p.buf = append(p.buf[:0], p.buf[p.head:]...)
		p.head = 0
	}
	p.buf = append(p.buf, pendingMsg{seq: seq, size: size})
	p.n++
	p.bytes += size
}

// release forgets the messages with seqs up to seq: they are committed.
func (p *pendingList) release(seq uint64) {
	for p.head < len(p.buf) && p.buf[p.head].seq <= seq {
		p.bytes -= p.buf[p.head].size
		p.head++
		p.n--
	}
	if p.n == 0 {
		p.reset()
	}
}

func (p *pendingList) reset() {
	if cap(p.buf) > 4096 {
		p.buf = nil
	} else {
		p.buf = p.buf[:0]
	}
	p.head, p.n, p.bytes = 0, 0, 0
}

// startGateLocked makes q, becoming local with log, gate its deliveries
// if log reports its commits; everything up to the current seq counts as
// committed (it was read from the FSM's store).
func (q *Queue) startGateLocked(log MessageLog) {
	cl, ok := log.(CommitLog)
	q.cmdGate(ok && cl.ReportsApplied())
}

// LogApplied tells q that its log's FSM has applied every message up to
// key (and those before it): unless the FSM writes behind
// (LogState.StoredSeparately, then LogStored says so), they are in the
// store and may be paged out, and a tail that grew past its buffer while
// they were being committed is paged out now. A gated queue (a
// CommitLog's) releases them: it drops the committed messages past a
// drop-head limit, expires those whose deadline has passed, delivers to
// the consumers that can take them and arms the expiry timer. The log
// calls it as its batches are applied, from its own goroutine, without
// q's lock, before it reports the appends done.
func (q *Queue) LogApplied(key uint64) {
	_, seq, _ := splitStoreKey(key)
	q.mu.Lock()
	l := q.leader()
	if l == nil || q.deleted || (!l.storedSep && !q.raiseStored(seq)) {
		q.mu.Unlock()
		return
	}
	q.spillTails()
	if !q.cmdRelease(seq) {
		q.unlock() // the spilled tails' writes
		return
	}
	now := nowNano()
	var b Batch
	q.batch = &b
	q.dispatchLocked(now)
	q.batch = nil
	q.scheduleExpiry(now)
	q.unlock()
	b.Flush()
}

// LogStored tells q, leading from a log whose FSM writes behind, that
// every message up to key (and those before it) is in the store or
// deleted: they may be paged out. It may run on the FSM's goroutine, so
// it never waits for q.mu (Raft must not wait for the queue: a publisher
// may hold q.mu while the log waits for Raft): it pages out a tail that
// waited for this if it gets the lock at once, and otherwise leaves that
// to the next batch's LogApplied. An idle queue's FSM reports from a
// timer, when nobody holds the lock.
func (q *Queue) LogStored(key uint64) {
	_, seq, _ := splitStoreKey(key)
	if !q.raiseStored(seq) || !q.mu.TryLock() {
		return
	}
	if q.leader() != nil && !q.deleted {
		q.spillTails()
	}
	q.unlock()
}

// spillTails pages out every lane's tail that passed its buffer (or any
// tail under memory pressure), as far as canPage allows: what a log's
// commits or writes let the state page now.
func (s *queueState) spillTails() {
	r := &s.ready
	for i := range r.levels {
		if l := &r.levels[i]; l.tail.n > tailMsgs || l.tailBytes > tailBytes || (l.tail.n > 0 && r.pressure()) {
			r.spill(i, l)
		}
	}
}

// raiseStored raises logStored to seq and reports whether it rose.
func (q *Queue) raiseStored(seq uint64) bool {
	c := q.coldState()
	for {
		cur := c.logStored.Load()
		if seq <= cur {
			return false
		}
		if c.logStored.CompareAndSwap(cur, seq) {
			return true
		}
	}
}
