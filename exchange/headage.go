package exchange

import "time"

// headInMemory is the next message to deliver's enqueue time (unix ns)
// and timestamp property, if it is in memory. It reads nothing from the
// store: a head paged out (a backlog right after a restart) shows as
// unknown (0) until the queue reads it back to deliver it.
func (r *readyList) headInMemory() (int64, time.Time) {
	i := r.frontLane()
	if i < 0 {
		return 0, time.Time{}
	}
	l := &r.levels[i]
	var e *entry
	switch {
	case l.head.n > 0:
		e = l.head.peek()
	case l.mid == 0 && l.tail.n > 0:
		e = l.tail.peek()
	}
	if e == nil || e.msg == nil {
		return 0, time.Time{}
	}
	return e.msg.ts, e.msg.Props.Timestamp
}
