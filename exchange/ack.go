package exchange

import (
	"sort"
)

// Ack acknowledges a delivery.
func (q *Queue) Ack(seq uint64) {
	if q.st != nil {
		q.st.settle([]uint64{seq}, true)
		return
	}
	q.mu.Lock()
	if s, ok := q.fromDelivery(seq); ok {
		if u, ok := q.cmdSettle(s); ok {
			now := nowNano()
			q.observeAck(&u, now)
			if u.c != nil {
				q.dispatchLocked(now)
			}
		}
	}
	q.unlock()
}

// AckMany acknowledges several deliveries at once.
func (q *Queue) AckMany(seqs []uint64) {
	if q.st != nil {
		q.st.settle(seqs, true)
		return
	}
	q.mu.Lock()
	now := nowNano()
	for _, s := range seqs {
		if s, ok := q.fromDelivery(s); ok {
			if u, ok := q.cmdSettle(s); ok {
				q.observeAck(&u, now)
			}
		}
	}
	q.dispatchLocked(now)
	q.unlock()
}

// Delivery.Seq is the entry's seq stamped with the queue's epoch, which
// changes whenever the queue switches between holding its messages and
// proxying them (proxy.go): a delivery from before the switch can then
// never settle an entry of after it that happens to have the same seq.
// A standalone queue's epoch is 0, so its delivery seqs are its seqs.
const (
	epochShift = 48
	seqMask    = 1<<epochShift - 1
)

// toDelivery stamps seq with the current epoch.
func (q *Queue) toDelivery(seq uint64) uint64 { return q.epochNow()<<epochShift | seq&seqMask }

// fromDelivery is the entry seq of a delivery seq of the current epoch.
func (q *Queue) fromDelivery(d uint64) (uint64, bool) {
	if d>>epochShift != q.epochNow() {
		return 0, false
	}
	return d & seqMask, true
}

// Reject returns deliveries to the queue (requeue, to their original
// position, flagged redelivered) or drops them, dead-lettering them with
// reason "rejected" if the queue has a dead-letter exchange.
func (q *Queue) Reject(seqs []uint64, requeue bool) {
	if q.st != nil {
		q.st.settle(seqs, false) // nothing to requeue: credit back
		return
	}
	q.mu.Lock()
	if requeue {
		// Requeue in reverse so that inserts near the head stay cheap.
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] > seqs[j] })
	}
	q.returnDeliveries(seqs, requeue)
}

// returnDeliveries puts the deliveries seqs (those of the current epoch)
// back (requeue) or drops them (cmdReturn), dispatches and releases q.mu:
// the settle Reject and Abandon share. Called holding q.mu.
func (q *Queue) returnDeliveries(seqs []uint64, requeue bool) {
	for _, s := range seqs {
		if s, ok := q.fromDelivery(s); ok {
			q.cmdReturn(s, requeue)
		}
	}
	now := nowNano()
	q.dispatchLocked(now)
	q.scheduleExpiry(now)
	q.unlock()
}
