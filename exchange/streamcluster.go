package exchange

import (
	"github.com/trident-broker/trident/exchange/streamlog"
	"time"
)

// Clustered streams. In a cluster a stream is declared, like a quorum
// queue, with members (x-initial-cluster-size, default 3) and is a Raft
// group through the same machinery (cluster/quorum): the member that
// leads it appends through the group's log (a confirm means a majority
// committed the message and the leader's FSM wrote it to its store); every
// member's FSM writes the committed messages to its node's store under the
// stream's id, keyed by offset, and a consumer on any member reads its own
// node's store. A member that was down catches up through Raft (log
// entries, or a snapshot) when it comes back.
//
// In a cluster the log is one key range of the store (the stream's id).
// The leader cuts it into segments in memory, as a standalone stream
// cuts its log into key ranges: a segment rolls when the next message
// would take it past x-stream-max-segment-size-bytes (record sizes: the
// encoded message as appended, or the store's size estimate of each key
// when a node becomes the leader and cuts the range it finds again,
// greedily from its first offset). Those boundaries are the leader's
// alone; a follower's log is one segment from its store's first key,
// found by looking at its keys every followEvery (the watermark readers
// stop at).
//
// Retention (x-max-age, x-max-length-bytes) is the leader's, by whole
// segments as in a standalone stream (never the one appended to): one
// pass removes the head segments [from, to) with one range delete
// through the group's log (RangeLog), which every member's FSM applies
// as one range delete of its store. So every member drops the same head,
// and a follower's first offset jumps from one of the leader's
// boundaries to another. Only segments the leader's FSM has applied in
// full are removed (below its durable watermark), so that the count and
// bytes the op carries, read from the leader's store, are what every
// member holds there. After a leader change the new leader's boundaries
// start at the first retained offset, which is the old leader's last
// boundary; past it they match the old ones as far as the store's size
// estimates match the appended sizes (exact for records below the
// store's value threshold, within a few bytes above it). Offsets are
// dense (each leader goes on after the highest key its store holds). A
// node that is not a member has no copy: its consumers read the stream
// through a member (streamremote.go), its publishes are forwarded.

const followEvery = 20 * time.Millisecond

// Replicated reports whether q's messages are kept by a Raft group: a
// quorum queue, or a stream in a cluster.
func (q *Queue) Replicated() bool {
	return q.xa.quorum || (q.st != nil && len(q.Members()) > 0)
}

// enterReplicated makes the log the key range id as the store holds it
// now (keys only are read, and each segment's first and last message):
// streamLead makes this node the stream's writer: appends go through ml
// (the Raft group's log).
func (q *Queue) streamLead(ml MessageLog) {
	st := q.st
	st.log.EnterReplicated(q.id, st.a.segBytes)
	// Under q.mu, which forward holds to publish to the remote, and the
	// log's lock, which appends hold: the publishes the proxy had not
	// sent are appended first, in order, and every later one after them.
	q.mu.Lock()
	old := q.remoteLocked()
	q.setRole(leadRole(ml, LogState{}))
	st.log.Lock()
	st.log.SetLeaderLocked(ml)
	var failed []HeldPublish
	now := nowNano()
	for _, h := range handBack(old, st.enqueueLater) {
		takeForwardedWriter(h.Msg)
		if w := h.Msg.writer; w != nil && st.log.DuplicateLocked(w) {
			st.log.AfterTailLocked(h.Done) // a named producer's resend
			continue
		}
		if _, err := st.log.AppendLocked(encodeMessage(h.Msg, now, nil), now, st.a.segBytes, h.Msg.writer, h.Done); err != nil {
			failed = append(failed, h)
			continue
		}
		st.log.NoteWriterLocked(h.Msg.writer)
	}
	st.log.Unlock()
	st.log.FireWaiters(nil)
	q.mu.Unlock()
	for _, h := range failed {
		go h.Done(streamlog.ErrNotLeader)
	}
	if old != nil {
		old.Close()
	}
	st.start()
	st.stopFollowing()
	st.wakeWaiting()
}

// enqueueLater appends a publish a proxy took after it handed its held
// ones back.
func (st *stream) enqueueLater(m *Message, done func(error)) {
	go func() {
		if accepted, _, _ := st.enqueue(m, nil, done, nowNano(), nil); !accepted {
			done(streamlog.ErrNotLeader)
		}
	}()
}

// streamFollow is the part of BecomeProxy a stream needs: publishes are
// forwarded to the leader (the queue's proxy role), reads stay local, the store is
// watched for what the group commits.
func (st *stream) streamFollow() {
	st.log.EnterReplicated(st.q.id, 0)
	st.log.Lock()
	st.log.SetLeaderLocked(nil)
	st.log.ForgetWritersLocked() // it may hold appends the group never committed
	st.log.Unlock()
	st.log.FireWaiters(streamlog.ErrNotLeader)
	st.mu.Lock()
	if st.followStop == nil && !st.closed.Load() {
		stop := make(chan struct{})
		st.followStop = stop
		go st.follow(stop)
	}
	st.mu.Unlock()
	st.wakeWaiting()
}

func (st *stream) stopFollowing() {
	st.mu.Lock()
	if st.followStop != nil {
		close(st.followStop)
		st.followStop = nil
	}
	st.mu.Unlock()
}

// follow raises the watermark to what the node's store holds.
func (st *stream) follow(stop chan struct{}) {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	l := st.log
	for tick := 0; ; tick++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// The head (retention's range deletes) once a second: finding
		// the first key may step over many deleted ones.
		if l.FollowStore(st.q.id, tick%50 == 0) {
			st.onDurable()
		}
	}
}

// forward sends a publish to the leader (a follower's stream).
func (st *stream) forward(m *Message, done func(error)) (accepted, stored, refused bool) {
	q := st.q
	// Under q.mu, so that streamLead takes back what the remote holds
	// with no publish slipping in behind.
	q.mu.Lock()
	r := q.remoteLocked()
	if r == nil {
		q.mu.Unlock()
		if !st.log.Following() {
			return st.enqueue(m, nil, done, nowNano(), nil) // this node leads now
		}
		if done != nil {
			return false, false, true // no leader known: a nack
		}
		return false, false, false
	}
	q.counters.publish.Add(1)
	confirm := done != nil
	if !confirm {
		done = func(error) {}
	}
	wait := publishRemote(r, m, done)
	q.mu.Unlock()
	if wait != nil {
		wait() // the leader's back-pressure, with no lock held
	}
	return true, confirm, false
}
