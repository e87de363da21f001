package exchange

import (
	"sync"
	"sync/atomic"
	"time"
)

type unackedEntry struct {
	e  entry
	c  *Consumer // nil for basic.get
	at int64     // when delivered (unix ns), 0 if unknown: LatDeliverAck
}

// Queue is a classic queue: an in-memory ready list in front of the store.
type Queue struct {
	vh         *VHost
	name       string
	id         uint64
	durable    bool
	exclusive  bool
	autoDelete bool
	// Under mu, here where the flags above leave room (see dropAbove):
	// hadCons and deleted; autoDeleted is collected under mu and carried
	// out by unlock.
	hadCons     bool
	deleted     bool
	autoDeleted bool
	owner       any
	args        Table
	xa          *queueArgs // parsed from args (shared by queues declared without any: sharedArgs)

	// The state (qstate.go), under mu: q.a (xa with the policy), the
	// ready list, the unacked deliveries, the next seq.
	queueState

	pol *Policy // the policy in effect (mu)
	// opPol is the operator policy in effect (mu; operator_policy.go).
	opPol *Policy
	// batch is the Batch of the publish enqueuing right now (mu): set
	// only inside enqueue, for the deliveries it makes (see Batch).
	batch *Batch

	// a.sched for readers without mu (schedargs.go).
	ctimeout atomic.Int64
	retry    atomic.Pointer[[]time.Duration]

	mu        sync.Mutex
	consumers []*Consumer // sorted by priority, highest first
	// dropAbove > 0: transient messages past that many ready ones are
	// dropped (every consumer asked for it: ConsumeOpts.DropTransientAbove).
	// It and rr are int32s: a Queue of 768 bytes and the runtime's 8-byte
	// header of a large object took the 896-byte size class, of 760 the
	// 768-byte one.
	dropAbove int32
	rr        int32
	lastUsed  int64 // for x-expires
	expTimer  *time.Timer
	expAt     int64 // when expTimer fires (ttl), 0 if not armed
	idleTimer *time.Timer

	bindings []*binding // bindings with this queue as destination (vh.mu)

	// Clustering (cluster.go). home is the node a classic queue lives on
	// ("" standalone); members are a quorum queue's Raft group.
	home    string
	members atomic.Pointer[[]string] // read without q.mu (a proxy's Locator runs under it)
	seed    []string                 // the members it was declared with (they bootstrap the group)
	// role is where the messages live (role.go): the node's store, a
	// replicated log led here, or another node. Under mu, never nil.
	role queueRole
	// logStored belongs to leaderRole but sits here, since the log's FSM
	// raises it without q.mu: every message with a seq up to it is in
	// the node's store (the FSM wrote it), so it may be paged out. Raised
	// by LogApplied, or by LogStored if the FSM writes behind.
	logStored atomic.Uint64
	epoch     uint64 // bumped by every switch between local and proxy (Delivery.Seq)

	counters msgCounters // atomics, no lock

	st *stream // a stream's state (stream.go); every call goes there when set
}

func newQueue(vh *VHost, name string, id uint64, durable, exclusive, autoDelete bool, owner any, args Table, a queueArgs) *Queue {
	q := &Queue{
		vh: vh, name: name, id: id, durable: durable, exclusive: exclusive,
		autoDelete: autoDelete, owner: owner, args: args, xa: sharedArgs(a),
	}
	q.queueState = queueState{env: q, a: q.xa, nextSeq: 1}
	q.role = localRole{}
	q.ready = newReadyList(&q.queueState, a.maxPriority)
	if a.stream {
		q.st = newStream(q, a.streamA)
	}
	q.syncSchedLocked()
	q.lastUsed = nowNano()
	if a.expires > 0 {
		q.armIdleTimer()
	}
	return q
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// VHost is the queue's vhost name.
func (q *Queue) VHost() string { return q.vh.name }

// Durable reports whether the queue survives a restart.
func (q *Queue) Durable() bool { return q.durable }

// Exclusive reports whether the queue belongs to one connection.
func (q *Queue) Exclusive() bool { return q.exclusive }

// AutoDelete reports whether the queue goes away with its last consumer.
func (q *Queue) AutoDelete() bool { return q.autoDelete }

// Args returns the queue's declared arguments (do not modify).
func (q *Queue) Args() Table { return q.args }

// Stats returns ready and unacked message counts and the consumer count.
func (q *Queue) Stats() (ready, unacked, consumers int) {
	if q.st != nil {
		return q.st.stats()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.n, q.unacked.len(), len(q.consumers)
}

// nowNano is the time in Unix nanoseconds, read from the monotonic clock
// since the process started (one clock read, half of time.Now's two: it
// is read per confirmed message). A step of the system clock while the
// process runs is not seen; NTP's slewing is, as the monotonic clock is
// slewed too.
func nowNano() int64 { return clockBaseNano + int64(time.Since(clockBase)) }

var (
	clockBase     = time.Now()
	clockBaseNano = clockBase.UnixNano()
)

// unlock carries out the effects of the commands applied under q.mu: the
// store writes first, still under it (a queue's writes reach the store in
// the order they were issued), then releases q.mu and carries out the
// rest: dead-lettering, waking other queues, auto-delete.
func (q *Queue) unlock() {
	q.flush()
	dl := q.fx.dl
	q.fx.dl = nil
	kl := q.fx.kick
	q.fx.kick = nil
	ad := q.autoDeleted
	q.autoDeleted = false
	q.mu.Unlock()
	for i := range dl {
		q.vh.deadLetter(q, dl[i])
	}
	for _, l := range kl {
		l.kick()
	}
	if ad {
		q.vh.deleteQueueBySelf(q)
	}
}

// Kick makes the queue try to dispatch ready messages.
func (q *Queue) Kick() {
	if q.st != nil {
		q.st.kick()
		return
	}
	q.mu.Lock()
	q.dispatchLocked(nowNano())
	q.unlock()
}

// messageLog is where q keeps its messages.
func (q *Queue) messageLog() MessageLog { return q.role.log(q) }

// markDeleted stops the queue and returns its consumers and the number of
// messages it held. Called by VHost.deleteQueue.
func (q *Queue) markDeleted() (n int) {
	if q.st != nil {
		n = q.st.close(true)
		// A follower's proxy role forwards its publishes: stop it.
		q.mu.Lock()
		r := q.remoteLocked()
		q.setRole(localRole{})
		q.mu.Unlock()
		if r != nil {
			r.Close()
		}
		return n
	}
	q.mu.Lock()
	q.deleted = true
	n = q.ready.n
	q.cmdForget() // the store's records go with the queue (dropQueue)
	r := q.remoteLocked()
	for _, c := range q.consumers {
		c.cancelled = true
		if c.limit != nil {
			c.limit.detach(c)
		}
		c.sink.Cancelled(c)
	}
	q.consumers = nil
	if q.expTimer != nil {
		q.expTimer.Stop()
	}
	if q.idleTimer != nil {
		q.idleTimer.Stop()
	}
	q.fx.dl = nil
	q.flush()
	q.setRole(localRole{}) // stops a leader's held retries
	q.unlock()
	if r != nil {
		r.Close()
	}
	return n
}
