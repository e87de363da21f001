package exchange

// Queue as its state's queueEnv (qstate.go), and the carrying out of the
// state's effects.

func (q *Queue) envWindow() (int64, int64) {
	return q.vh.b.windowMsgs.Load(), q.vh.b.windowBytes.Load()
}

func (q *Queue) envPressure() bool {
	b := q.vh.b
	return b.memPressure.Load() || b.memUsed.Load() > b.memBudget.Load()
}

func (q *Queue) envPages() bool { return q.proxy() == nil }

func (q *Queue) envCanPage(seq uint64) bool { return q.role.canPage(q, seq) }

func (q *Queue) envReturns(key uint64) uint32 { return q.role.returns(key) }

func (q *Queue) envConsumers() int { return len(q.consumers) }

func (q *Queue) envExpiring() bool { return q.vh.anyExpiring.Load() }

func (q *Queue) envRead(from uint64, fn func(uint64, []byte) bool) error {
	q.flush()
	return q.vh.b.store.ReadMessages(q.id, from, fn)
}

func (q *Queue) envKeys(from uint64, fn func(uint64, int64) bool) error {
	q.flush()
	return q.vh.b.store.MessageKeys(q.id, from, fn)
}

func (q *Queue) envRetry(e entry) bool { return q.retryLocked(e) }

// flush carries out, under q.mu, the effects of the state's commands that
// must keep their order: the store writes and a proxy's settles, then
// the counters, the memory gauge and what reading the store ran into.
func (q *Queue) flush() {
	f := &q.fx
	if len(f.ops) > 0 {
		ops := f.ops
		f.ops = f.ops[:0] // a write's done may not come back here, but be safe
		for i := range ops {
			q.carryOut(&ops[i])
			ops[i] = storeOp{}
		}
	}
	if f.acks != 0 {
		q.counters.ack.Add(f.acks)
		q.vh.counters.ack.Add(f.acks)
		f.acks = 0
	}
	if f.memDelta != 0 {
		q.vh.b.memUsed.Add(f.memDelta)
		f.memDelta = 0
	}
	if f.expiring {
		q.vh.anyExpiring.Store(true)
		f.expiring = false
	}
	if f.rare != nil && len(f.rare.notes) > 0 {
		for _, n := range f.rare.notes {
			if n.missing > 0 {
				q.vh.b.noteUnreadable(q, n.missing)
				q.vh.b.log.Error("stored messages missing", "vhost", q.vh.name, "queue", q.name, "missing", n.missing)
			} else if n.err != nil && n.seq == 0 {
				q.vh.b.log.Error("reading a queue's messages failed", "vhost", q.vh.name, "queue", q.name, "err", n.err)
			} else {
				q.vh.b.noteUnreadable(q, 1)
				q.vh.b.log.Error("corrupt stored message dropped", "vhost", q.vh.name, "queue", q.name, "seq", n.seq, "err", n.err)
			}
		}
		f.rare.notes = f.rare.notes[:0]
	}
}

func (q *Queue) carryOut(o *storeOp) {
	switch o.kind {
	case opAppend:
		q.messageLog().AppendMessage(q.id, o.key, o.data, o.done)
	case opPage:
		q.vh.b.store.AppendMessage(q.id, o.key, o.data, nil)
		if o.pooled != nil && cap(o.data) <= 64<<10 {
			*o.pooled = o.data[:0]
			encodePool.Put(o.pooled)
		}
	case opDelete:
		q.messageLog().DeleteMessage(q.id, o.key)
	case opDeleteRange:
		l := q.leader()
		if l == nil {
			q.vh.b.store.DeleteMessages(q.id, o.key, o.arg)
			return
		}
		// A replicated log deletes message by message (its followers
		// keep their own keys of the queue).
		left := o.count
		_ = q.vh.b.store.MessageKeys(q.id, o.key, func(k uint64, _ int64) bool {
			if k >= o.arg {
				return false
			}
			l.ml.DeleteMessage(q.id, k)
			left--
			return left > 0
		})
	case opReturn:
		if rl, ok := q.messageLog().(ReturnLog); ok {
			rl.ReturnMessage(q.id, o.key)
		}
	case opRemoteAck:
		if r := q.remoteLocked(); r != nil {
			r.Ack(o.key)
		}
	case opRemoteNack:
		if r := q.remoteLocked(); r != nil {
			r.Nack(o.key, o.arg == 1)
		}
	}
}
