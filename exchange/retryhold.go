package exchange

import (
	"time"
)

// A quorum queue's retries wait in its own Raft group, not in the node's
// retry delayer (retry.go): a message rejected for a retry is held aside
// (HoldLog.HoldMessage, replicated to every member, which keeps it in its
// store under LogState.HeldQID) and deleted from the queue, in that order
// in the log, so the group holds it in one place or both, never neither.
// The leader keeps only the held messages' keys in memory (due time in
// the high bits) and a timer for the earliest; when one falls due it reads
// the message from the store, publishes it back into the queue and
// releases it, again in that order, so a leader that dies in between
// leaves it held: the next leader, which reads the held keys when it
// takes over, puts it back (at least once, never lost).

// HoldLog is implemented by a MessageLog that can keep messages aside: a
// quorum queue's Raft group.
type HoldLog interface {
	HoldMessage(qid, key uint64, data []byte, done func(error))
	ReleaseMessage(qid, key uint64)
}

// holdCtrBits are the low bits of a hold key: a counter under the due time
// in milliseconds.
const holdCtrBits = 22

// holdRetryLocked holds the retry nm of e for delay. q.mu is held.
func (q *Queue) holdRetryLocked(hl HoldLog, e *entry, nm *Message, delay time.Duration) {
	now := nowNano()
	due := uint64(now/int64(time.Millisecond) + delay.Milliseconds())
	q.holdCtr++
	key := due<<holdCtrBits | q.holdCtr&(1<<holdCtrBits-1)
	hl.HoldMessage(q.id, key, encodeMessage(nm, now, nil), nil)
	q.dropStored(e)
	i := len(q.holds)
	for i > 0 && q.holds[i-1] > key {
		i--
	}
	q.holds = append(q.holds, 0)
	copy(q.holds[i+1:], q.holds[i:])
	q.holds[i] = key
	q.armHoldsLocked()
}

// loadHoldsLocked reads the held keys of a quorum queue that became local.
func (q *Queue) loadHoldsLocked(heldQID uint64) {
	q.stopHoldsLocked()
	q.heldQID = heldQID
	if heldQID == 0 {
		return
	}
	_ = q.vh.b.store.MessageKeys(heldQID, 0, func(k uint64, _ int64) bool {
		q.holds = append(q.holds, k)
		q.holdCtr = max(q.holdCtr, k&(1<<holdCtrBits-1))
		return true
	})
	q.armHoldsLocked()
}

// stopHoldsLocked forgets the held keys (q is no longer the leader, or is
// gone): the group keeps the messages for whoever leads next.
func (q *Queue) stopHoldsLocked() {
	if q.holdTimer != nil {
		q.holdTimer.Stop()
		q.holdTimer = nil
	}
	q.holds, q.heldQID = nil, 0
}

func (q *Queue) armHoldsLocked() {
	if len(q.holds) == 0 {
		return
	}
	d := time.Until(time.UnixMilli(int64(q.holds[0] >> holdCtrBits)))
	if q.holdTimer == nil {
		q.holdTimer = time.AfterFunc(d, q.fireHolds)
	} else {
		q.holdTimer.Reset(d)
	}
}

// heldRecheck is how soon a due hold whose record is not in the store yet
// (its log entry not applied here yet) is looked for again.
const heldRecheck = 50 * time.Millisecond

// fireHolds puts the due held messages back into the queue.
func (q *Queue) fireHolds() {
	q.mu.Lock()
	hl, ok := q.log.(HoldLog)
	if !ok || q.remote != nil || q.deleted || q.heldQID == 0 {
		q.mu.Unlock()
		return
	}
	nowMs := uint64(time.Now().UnixMilli())
	var due []uint64
	for len(q.holds) > 0 && q.holds[0]>>holdCtrBits <= nowMs {
		due = append(due, q.holds[0])
		q.holds = q.holds[1:]
	}
	heldQID, log := q.heldQID, q.log
	q.mu.Unlock()

	st := q.vh.b.store
	var later []uint64
	for _, k := range due {
		var data []byte
		if err := st.ReadMessages(heldQID, k, func(got uint64, d []byte) bool {
			if got == k {
				data = append([]byte(nil), d...)
			}
			return false
		}); err != nil || data == nil {
			later = append(later, k)
			continue
		}
		m, _, err := decodeMessage(data)
		if err != nil {
			q.vh.b.noteUnreadable(q, 1)
			q.vh.b.log.Error("corrupt held retry dropped", "queue", q.name, "err", err)
			hl.ReleaseMessage(q.id, k)
			continue
		}
		now := nowNano()
		m.ts = now
		if ms, ok := parseExpiration(m.Props.Expiration); ok {
			m.expiresAt = now + ms*int64(time.Millisecond)
			q.vh.anyExpiring.Store(true)
		}
		if _, err := q.vh.publish(m, PublishOpts{Queue: q.name}, now, nil); err != nil {
			q.vh.b.log.Debug("due retry not routed", "queue", q.name, "err", err)
		}
		q.mu.Lock()
		same := q.log == log
		q.mu.Unlock()
		if same {
			hl.ReleaseMessage(q.id, k)
		}
	}
	q.mu.Lock()
	if q.log == log && q.remote == nil && !q.deleted {
		// Not in the store yet: its hold is still being committed.
		q.holds = append(later, q.holds...)
		if len(later) > 0 && q.holdTimer != nil {
			q.holdTimer.Reset(heldRecheck)
		} else {
			q.armHoldsLocked()
		}
	}
	q.mu.Unlock()
}
