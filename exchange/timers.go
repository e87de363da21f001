package exchange

import (
	"time"
)

// scheduleExpiry arms the TTL timer for the head message, if any.
func (q *Queue) scheduleExpiry(now int64) {
	if q.a.messageTTL < 0 && !q.vh.anyExpiring.Load() {
		return
	}
	e := q.ready.peek()
	if e == nil {
		return
	}
	d := q.deadline(e)
	if d == 0 {
		return
	}
	c := q.coldState()
	if c.expAt != 0 && c.expAt <= d {
		return
	}
	c.expAt = d
	wait := time.Duration(d - now)
	if c.expTimer == nil {
		c.expTimer = time.AfterFunc(wait, q.onExpiryTimer)
	} else {
		c.expTimer.Reset(wait)
	}
}

func (q *Queue) onExpiryTimer() {
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return
	}
	q.coldState().expAt = 0
	now := nowNano()
	q.cmdExpire(now)
	q.dispatchLocked(now)
	q.scheduleExpiry(now)
	q.unlock()
}

// armIdleTimer implements x-expires: the queue is deleted once it has had
// no consumers and no basic.get or redeclare for that long.
func (q *Queue) armIdleTimer() {
	d := time.Duration(q.a.expires) * time.Millisecond
	q.coldState().idleTimer = time.AfterFunc(d, q.onIdleTimer)
}

func (q *Queue) onIdleTimer() {
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return
	}
	if q.a.expires <= 0 {
		q.mu.Unlock() // a policy change removed expires
		return
	}
	idle := time.Duration(nowNano() - q.lastUsed)
	ttl := time.Duration(q.a.expires) * time.Millisecond
	if len(q.consumers) > 0 || idle < ttl {
		wait := ttl - idle
		if len(q.consumers) > 0 {
			wait = ttl
		}
		q.coldState().idleTimer.Reset(wait)
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	q.vh.deleteQueueBySelf(q)
}

// touch records a use of the queue (redeclare), for x-expires.
func (q *Queue) touch() {
	q.mu.Lock()
	q.lastUsed = nowNano()
	q.mu.Unlock()
}
