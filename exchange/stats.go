package exchange

import (
	"sync/atomic"
	"time"
)

// MsgStats are monotonically increasing message counters, as RabbitMQ's
// management API names them (message_stats). Rates are the business of
// whoever samples them (the web package).
type MsgStats struct {
	// Publish counts messages published: to the vhost, or, for a queue,
	// messages enqueued into it.
	Publish uint64
	// PublishIn counts messages published to an exchange; PublishOut the
	// messages it routed to at least one queue.
	PublishIn, PublishOut uint64
	// DropUnroutable counts published messages that reached no queue
	// and were dropped; ReturnUnroutable those returned to a publisher
	// that asked for it (PublishOpts.Mandatory).
	DropUnroutable, ReturnUnroutable uint64
	// DropBehind counts transient messages a queue dropped because its
	// at-most-once consumers were too far behind (ConsumeOpts.DropTransientAbove).
	DropBehind uint64
	// Deliver and DeliverNoAck count deliveries to consumers, with and
	// without acknowledgement; Get and GetNoAck those taken by basic.get;
	// GetEmpty the basic.get calls that found nothing.
	Deliver, DeliverNoAck, Get, GetNoAck, GetEmpty uint64
	// Ack counts acknowledged deliveries; Redeliver the deliveries that
	// were flagged redelivered.
	Ack, Redeliver uint64
}

// DeliverGet is the sum RabbitMQ shows as deliver_get.
func (s MsgStats) DeliverGet() uint64 {
	return s.Deliver + s.DeliverNoAck + s.Get + s.GetNoAck
}

// msgCounters are the atomics behind MsgStats: adding to one takes no lock
// and allocates nothing, so they sit on the per-message path.
type msgCounters struct {
	publish, publishIn, publishOut, dropUnroutable, dropBehind atomic.Uint64
	returnUnroutable                                           atomic.Uint64
	deliver, deliverNoAck, get, getNoAck, getEmpty             atomic.Uint64
	ack, redeliver                                             atomic.Uint64
}

func (c *msgCounters) load() MsgStats {
	return MsgStats{
		Publish: c.publish.Load(), PublishIn: c.publishIn.Load(), PublishOut: c.publishOut.Load(),
		DropUnroutable: c.dropUnroutable.Load(), DropBehind: c.dropBehind.Load(), ReturnUnroutable: c.returnUnroutable.Load(),
		Deliver: c.deliver.Load(), DeliverNoAck: c.deliverNoAck.Load(),
		Get: c.get.Load(), GetNoAck: c.getNoAck.Load(), GetEmpty: c.getEmpty.Load(),
		Ack: c.ack.Load(), Redeliver: c.redeliver.Load(),
	}
}

// queueCounters are a queue's msgCounters: only those a queue counts
// (72 bytes of every queue, not 104).
type queueCounters struct {
	publish, dropBehind                            atomic.Uint64
	deliver, deliverNoAck, get, getNoAck, getEmpty atomic.Uint64
	ack, redeliver                                 atomic.Uint64
}

func (c *queueCounters) load() MsgStats {
	return MsgStats{
		Publish: c.publish.Load(), DropBehind: c.dropBehind.Load(),
		Deliver: c.deliver.Load(), DeliverNoAck: c.deliverNoAck.Load(),
		Get: c.get.Load(), GetNoAck: c.getNoAck.Load(), GetEmpty: c.getEmpty.Load(),
		Ack: c.ack.Load(), Redeliver: c.redeliver.Load(),
	}
}

// countDeliver records a delivery (to a consumer, or by get) of a message
// that was delivered n times so far, in the queue and its vhost.
func (q *Queue) countDeliver(get, noAck bool, n uint32) {
	var qc, vc *atomic.Uint64
	switch {
	case get && noAck:
		qc, vc = &q.counters.getNoAck, &q.vh.counters.getNoAck
	case get:
		qc, vc = &q.counters.get, &q.vh.counters.get
	case noAck:
		qc, vc = &q.counters.deliverNoAck, &q.vh.counters.deliverNoAck
	default:
		qc, vc = &q.counters.deliver, &q.vh.counters.deliver
	}
	qc.Add(1)
	vc.Add(1)
	if n > 1 {
		q.counters.redeliver.Add(1)
		q.vh.counters.redeliver.Add(1)
	}
}

// MsgStats returns the queue's message counters.
func (q *Queue) MsgStats() MsgStats { return q.counters.load() }

// MsgStats returns the exchange's message counters (PublishIn,
// PublishOut).
func (x *Exchange) MsgStats() MsgStats { return x.counters.load() }

// MsgStats returns the vhost's message counters, totals over its
// exchanges and queues, including deleted ones.
func (v *VHost) MsgStats() MsgStats { return v.counters.load() }

// QueueStatus is a snapshot of a queue's state for management.
type QueueStatus struct {
	Ready, Unacked, Consumers int
	// ReadyBytes is the body size of the ready messages.
	ReadyBytes int64
	// ReadyRAM and BytesRAM count the ready messages held in memory and
	// their body bytes; the others are paged out to the store.
	ReadyRAM int
	BytesRAM int64
	// Memory estimates the bytes the queue holds: the bodies and message
	// headers it keeps in memory, ready and unacked.
	Memory int64
	// Deleted reports that the queue is gone.
	Deleted bool
	// Owner is the connection that owns an exclusive queue, else nil.
	Owner any
	// LastUsed is when the queue was last used (unix nanoseconds), for
	// idle_since.
	LastUsed int64
	// HeadEnqueued is when the next message to deliver was enqueued
	// (unix nanoseconds), HeadTimestamp its timestamp property (zero if
	// it has none): both zero when the queue has no ready message or its
	// head is paged out and not read back yet (headage.go).
	HeadEnqueued  int64
	HeadTimestamp time.Time
}

// Status returns a snapshot of the queue's state.
//
// For a proxy (its messages live on another node) Ready and Consumers are
// the owning node's counts as last fetched: a fetch starts in the
// background when they are older than remoteCountTTL, so management
// listings never wait for the network.
func (q *Queue) Status() QueueStatus {
	if q.st != nil {
		return q.st.status()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	st := QueueStatus{Ready: q.ready.n, Unacked: q.unacked.len(), Consumers: len(q.consumers),
		ReadyBytes: q.ready.bytes, Deleted: q.deleted, Owner: q.owner, LastUsed: q.lastUsed}
	// The ready list counts each message in memory with its overhead.
	st.HeadEnqueued, st.HeadTimestamp = q.ready.headInMemory()
	st.ReadyRAM = q.ready.inMemory()
	st.BytesRAM = q.ready.mem - int64(st.ReadyRAM)*msgOverhead
	st.Memory = q.ready.mem + int64(st.Unacked)*msgOverhead
	q.unacked.each(func(_ uint64, u *unackedEntry) {
		if u.e.msg != nil {
			st.Memory += int64(len(u.e.msg.Body))
		}
	})
	if p := q.proxy(); p != nil {
		now := nowNano()
		if now-p.at > int64(remoteCountTTL) && !p.fetching {
			select {
			case remoteCounts <- struct{}{}:
				p.fetching = true
				go q.fetchRemoteCount(p)
			default: // enough fetches under way: a later look refreshes it
			}
		}
		st.Ready, st.Consumers = p.ready, p.consumers
	}
	return st
}

// remoteCountTTL is how long a proxy's copy of the owner's counts is used.
const remoteCountTTL = 2 * time.Second

// remoteCounts bounds the owners' counts fetched at once, so that listing
// many proxies does not send a request per queue to the other nodes at once.
var remoteCounts = make(chan struct{}, 8)

func (q *Queue) fetchRemoteCount(p *proxyRole) {
	n, c, err := p.r.Count()
	<-remoteCounts
	q.mu.Lock()
	defer q.mu.Unlock()
	p.fetching = false
	p.at = nowNano()
	if err == nil {
		p.ready, p.consumers = n, c
	}
}

// ConsumerInfo describes one consumer, for management.
type ConsumerInfo struct {
	Tag         string
	AckRequired bool
	Exclusive   bool
	Priority    int
	Prefetch    int
	// Active is false for a waiting single-active-consumer candidate.
	Active bool
	// SingleActive: a member of a stream's single-active group (the
	// management API's activity_status single_active or waiting).
	SingleActive bool
}

// Consumers lists the queue's consumers, highest priority first.
func (q *Queue) Consumers() []ConsumerInfo {
	if q.st != nil {
		return q.st.consumers()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]ConsumerInfo, 0, len(q.consumers))
	for i, c := range q.consumers {
		out = append(out, ConsumerInfo{Tag: c.tag, AckRequired: !c.noAck, Exclusive: c.excl,
			Priority: int(c.priority), Prefetch: c.prefetch, Active: !q.a.sac || i == 0})
	}
	return out
}

// ownerCountWait is how long a passive declare of a proxy waits for the
// owner's counts before it answers with the ones last fetched.
const ownerCountWait = time.Second

// ownerCounts returns the owner's ready and consumer counts of proxy q:
// fresh when the owner answers within ownerCountWait, else those last
// fetched; known is false when q is not a proxy or no count is known.
// The question runs on a goroutine of its own (one of remoteCounts), with
// no lock held: an owner that does not answer (a frozen node) holds that
// goroutine until the Remote's own deadline, and not the caller.
func (q *Queue) ownerCounts() (ready, consumers int, known bool) {
	q.mu.Lock()
	p := q.proxy()
	if p == nil {
		q.mu.Unlock()
		return 0, 0, false
	}
	ready, consumers, known = p.ready, p.consumers, p.at != 0
	q.mu.Unlock()
	select {
	case remoteCounts <- struct{}{}:
	default:
		return ready, consumers, known // enough questions under way
	}
	type counts struct {
		n, c int
		err  error
	}
	res := make(chan counts, 1)
	go func() {
		n, c, err := p.r.Count()
		<-remoteCounts
		if err == nil {
			q.mu.Lock()
			p.ready, p.consumers, p.at = n, c, nowNano()
			q.mu.Unlock()
		}
		res <- counts{n, c, err}
	}()
	t := time.NewTimer(ownerCountWait)
	defer t.Stop()
	select {
	case r := <-res:
		if r.err == nil {
			return r.n, r.c, true
		}
	case <-t.C:
	}
	return ready, consumers, known
}
