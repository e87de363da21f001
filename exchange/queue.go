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

	// cold is what few queues use (queueCold), nil until first used.
	cold atomic.Pointer[queueCold]
	// batch is the Batch of the publish enqueuing right now (mu): set
	// only inside enqueue, for the deliveries it makes (see Batch).
	batch *Batch

	// a.sched for readers without mu (schedargs.go); nil: none set.
	sched atomic.Pointer[queueSched]

	mu        sync.Mutex
	consumers []*Consumer // sorted by priority, highest first
	// dropAbove > 0: transient messages past that many ready ones are
	// dropped (every consumer asked for it: ConsumeOpts.DropTransientAbove).
	// It and rr are int32s: a Queue is 480 bytes, a size class of its
	// own; a field more takes the 512-byte one (TestFleetStructSizes).
	dropAbove int32
	rr        int32
	lastUsed  int64 // for x-expires

	bindings []*binding // bindings with this queue as destination (vh.mu)

	// Clustering (cluster.go): a queue's home, seed and members are in
	// its cold part (queueCold).
	// role is where the messages live (role.go): the node's store, a
	// replicated log led here, or another node. Under mu, never nil.
	// (logStored and epoch are in the cold part.)
	role queueRole

	counters queueCounters // atomics, no lock

	st *stream // a stream's state (stream.go); every call goes there when set
}

// queueCold is the part of a Queue that few queues use, made on first
// use (Queue.coldState) and kept: the policies in effect, the TTL and
// x-expires timers, a clustered queue's home, seed and members, a
// quorum leader's stored mark and the epoch a switch of role bumps. An
// idle MQTT device's queue is an ordinary queue whose every byte counts
// (issue 42): without these 104 bytes a Queue fits the 480-byte size
// class, not the 768-byte one. Each field keeps the lock it had in Queue; the
// pointer is atomic, as its fields are read under different locks.
type queueCold struct {
	pol *Policy // the policy in effect (mu)
	// opPol is the operator policy in effect (mu; operator_policy.go).
	opPol     *Policy
	expTimer  *time.Timer // (mu)
	expAt     int64       // when expTimer fires (ttl), 0 if not armed (mu)
	idleTimer *time.Timer // (mu)
	// home is the node a classic queue lives on ("" standalone); seed
	// the members a quorum queue was declared with (they bootstrap the
	// group). Set before the queue is published, or under v.mu.
	home string
	seed []string
	// members are a quorum queue's Raft group, read without q.mu (a
	// proxy's Locator runs under it).
	members atomic.Pointer[[]string]
	// logStored belongs to leaderRole but sits here, since the log's FSM
	// raises it without q.mu: every message with a seq up to it is in
	// the node's store (the FSM wrote it), so it may be paged out. Raised
	// by LogApplied, or by LogStored if the FSM writes behind.
	logStored atomic.Uint64
	// epoch is bumped by every switch between local and proxy
	// (Delivery.Seq); under mu.
	epoch uint64
}

// epochNow is q's epoch (q.mu held): 0 until a switch of role bumps it.
func (q *Queue) epochNow() uint64 {
	if c := q.cold.Load(); c != nil {
		return c.epoch
	}
	return 0
}

// coldState is q's cold part, made if there is none yet.
func (q *Queue) coldState() *queueCold {
	if c := q.cold.Load(); c != nil {
		return c
	}
	c := &queueCold{}
	if q.cold.CompareAndSwap(nil, c) {
		return c
	}
	return q.cold.Load()
}

// coldOrZero is q's cold part, or a zero one (not to be written) if q
// has none.
func (q *Queue) coldOrZero() *queueCold {
	if c := q.cold.Load(); c != nil {
		return c
	}
	return &zeroCold
}

var zeroCold queueCold

func newQueue(vh *VHost, name string, id uint64, durable, exclusive, autoDelete bool, owner any, args Table, a queueArgs) *Queue {
	q := &Queue{
		vh: vh, name: name, id: id, durable: durable, exclusive: exclusive,
		autoDelete: autoDelete, owner: owner, args: args, xa: sharedArgs(a),
	}
	q.queueState = queueState{env: q, a: q.xa, nextSeq: 1}
	q.role = localRole{}
	q.ready = newReadyList(&q.queueState)
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
	var dl []deadLetter
	var kl []*Limit
	if m := q.fx.rare; m != nil {
		dl, kl = m.dl, m.kick
		m.dl, m.kick = nil, nil
	}
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
	if c := q.cold.Load(); c != nil {
		if c.expTimer != nil {
			c.expTimer.Stop()
		}
		if c.idleTimer != nil {
			c.idleTimer.Stop()
		}
	}
	if q.fx.rare != nil {
		q.fx.rare.dl = nil
	}
	q.flush()
	q.setRole(localRole{}) // stops a leader's held retries
	q.unlock()
	if r != nil {
		r.Close()
	}
	return n
}
