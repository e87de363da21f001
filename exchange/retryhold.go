package exchange

import (
	"github.com/trident-broker/trident/exchange/sched"
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

// holdRetryLocked holds the retry nm of e for delay in l's log. q.mu is
// held.
func (q *Queue) holdRetryLocked(l *leaderRole, hl HoldLog, e *entry, nm *Message, delay time.Duration) {
	h := &l.held
	now := nowNano()
	due := uint64(now/int64(time.Millisecond) + delay.Milliseconds())
	h.ctr++
	key := sched.Key(due, h.ctr) // as a delayer's: due ms, a counter below
	hl.HoldMessage(q.id, key, encodeMessage(nm, now, nil), nil)
	q.dropStored(e)
	i := len(h.keys)
	for i > 0 && h.keys[i-1] > key {
		i--
	}
	h.keys = append(h.keys, 0)
	copy(h.keys[i+1:], h.keys[i:])
	h.keys[i] = key
	q.armHoldsLocked(h)
}

// loadHoldsLocked reads the held keys of a quorum queue that became local
// with leader role l.
func (q *Queue) loadHoldsLocked(l *leaderRole, heldQID uint64) {
	h := &l.held
	h.stop()
	h.qid = heldQID
	if heldQID == 0 {
		return
	}
	_ = q.vh.b.store.MessageKeys(heldQID, 0, func(k uint64, _ int64) bool {
		h.keys = append(h.keys, k)
		h.ctr = max(h.ctr, k&sched.SeqMask)
		return true
	})
	q.armHoldsLocked(h)
}

func (q *Queue) armHoldsLocked(h *heldRetries) {
	if len(h.keys) == 0 {
		return
	}
	d := time.Until(time.UnixMilli(sched.Due(h.keys[0])))
	if h.timer == nil {
		h.timer = time.AfterFunc(d, q.fireHolds)
	} else {
		h.timer.Reset(d)
	}
}

// heldRecheck is how soon a due hold whose record is not in the store yet
// (its log entry not applied here yet) is looked for again.
const heldRecheck = 50 * time.Millisecond

// fireHolds puts the due held messages back into the queue.
func (q *Queue) fireHolds() {
	q.mu.Lock()
	l := q.leader()
	if l == nil || q.deleted || l.held.qid == 0 {
		q.mu.Unlock()
		return
	}
	hl, ok := l.ml.(HoldLog)
	if !ok {
		q.mu.Unlock()
		return
	}
	h := &l.held
	nowMs := uint64(time.Now().UnixMilli())
	var due []uint64
	for len(h.keys) > 0 && h.keys[0]>>sched.SeqBits <= nowMs {
		due = append(due, h.keys[0])
		h.keys = h.keys[1:]
	}
	heldQID := h.qid
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
		same := q.role == queueRole(l)
		q.mu.Unlock()
		if same {
			hl.ReleaseMessage(q.id, k)
		}
	}
	q.mu.Lock()
	if q.role == queueRole(l) && !q.deleted {
		// Not in the store yet: its hold is still being committed.
		h.keys = append(later, h.keys...)
		if len(later) > 0 && h.timer != nil {
			h.timer.Reset(heldRecheck)
		} else {
			q.armHoldsLocked(h)
		}
	}
	q.mu.Unlock()
}
