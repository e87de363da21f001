package exchange

import "time"

// A queue becomes a proxy when its messages live on another node (see
// cluster.go) and local again when they come here (a quorum queue whose
// leadership moved to this node). In either direction the messages held
// in memory are forgotten, never settled: they belong to the owner, which
// redelivers what was not acknowledged to it, flagged redelivered.

// remoteWindowDefault is the prefetch asked upstream for a local consumer
// without a prefetch limit; remoteWindowMax caps the sum.
const (
	remoteWindowDefault = 200
	remoteWindowMax     = 2000
)

// BecomeProxy makes q reach its messages through r. The consumers stay
// attached and are fed from r.
func (q *Queue) BecomeProxy(r Remote) {
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		r.Close()
		return
	}
	old := q.remoteLocked()
	var held []HeldPublish
	if old != nil && old != r {
		// Publishes the old proxy had not sent go to the new one.
		held = handBack(old, r.Publish)
	}
	q.forgetLocked()
	q.setRole(&proxyRole{r: r})
	for _, h := range held {
		r.Publish(h.Msg, h.Done)
	}
	q.consumeRemoteLocked()
	q.unlock()
	if old != nil && old != r {
		old.Close()
	}
	if q.st != nil {
		q.st.streamFollow() // streamcluster.go
	}
}

// BecomeLocal makes q hold its messages here, in log, whose FSM has
// written them to the node's store under q's keys (a nil log: in the
// node's store itself, a classic queue coming home): st says how many
// there are per priority level. None is read now: like a classic queue after a
// restart, each level starts as mid alone and is read a window at a time.
// Every message already there is flagged redelivered when read (the
// previous owner may have delivered it), with the returns st counts.
func (q *Queue) BecomeLocal(log MessageLog, st LogState) {
	if q.st != nil {
		q.streamLead(log) // streamcluster.go
		return
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return
	}
	old := q.remoteLocked()
	q.forgetLocked()
	q.setRole(leadRole(log, st))
	var maxSeq uint64
	for _, g := range st.Groups {
		_, s, _ := splitStoreKey(g.MaxKey)
		maxSeq = max(maxSeq, s)
		if g.Count <= 0 {
			continue
		}
		ln := int(g.Top)
		if ln >= q.ready.nLevels() {
			q.vh.b.log.Error("replicated messages above the queue's priorities skipped", "queue", q.name, "level", ln, "messages", g.Count)
			continue
		}
		first, ok := q.firstKey(storeKey(ln, 0, false))
		if l, _, _ := splitStoreKey(first); !ok || l != ln {
			q.vh.b.noteUnreadable(q, int(g.Count))
			q.vh.b.log.Error("replicated messages missing from the store", "queue", q.name, "level", ln, "messages", g.Count)
			continue
		}
		q.cmdRestore(ln, first, int(g.Count), g.Bytes, s)
	}
	q.cmdSeqsUsed(maxSeq) // the seqs of emptied groups too
	q.cmdFlagRestored(maxSeq, nil)
	q.coldState().logStored.Store(q.nextSeq - 1)
	q.startGateLocked(log)
	if lr := q.leader(); lr != nil {
		q.loadHoldsLocked(lr, st.HeldQID)
	}
	now := nowNano()
	// What the proxy had not sent yet is the first this leader takes.
	for _, h := range handBack(old, refuseLater) {
		q.enqueueHeldLocked(h, now)
	}
	q.cmdExpire(now)
	q.dispatchLocked(now)
	q.scheduleExpiry(now)
	q.unlock()
	if old != nil {
		old.Close()
	}
}

// enqueueHeldLocked takes a publish a proxy handed back (its publish
// was counted when the proxy took it).
func (q *Queue) enqueueHeldLocked(h HeldPublish, now int64) {
	e := entry{msg: h.Msg, seq: q.takeSeq()}
	e.stored = q.storesMessage(h.Msg)
	if !q.cmdAdmit(e) {
		go h.Done(errRefusedHeld)
		return
	}
	var data []byte
	done := h.Done
	if e.stored {
		data = encodeMessage(h.Msg, now, nil)
	} else {
		done = nil
		go h.Done(nil)
	}
	q.cmdEnqueue(e, data, done)
}

// refuseLater is the HandBack callback of a classic queue's proxy: a
// publish reaches a proxy only through its role under q.mu, and the
// hand-back replaces that role in the same hold, so none comes; were one to,
// it is nacked (the publisher republishes), never lost.
func refuseLater(_ *Message, done func(error)) { go done(errRefusedHeld) }

// forgetLocked drops the ready and unacked messages held in memory without
// settling them anywhere and starts a new epoch. Consumers get their
// credit back; their later acks of forgotten deliveries are ignored.
func (q *Queue) forgetLocked() {
	c := q.coldState()
	c.epoch = (c.epoch + 1) & (1<<(64-epochShift) - 1)
	q.cmdForget()
}

// consumeRemoteLocked sizes the upstream consumer of a proxy to its local
// consumers: none stops it.
func (q *Queue) consumeRemoteLocked() {
	p := q.proxy()
	if p == nil || q.deleted {
		return
	}
	r := p.r
	w := 0
	for _, c := range q.consumers {
		if c.prefetch > 0 {
			w += c.prefetch
		} else {
			w += remoteWindowDefault
		}
	}
	w = min(w, remoteWindowMax)
	if w == p.window {
		return
	}
	p.window = w
	if w == 0 {
		r.StopConsuming()
		// Unacked upstream, so the owner requeues them.
		q.cmdDropBuffered()
		return
	}
	r.Consume(w, func(m *Message, tag uint64, redelivered bool) { q.pushRemote(r, m, tag, redelivered) },
		func() { q.resetRemote(r) })
}

// pushRemote takes a delivery from r's consumer into the ready list.
func (q *Queue) pushRemote(r Remote, m *Message, tag uint64, redelivered bool) {
	q.mu.Lock()
	if q.remoteLocked() != r || q.deleted {
		q.mu.Unlock()
		return // r is closed; its channel requeues the message
	}
	q.cmdBuffer(m, tag, redelivered)
	q.dispatchLocked(nowNano())
	q.unlock()
}

// resetRemote forgets the ready messages r pushed before it lost its
// upstream consumer: the owner redelivers them.
func (q *Queue) resetRemote(r Remote) {
	q.mu.Lock()
	if q.remoteLocked() == r {
		q.cmdDropBuffered()
	}
	q.unlock()
}

// getOwnerWait bounds how long basic.get on a proxy waits for an owner
// that answers (Fetch): a quorum queue's failover takes well under a
// second when the leader's process died (cluster/groups, peerdown.go)
// and two to four seconds when its node was cut off.
const getOwnerWait = 5 * time.Second

// getOwnerPoll is how often a waiting basic.get looks for a new owner;
// getOwnerRetry how often it asks the same one again.
const (
	getOwnerPoll  = 20 * time.Millisecond
	getOwnerRetry = 250 * time.Millisecond
)

// getRemote is basic.get on a proxy: Fetch. It runs without q.mu; the
// wait for an owner has Fetch's caller as owner and getOwnerWait as
// deadline.
func (q *Queue) getRemote(r Remote, noAck bool) (Delivery, bool, error) {
	deadline := time.Now().Add(getOwnerWait)
	for {
		m, tag, redelivered, remaining, ok, err := r.Get(noAck)
		if err == nil {
			if !ok {
				q.counters.getEmpty.Add(1)
				q.vh.counters.getEmpty.Add(1)
				return Delivery{}, false, nil
			}
			return q.gotRemote(m, tag, redelivered, remaining, noAck), true, nil
		}
		// The owner did not answer: wait for another, or for it again.
		asked := time.Now()
		for {
			if time.Now().After(deadline) {
				q.vh.b.log.Warn("remote basic.get failed", "queue", q.name, "err", err, "waited", getOwnerWait)
				return Delivery{}, false, errorf(KindResourceError,
					"basic.get on queue '%s' in vhost '%s': its leader did not answer within %v (%v)", q.name, q.vh.name, getOwnerWait, err)
			}
			time.Sleep(getOwnerPoll)
			q.mu.Lock()
			if q.deleted {
				q.mu.Unlock()
				return Delivery{}, false, errorf(KindNotFound, "no queue '%s' in vhost '%s'", q.name, q.vh.name)
			}
			nr := q.remoteLocked()
			if nr == nil { // this node owns it now
				d, ok := q.getLocked(noAck)
				return d, ok, nil
			}
			q.mu.Unlock()
			if nr != r || time.Since(asked) >= getOwnerRetry {
				r = nr
				break
			}
		}
	}
}

// gotRemote records a message basic.get took from the owner.
func (q *Queue) gotRemote(m *Message, tag uint64, redelivered bool, remaining int, noAck bool) Delivery {
	q.mu.Lock()
	e := entry{msg: m, seq: q.takeSeq(), up: tag, deliveries: 1}
	if redelivered {
		e.deliveries = 2
	}
	q.countDeliver(true, noAck, e.deliveries)
	if !noAck {
		q.cmdDelivered(e, nil)
	}
	d := Delivery{Queue: q, Msg: m, Seq: q.toDelivery(e.seq), Redelivered: redelivered, Remaining: remaining}
	q.mu.Unlock()
	return d
}
