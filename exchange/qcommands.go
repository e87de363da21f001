package exchange

import (
	"time"
)

// cmdAdmit decides whether the queue takes e: false if it refuses it
// (x-overflow reject-publish*, e dead-lettered for reject-publish-dlx).
func (s *queueState) cmdAdmit(e entry) bool {
	if s.full(len(e.msg.Body)) {
		switch s.a.overflow {
		case OverflowRejectPublish:
			return false
		case OverflowRejectPublishDLX:
			e.stored = false // never appended
			s.deadLetter(e, "maxlen")
			return false
		}
	}
	return true
}

// cmdEnqueue appends an admitted e; data (if e is stored) is its record,
// appended to the message log before anything else happens to e, so that
// it may be paged out at once (a refill then reads it back). done is
// called once it is durable. drop-head then makes room by dropping the
// oldest messages, e itself possibly.
func (s *queueState) cmdEnqueue(e entry, data []byte, done func(error)) {
	if e.stored {
		s.issueAppend(&e, data, done)
	}
	s.ready.push(e)
	s.cmdTrim()
}

// cmdTrim drops the oldest messages while the queue is over its length
// limits (x-overflow drop-head). A gated queue counts and drops only
// committed messages (commit.go).
func (s *queueState) cmdTrim() {
	for s.overLimit() {
		old, ok := s.ready.popOldest()
		if !ok {
			break
		}
		s.deadLetter(old, "maxlen")
	}
}

func (s *queueState) full(size int) bool {
	if s.a.maxLen >= 0 && int64(s.ready.n) >= s.a.maxLen {
		return true
	}
	return s.a.maxLenBytes >= 0 && s.ready.bytes+int64(size) > s.a.maxLenBytes
}

// overLimit reports whether the committed ready messages (all of them
// but for a gated queue) pass the queue's length limits.
func (s *queueState) overLimit() bool {
	r := &s.ready
	pn, pb := s.pendingLen()
	return (s.a.maxLen >= 0 && int64(r.n-pn) > s.a.maxLen) ||
		(s.a.maxLenBytes >= 0 && r.bytes-pb > s.a.maxLenBytes)
}

// deadline is when e expires (unix ns), 0 if never.
func (s *queueState) deadline(e *entry) int64 {
	var d int64
	if s.a.messageTTL >= 0 {
		d = e.msg.ts + s.a.messageTTL*int64(time.Millisecond)
	}
	if x := e.msg.expiresAt; x != 0 && (d == 0 || x < d) {
		d = x
	}
	return d
}

// cmdExpire drops expired messages from the head.
func (s *queueState) cmdExpire(now int64) {
	if !s.env.envPages() {
		return // the owning node expires its messages
	}
	if s.a.messageTTL < 0 && !s.env.envExpiring() {
		return // nothing can expire: no need to look at (or read) the head
	}
	for {
		e := s.ready.peek()
		if e == nil {
			return
		}
		// A message is expired once its deadline has passed, not at it:
		// with a TTL of 0 it still reaches a consumer that can take it
		// in the same publish, as in RabbitMQ.
		if d := s.deadline(e); d == 0 || d >= now {
			return
		}
		old, _ := s.ready.pop()
		s.deadLetter(old, "expired")
	}
}

// cmdTake removes the next live message for delivery.
func (s *queueState) cmdTake(now int64) (entry, bool) {
	s.cmdExpire(now)
	e, ok := s.ready.pop()
	if ok {
		e.deliveries++
	}
	return e, ok
}

// cmdDelivered records e as delivered to c (nil for basic.get) and
// unacked until settled. A delivery that needs no ack is done with at
// once instead (dropStored).
func (s *queueState) cmdDelivered(e entry, c *Consumer) { s.cmdDeliveredAt(e, c, 0) }

// cmdDeliveredAt is cmdDelivered of a delivery made at now (unix ns), the
// start of its deliver-to-ack latency.
func (s *queueState) cmdDeliveredAt(e entry, c *Consumer, now int64) {
	if c != nil {
		c.unacked++
	}
	s.unacked.put(e.seq, unackedEntry{e: e, c: c, at: now})
}

// cmdSettle acknowledges seq.
func (s *queueState) cmdSettle(seq uint64) (unackedEntry, bool) {
	u, ok := s.unacked.take(seq)
	if !ok {
		return u, false
	}
	s.fx.acks++
	s.releaseCredit(u.c)
	s.dropStored(&u.e)
	if u.e.own && !u.e.stored {
		u.e.msg.Release() // its copying consumer is done with it
	}
	return u, true
}

// cmdReturn puts an unacked message back (requeue) or drops it.
func (s *queueState) cmdReturn(seq uint64, requeue bool) bool {
	u, ok := s.unacked.take(seq)
	if !ok {
		return false
	}
	s.releaseCredit(u.c)
	switch {
	case u.e.up != 0:
		// Settled where the message lives (requeue or dead-letter there).
		arg := uint64(0)
		if requeue {
			arg = 1
		}
		s.fx.op(storeOp{kind: opRemoteNack, key: u.e.up, arg: arg})
	case !requeue:
		if !s.env.envRetry(u.e) { // retry.go
			s.deadLetter(u.e, "rejected")
		}
	case s.a.deliveryLimit >= 0 && int64(u.e.deliveries) > s.a.deliveryLimit:
		s.deadLetter(u.e, "delivery_limit")
	default:
		if u.e.stored {
			s.fx.op(storeOp{kind: opReturn, key: u.e.seq})
		}
		s.ready.insert(u.e)
	}
	return true
}

// cmdPurge drops every ready message.
func (s *queueState) cmdPurge() int {
	n := s.ready.n
	all := s.ready.clear(true)
	for i := range all {
		s.dropStored(&all[i])
	}
	return n
}

func (s *queueState) releaseCredit(c *Consumer) {
	if c == nil {
		return
	}
	c.unacked--
	if c.limit != nil && c.limit.release(1) {
		m := s.fx.more()
		m.kick = appendLimit(m.kick, c.limit)
	}
}

func appendLimit(l []*Limit, x *Limit) []*Limit {
	for _, e := range l {
		if e == x {
			return l
		}
	}
	return append(l, x)
}

// dropStored is done with e: its record is deleted, or the node that
// holds it told (a proxy's delivery).
func (s *queueState) dropStored(e *entry) {
	if e.up != 0 {
		s.fx.op(storeOp{kind: opRemoteAck, key: e.up})
		e.up = 0
	}
	if e.stored {
		s.issueDelete(s.storeKey(e))
		e.stored = false
	}
}
