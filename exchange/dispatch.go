package exchange

// enqueue is called by VHost.publish for a routed message. data is the
// encoded record if the message is to be stored. It returns false if the
// queue refused the message.
func (q *Queue) enqueue(m *Message, data []byte, done func(error), now int64, batch *Batch) (accepted, stored, refused bool) {
	if q.st != nil {
		return q.st.enqueue(m, data, done, now, batch)
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return false, false, false
	}
	if p := q.proxy(); p != nil {
		q.counters.publish.Add(1)
		confirm := done != nil && q.storesMessage(m)
		if !confirm {
			done = func(error) {}
		}
		// Handed over under q.mu (ordered with the role's changes);
		// the owner's back-pressure is waited for after it (STYLE 14).
		wait := publishRemote(p.r, m, done)
		q.mu.Unlock()
		if wait != nil {
			wait()
		}
		return true, confirm, false
	}
	if q.dropAbove > 0 && q.ready.n >= int(q.dropAbove) && !m.Props.Persistent() {
		// At most once, and the consumers are that far behind.
		q.counters.dropBehind.Add(1)
		q.vh.counters.dropBehind.Add(1)
		q.mu.Unlock()
		return true, false, false
	}
	e := entry{msg: m, seq: q.takeSeq()}
	if data != nil && q.storesMessage(m) {
		e.stored = true
	}
	if !q.cmdAdmit(e) {
		q.unlock()
		return false, false, true
	}
	q.counters.publish.Add(1)
	if m.rec != nil && !q.gated() && m.held < maxHeld {
		// This queue's hold on a reusable message (one Publish paid for
		// already, if it reaches several queues). A stored one too: the
		// store took a copy (data), and paging it out drops the entry
		// with its hold, leaving the message to the GC.
		if m.prepaid > 0 {
			m.prepaid--
		} else {
			m.holds.Add(1)
		}
		m.held++
		e.own = true
	}
	q.cmdEnqueue(e, data, done)
	q.batch = batch
	q.dispatchLocked(now)
	q.batch = nil
	q.scheduleExpiry(now)
	q.unlock()
	return true, e.stored, false
}

// dispatchLocked delivers ready messages to consumers with credit.
func (q *Queue) dispatchLocked(now int64) {
	// A gated queue's uncommitted messages (pending) wait for LogApplied.
	for q.ready.n > q.pendingCount() && len(q.consumers) > 0 {
		c := q.pickConsumer()
		if c == nil {
			return
		}
		e, ok := q.cmdTake(now)
		if !ok {
			if !c.noAck && c.limit != nil {
				c.limit.release(1)
			}
			return
		}
		q.countDeliver(false, c.noAck, e.deliveries)
		q.observeWait(c.proto, &e, now)
		if c.noAck {
			q.dropStored(&e)
		}
		d := Delivery{Queue: q, Consumer: c, Msg: e.msg, Seq: q.toDelivery(e.seq), Redelivered: e.deliveries > 1, Batch: q.batch}
		var more, done bool
		if c.copier != nil {
			more, done = c.copier.DeliverCopy(d)
		} else {
			more = c.sink.Deliver(d)
		}
		// A sink that keeps the message pins it: the hold stays.
		e.own = e.own && (done || c.settler)
		if !c.noAck {
			q.cmdDeliveredAt(e, c, now)
		} else if e.own {
			e.msg.Release()
		}
		if !more {
			c.blocked = true
		}
	}
	if q.ready.n > 0 {
		q.cmdExpire(now)
	}
}

// pickConsumer chooses the next consumer round-robin among those of the
// highest priority that can take a message. It acquires the consumer's
// channel limit credit.
func (q *Queue) pickConsumer() *Consumer {
	cs := q.consumers
	if q.a.sac {
		if cs[0].canTake() {
			return cs[0]
		}
		return nil
	}
	for start := 0; start < len(cs); {
		end := start + 1
		for end < len(cs) && cs[end].priority == cs[start].priority {
			end++
		}
		size := end - start
		for k := 0; k < size; k++ {
			i := start + (int(q.rr)+k)%size
			if cs[i].canTake() {
				q.rr = int32((int(q.rr) + k + 1) % size)
				return cs[i]
			}
		}
		start = end
	}
	return nil
}
