package exchange

// Trim gives back the room an idle queue keeps for messages it no longer
// holds: the unacked set's ring and map once nothing is unacked, and the
// empty buffers of its ready list. A queue keeps that room while it is
// busy, so that delivering allocates nothing in steady state; a front end
// calls Trim when its consumer has gone idle (an MQTT connection parking,
// protocol/mqtt/park.go), so that a burst of deliveries to thousands of
// session queues leaves nothing behind. The next delivery grows the room
// again.
func (q *Queue) Trim() {
	q.mu.Lock()
	if q.st == nil && !q.deleted {
		q.unacked.trim()
		for i := range q.ready.levels {
			l := &q.ready.levels[i]
			l.head.shrink()
			l.tail.shrink()
		}
		q.ready.dropLanes()
	}
	q.mu.Unlock()
}

// trim forgets the ring and the map of an empty set.
func (s *unackedSet) trim() {
	if s.len() == 0 {
		s.ring, s.other = nil, nil
		s.base = s.hi
	}
}

// noArgs is the parsed arguments of a queue declared without any, which
// every such queue shares (a fleet's MQTT session queues): a Queue keeps
// its declared arguments beside the ones in effect, and the copy was a
// sixth of its size.
var noArgs = func() *queueArgs {
	a, err := parseQueueArgs(nil)
	if err != nil {
		panic(err)
	}
	return &a
}()

// sharedArgs is a, shared with other queues when it is noArgs; xa is
// read-only.
func sharedArgs(a queueArgs) *queueArgs {
	if a == *noArgs {
		return noArgs
	}
	return &a
}
