package exchange

// Get takes one message (basic.get). With noAck false the message stays
// unacked until Ack or Reject. It is Fetch without Fetch's error (ok
// false then too).
func (q *Queue) Get(noAck bool) (Delivery, bool) {
	d, ok, _ := q.Fetch(noAck)
	return d, ok
}

// Fetch is basic.get: it takes one message; ok false with a nil error
// when the queue is empty. It never answers empty for want of an
// answer: on a proxy whose owner does not answer (its node is gone, a
// quorum queue's leader is being elected) it waits, at most
// getOwnerWait, for the queue's owner to change (a new leader located,
// or this node leading it) and asks again, and then fails with a
// KindResourceError error (a channel error: the client may retry).
func (q *Queue) Fetch(noAck bool) (Delivery, bool, error) {
	if q.st != nil {
		return Delivery{}, false, nil // refused by the front ends first (CheckGet)
	}
	q.mu.Lock()
	if r := q.remoteLocked(); r != nil {
		q.mu.Unlock()
		return q.getRemote(r, noAck)
	}
	d, ok := q.getLocked(noAck)
	return d, ok, nil
}

// getLocked is Get on a queue whose messages are here. Called under
// q.mu, which it releases.
func (q *Queue) getLocked(noAck bool) (Delivery, bool) {
	now := nowNano()
	q.lastUsed = now
	e, ok := q.cmdTake(now)
	if !ok {
		q.counters.getEmpty.Add(1)
		q.vh.counters.getEmpty.Add(1)
		q.unlock()
		return Delivery{}, false
	}
	q.countDeliver(true, noAck, e.deliveries)
	q.observeWait(ProtoAMQP, &e, now)
	e.own = false // the caller keeps the message: the hold stays
	if noAck {
		q.dropStored(&e)
	} else {
		q.cmdDeliveredAt(e, nil, now)
	}
	d := Delivery{Queue: q, Msg: e.msg, Seq: q.toDelivery(e.seq), Redelivered: e.deliveries > 1, Remaining: q.ready.n - q.pendingCount()}
	q.scheduleExpiry(now)
	q.unlock()
	return d, true
}

// Purge removes every ready message and returns how many.
func (q *Queue) Purge() int {
	if q.st != nil {
		return 0 // refused by PurgeQueue
	}
	q.mu.Lock()
	if r := q.remoteLocked(); r != nil {
		q.mu.Unlock()
		n, err := r.Purge()
		if err != nil {
			q.vh.b.log.Warn("remote purge failed", "queue", q.name, "err", err)
		}
		return n
	}
	n := q.cmdPurge()
	q.unlock()
	return n
}
