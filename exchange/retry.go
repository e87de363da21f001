package exchange

import (
	"hash/fnv"
	"time"
)

// Retry with back-off (x-retry-delays / policy retry-delays, schedargs.go).
//
// A message of a queue with retry delays that a consumer rejects or nacks
// without requeue (Reject with requeue false), or whose consumer went away
// without settling it (Abandon: its channel or connection died, or the
// consumer timeout closed it), leaves the queue and comes back to it, at its
// tail, after the next delay of the list, with header x-retry-count telling
// how many times it was retried. Once every delay was used, the next
// rejection dead-letters it as a queue without retries would (reason
// "rejected", x-death as usual); an abandoned message past its last retry
// is dead-lettered too.
//
// Messages waiting for their retry are held by the vhost's retry delayer
// (delayed.go): in the store, keyed by due time, with a bounded window in
// memory. The retry is appended to the store before the queue's copy is
// deleted, in that order in the store's writer, so a crash in between
// leaves the message in both (it is retried and also still queued) rather
// than in neither. Transient messages are not kept across a restart.
//
// A quorum queue led here holds its retries in its own Raft group instead
// (retryhold.go), so that a waiting retry survives the loss of any
// minority of its members, as its messages do.
const RetryCountHeader = "x-retry-count"

// retryStoreID is the store keyspace of a vhost's retries: bit 63 set,
// which no queue id (a counter, or random below 2^62 in a cluster) and no
// delayed exchange's id (a queue id) has.
func retryStoreID(vhost string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(vhost))
	return 1<<63 | h.Sum64()>>1
}

// retrier is the vhost's retry delayer, started on first use.
func (v *VHost) retrier() *delayer {
	if d := v.retryD.Load(); d != nil {
		return d
	}
	v.retryMu.Lock()
	defer v.retryMu.Unlock()
	if d := v.retryD.Load(); d != nil {
		return d
	}
	d := newRetryDelayer(v)
	d.start()
	v.retryD.Store(d)
	return d
}

func newRetryDelayer(v *VHost) *delayer {
	return newDelayerOf(v, "", retryStoreID(v.name), true, true)
}

// MessagesRetrying is how many messages of the vhost wait for a retry.
func (v *VHost) MessagesRetrying() int64 {
	if d := v.retryD.Load(); d != nil {
		return d.s.Held()
	}
	return 0
}

// retryLocked schedules e's retry if q has a delay left for it; false if
// not (the caller dead-letters it). q.mu is held.
func (q *Queue) retryLocked(e entry) bool {
	if q.a.sched.retry == "" {
		return false
	}
	delays := q.RetryDelays()
	n, _ := asInt64(e.msg.Props.Headers[RetryCountHeader])
	if n < 0 || n >= int64(len(delays)) {
		return false
	}
	m := e.msg
	nm := &Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body}
	h := make(Table, len(m.Props.Headers)+1)
	for k, val := range m.Props.Headers {
		h[k] = val
	}
	h[RetryCountHeader] = n + 1
	nm.Props.Headers = h
	if l := q.leader(); l != nil && l.held.qid != 0 {
		if hl, ok := l.ml.(HoldLog); ok {
			q.holdRetryLocked(l, hl, &e, nm, delays[n]) // retryhold.go
			return true
		}
	}
	q.vh.retrier().schedule(nm, q.name, int64(delays[n]/time.Millisecond), nowNano(), nil)
	q.dropStored(&e)
	return true
}

// Abandon settles deliveries whose consumer went away without settling
// them (its channel or connection closed): with retry delays they are
// retried as rejected ones (and dead-lettered past the last delay);
// without, they are requeued, as Reject with requeue does.
func (q *Queue) Abandon(seqs []uint64) {
	q.mu.Lock()
	q.returnDeliveries(seqs, q.a.sched.retry == "") // ack.go
}
