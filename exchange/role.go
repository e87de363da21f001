package exchange

import "time"

// A Queue is the handle that VHost, the front ends and the management API
// hold: its name, flags, bindings, counters and consumers, and the state
// machine of its messages (queueState, qstate.go). Where those messages
// live is the queue's role, one of three types, exactly one at a time:
//
//   - localRole: in the node's store. A classic queue on its home node
//     (every queue when standalone), and a quorum queue until the cluster
//     attaches it.
//   - leaderRole: in a replicated log (a quorum queue's or a stream's
//     Raft group) that this node leads. The state's writes go to the log;
//     its FSM writes them to the node's store, and only what it stored
//     may be paged out (queueCold.logStored); a quorum queue delivers only
//     what the log committed (commit.go) and keeps its delayed retries in
//     the log (retryhold.go).
//   - proxyRole: on another node, reached through a Remote. Publishes,
//     gets and purges go there; the ready list buffers what the remote
//     consumer pushed, and settles go back as the state's remote ops.
//
// The role changes only under q.mu, by BecomeLocal (→ leaderRole) and
// BecomeProxy (→ proxyRole), which first forget what the state held in
// memory (proxy.go). The state's commands are the same in every role; a
// role only decides where their writes go (carryOut, qenv.go) and what
// the queue asks of the place its messages live.
type queueRole interface {
	// log is where the state's message writes go. A proxy's state
	// issues none (its entries are never stored): the node's store.
	log(q *Queue) MessageLog
	// canPage reports whether message seq is in the node's store, or
	// will be by the time it is read.
	canPage(q *Queue, seq uint64) bool
	// returns is how often the log saw message key come back (0 unless
	// the log counts returns across failovers).
	returns(key uint64) uint32
	// leave stops what the role runs (timers); q is switching role or
	// being deleted. Under q.mu.
	leave()
}

// localRole: the messages are in the node's store.
type localRole struct{}

func (localRole) log(q *Queue) MessageLog     { return q.vh.b.store }
func (localRole) canPage(*Queue, uint64) bool { return true }
func (localRole) returns(uint64) uint32       { return 0 }
func (localRole) leave()                      {}

// leaderRole: the messages are in a replicated log led here.
type leaderRole struct {
	ml MessageLog
	// returnsOf says how often a message loaded from the log came back.
	returnsOf func(key uint64) uint32
	// storedSep: the log's FSM writes behind, so applied is not yet
	// stored: its logStored is raised by LogStored, not LogApplied.
	storedSep bool
	// retries held in the log (retryhold.go): a quorum queue's.
	held heldRetries
}

func (l *leaderRole) log(*Queue) MessageLog { return l.ml }

func (l *leaderRole) canPage(q *Queue, seq uint64) bool {
	c := q.cold.Load()
	return c != nil && seq <= c.logStored.Load()
}

func (l *leaderRole) returns(key uint64) uint32 {
	if l.returnsOf != nil {
		return l.returnsOf(key)
	}
	return 0
}

func (l *leaderRole) leave() { l.held.stop() }

// heldRetries are a quorum queue's delayed retries, while it leads: the
// log keeps the messages under qid, the leader their keys (due time,
// then a counter), sorted, and a timer for the earliest.
type heldRetries struct {
	qid   uint64
	keys  []uint64
	ctr   uint64
	timer *time.Timer
}

// stop forgets the held keys: the group keeps the messages for whoever
// leads next.
func (h *heldRetries) stop() {
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.keys, h.qid = nil, 0
}

// proxyRole: the messages live on another node, reached through r.
type proxyRole struct {
	r Remote
	// window is the prefetch asked of r's consumer (consumeRemoteLocked).
	window int
	// The owner's counts for Status, as last fetched (stats.go).
	ready, consumers int
	at               int64
	fetching         bool
}

func (*proxyRole) log(q *Queue) MessageLog     { return q.vh.b.store }
func (*proxyRole) canPage(*Queue, uint64) bool { return false }
func (*proxyRole) returns(uint64) uint32       { return 0 }
func (*proxyRole) leave()                      {}

// leadRole is the role of a queue whose messages are in ml, a replicated
// log it leads (st says what the log knows of them), or in the node's
// store when ml is nil.
func leadRole(ml MessageLog, st LogState) queueRole {
	if ml == nil {
		return localRole{}
	}
	return &leaderRole{ml: ml, returnsOf: st.Returns, storedSep: st.StoredSeparately}
}

// proxy is q's proxy role, nil unless its messages live on another node.
// Under q.mu.
func (q *Queue) proxy() *proxyRole {
	p, _ := q.role.(*proxyRole)
	return p
}

// remoteLocked is the Remote q reaches its messages through, nil unless
// q is a proxy. Under q.mu.
func (q *Queue) remoteLocked() Remote {
	if p := q.proxy(); p != nil {
		return p.r
	}
	return nil
}

// leader is q's leader role, nil unless it leads a replicated log here.
// Under q.mu.
func (q *Queue) leader() *leaderRole {
	l, _ := q.role.(*leaderRole)
	return l
}

// setRole makes r q's role, stopping the old one. Under q.mu.
func (q *Queue) setRole(r queueRole) {
	q.role.leave()
	q.role = r
}
