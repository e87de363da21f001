package exchange

import (
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Overflow behaviours (x-overflow).
const (
	OverflowDropHead         = "drop-head"
	OverflowRejectPublish    = "reject-publish"
	OverflowRejectPublishDLX = "reject-publish-dlx"
)

// queueArgs are a queue's parsed x-arguments.
//
// Its flags sit together (a Queue holds two queueArgs, and padding after
// each flag would take it past a size class).
type queueArgs struct {
	messageTTL  int64 // ms, -1 none
	expires     int64 // ms, 0 none
	maxLen      int64 // -1 none
	maxLenBytes int64 // -1 none
	overflow    string
	dlx         string
	dlrk        string
	hasDLX      bool
	hasDLRK     bool
	sac         bool
	quorum      bool // x-queue-type quorum
	stream      bool // x-queue-type stream (stream.go)
	maxPriority int

	deliveryLimit int64 // x-delivery-limit, -1 none
	groupSize     int   // x-quorum-initial-group-size, 0 default

	// The in-memory window (page.go): x-max-in-memory-length and
	// x-max-in-memory-bytes (x-queue-mode lazy is a length of 0), -1 for
	// the node's default.
	memLen, memBytes int64

	sched schedArgs // consumer timeout, retry delays (schedargs.go)

	streamA streamArgs // a stream's arguments
}

func parseQueueArgs(args Table) (queueArgs, error) {
	a := queueArgs{messageTTL: -1, maxLen: -1, maxLenBytes: -1, overflow: OverflowDropHead, deliveryLimit: -1, memLen: -1, memBytes: -1}
	if isStreamArgs(args) {
		var err error
		a.stream = true
		a.streamA, err = parseStreamArgs(args)
		return a, err
	}
	intArg := func(name string, min int64) (int64, bool, error) {
		v, ok := args[name]
		if !ok {
			return 0, false, nil
		}
		n, ok := asInt64(v)
		if _, isStr := v.(string); isStr || !ok {
			return 0, false, errorf(KindPreconditionFailed, "invalid arg '%s' for queue: %v of type %T is not a number", name, v, v)
		}
		if n < min {
			return 0, false, errorf(KindPreconditionFailed, "invalid arg '%s' for queue: %d must be at least %d", name, n, min)
		}
		return n, true, nil
	}
	var err error
	var ok bool
	var n int64
	if n, ok, err = intArg("x-message-ttl", 0); err != nil {
		return a, err
	} else if ok {
		a.messageTTL = n
	}
	if n, ok, err = intArg("x-expires", 1); err != nil {
		return a, err
	} else if ok {
		a.expires = n
	}
	if n, ok, err = intArg("x-max-length", 0); err != nil {
		return a, err
	} else if ok {
		a.maxLen = n
	}
	if n, ok, err = intArg("x-max-length-bytes", 0); err != nil {
		return a, err
	} else if ok {
		a.maxLenBytes = n
	}
	if n, ok, err = intArg("x-max-priority", 0); err != nil {
		return a, err
	} else if ok {
		if n > 255 {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-max-priority' for queue: %d is above 255", n)
		}
		a.maxPriority = int(n)
	}
	if v, ok := args["x-overflow"]; ok {
		s, _ := v.(string)
		switch s {
		case OverflowDropHead, OverflowRejectPublish, OverflowRejectPublishDLX:
			a.overflow = s
		default:
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-overflow' for queue: %v", v)
		}
	}
	if v, ok := args["x-dead-letter-exchange"]; ok {
		s, isStr := v.(string)
		if !isStr {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-dead-letter-exchange' for queue: %v is not a string", v)
		}
		a.dlx, a.hasDLX = s, true
	}
	if v, ok := args["x-dead-letter-routing-key"]; ok {
		s, isStr := v.(string)
		if !isStr {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-dead-letter-routing-key' for queue: %v is not a string", v)
		}
		if !a.hasDLX {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-dead-letter-routing-key' for queue: x-dead-letter-exchange is not set")
		}
		a.dlrk, a.hasDLRK = s, true
	}
	if v, ok := args["x-single-active-consumer"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-single-active-consumer' for queue: %v is not a boolean", v)
		}
		a.sac = b
	}
	if v, ok := args["x-queue-type"]; ok {
		s, _ := v.(string)
		switch s {
		case "classic", "":
		case "quorum":
			a.quorum = true
		default:
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-queue-type' for queue: '%v' is not supported by this node", v)
		}
	}
	if n, ok, err = intArg("x-delivery-limit", 0); err != nil {
		return a, err
	} else if ok {
		a.deliveryLimit = n
	}
	if n, ok, err = intArg("x-max-in-memory-length", 0); err != nil {
		return a, err
	} else if ok {
		a.memLen = n
	}
	if n, ok, err = intArg("x-max-in-memory-bytes", 0); err != nil {
		return a, err
	} else if ok {
		a.memBytes = n
	}
	if v, ok := args["x-queue-mode"]; ok {
		switch v {
		case "lazy":
			a.memLen = 0
		case "default":
		default:
			return a, errorf(KindPreconditionFailed, "invalid arg 'x-queue-mode' for queue: %v", v)
		}
	}
	if n, ok, err = intArg("x-quorum-initial-group-size", 1); err != nil {
		return a, err
	} else if ok {
		a.groupSize = int(min(n, 1<<10))
	}
	if a.sched, err = parseSchedArgs(args); err != nil {
		return a, err
	}
	return a, nil
}

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

// deadLetter is a message to dead-letter once q.mu is released, with the
// queue's dead-letter settings at the time.
type deadLetter struct {
	msg     *Message
	reason  string
	dlx     string
	dlrk    string
	hasDLRK bool
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

// --- commands: the only way a queue's state changes ---

// cmdAdmit decides whether the queue takes e: false if it refuses it
// (x-overflow reject-publish*, e dead-lettered for reject-publish-dlx).
func (s *queueState) cmdAdmit(e entry) bool {
	if s.full(len(e.msg.Body)) {
		switch s.a.overflow {
		case OverflowRejectPublish:
			return false
		case OverflowRejectPublishDLX:
			e.stored = false // never appended
			s.deadLetter(e, "maxlen")
			return false
		}
	}
	return true
}

// cmdEnqueue appends an admitted e; data (if e is stored) is its record,
// appended to the message log before anything else happens to e, so that
// it may be paged out at once (a refill then reads it back). done is
// called once it is durable. drop-head then makes room by dropping the
// oldest messages, e itself possibly.
func (s *queueState) cmdEnqueue(e entry, data []byte, done func(error)) {
	if e.stored {
		s.issueAppend(&e, data, done)
	}
	s.ready.push(e)
	s.cmdTrim()
}

// cmdTrim drops the oldest messages while the queue is over its length
// limits (x-overflow drop-head). A gated queue counts and drops only
// committed messages (commit.go).
func (s *queueState) cmdTrim() {
	for s.overLimit() {
		old, ok := s.ready.popOldest()
		if !ok {
			break
		}
		s.deadLetter(old, "maxlen")
	}
}

func (s *queueState) full(size int) bool {
	if s.a.maxLen >= 0 && int64(s.ready.n) >= s.a.maxLen {
		return true
	}
	return s.a.maxLenBytes >= 0 && s.ready.bytes+int64(size) > s.a.maxLenBytes
}

// overLimit reports whether the committed ready messages (all of them
// but for a gated queue) pass the queue's length limits.
func (s *queueState) overLimit() bool {
	r := &s.ready
	return (s.a.maxLen >= 0 && int64(r.n-r.pending.n) > s.a.maxLen) ||
		(s.a.maxLenBytes >= 0 && r.bytes-r.pending.bytes > s.a.maxLenBytes)
}

// deadline is when e expires (unix ns), 0 if never.
func (s *queueState) deadline(e *entry) int64 {
	var d int64
	if s.a.messageTTL >= 0 {
		d = e.msg.ts + s.a.messageTTL*int64(time.Millisecond)
	}
	if x := e.msg.expiresAt; x != 0 && (d == 0 || x < d) {
		d = x
	}
	return d
}

// cmdExpire drops expired messages from the head.
func (s *queueState) cmdExpire(now int64) {
	if !s.env.envPages() {
		return // the owning node expires its messages
	}
	if s.a.messageTTL < 0 && !s.env.envExpiring() {
		return // nothing can expire: no need to look at (or read) the head
	}
	for {
		e := s.ready.peek()
		if e == nil {
			return
		}
		// A message is expired once its deadline has passed, not at it:
		// with a TTL of 0 it still reaches a consumer that can take it
		// in the same publish, as in RabbitMQ.
		if d := s.deadline(e); d == 0 || d >= now {
			return
		}
		old, _ := s.ready.pop()
		s.deadLetter(old, "expired")
	}
}

// cmdTake removes the next live message for delivery.
func (s *queueState) cmdTake(now int64) (entry, bool) {
	s.cmdExpire(now)
	e, ok := s.ready.pop()
	if ok {
		e.deliveries++
	}
	return e, ok
}

// cmdDelivered records e as delivered to c (nil for basic.get) and
// unacked until settled. A delivery that needs no ack is done with at
// once instead (dropStored).
func (s *queueState) cmdDelivered(e entry, c *Consumer) { s.cmdDeliveredAt(e, c, 0) }

// cmdDeliveredAt is cmdDelivered of a delivery made at now (unix ns), the
// start of its deliver-to-ack latency.
func (s *queueState) cmdDeliveredAt(e entry, c *Consumer, now int64) {
	if c != nil {
		c.unacked++
	}
	s.unacked.put(e.seq, unackedEntry{e: e, c: c, at: now})
}

// cmdSettle acknowledges seq.
func (s *queueState) cmdSettle(seq uint64) (unackedEntry, bool) {
	u, ok := s.unacked.take(seq)
	if !ok {
		return u, false
	}
	s.fx.acks++
	s.releaseCredit(u.c)
	s.dropStored(&u.e)
	if u.e.own && !u.e.stored {
		u.e.msg.Release() // its copying consumer is done with it
	}
	return u, true
}

// cmdReturn puts an unacked message back (requeue) or drops it.
func (s *queueState) cmdReturn(seq uint64, requeue bool) bool {
	u, ok := s.unacked.take(seq)
	if !ok {
		return false
	}
	s.releaseCredit(u.c)
	switch {
	case u.e.up != 0:
		// Settled where the message lives (requeue or dead-letter there).
		arg := uint64(0)
		if requeue {
			arg = 1
		}
		s.fx.op(storeOp{kind: opRemoteNack, key: u.e.up, arg: arg})
	case !requeue:
		if !s.env.envRetry(u.e) { // retry.go
			s.deadLetter(u.e, "rejected")
		}
	case s.a.deliveryLimit >= 0 && int64(u.e.deliveries) > s.a.deliveryLimit:
		s.deadLetter(u.e, "delivery_limit")
	default:
		if u.e.stored {
			s.fx.op(storeOp{kind: opReturn, key: u.e.seq})
		}
		s.ready.insert(u.e)
	}
	return true
}

// cmdPurge drops every ready message.
func (s *queueState) cmdPurge() int {
	n := s.ready.n
	all := s.ready.clear(true)
	for i := range all {
		s.dropStored(&all[i])
	}
	return n
}

func (s *queueState) releaseCredit(c *Consumer) {
	if c == nil {
		return
	}
	c.unacked--
	if c.limit != nil && c.limit.release(1) {
		s.fx.kick = appendLimit(s.fx.kick, c.limit)
	}
}

func appendLimit(l []*Limit, x *Limit) []*Limit {
	for _, e := range l {
		if e == x {
			return l
		}
	}
	return append(l, x)
}

// dropStored is done with e: its record is deleted, or the node that
// holds it told (a proxy's delivery).
func (s *queueState) dropStored(e *entry) {
	if e.up != 0 {
		s.fx.op(storeOp{kind: opRemoteAck, key: e.up})
		e.up = 0
	}
	if e.stored {
		s.issueDelete(s.storeKey(e))
		e.stored = false
	}
}

// deadLetter drops e, dead-lettering it if the queue has a DLX.
func (s *queueState) deadLetter(e entry, reason string) {
	s.dropStored(&e)
	if s.a.hasDLX {
		s.fx.dl = append(s.fx.dl, deadLetter{msg: e.msg, reason: reason,
			dlx: s.a.dlx, dlrk: s.a.dlrk, hasDLRK: s.a.hasDLRK})
	}
}

// deadLetterLocked is the state's deadLetter, for Queue's callers.
func (q *Queue) deadLetterLocked(e entry, reason string) { q.deadLetter(e, reason) }

// messageLog is where q keeps its messages.
func (q *Queue) messageLog() MessageLog { return q.role.log(q) }

// --- publishing, delivery, acks ---

// enqueue is called by VHost.publish for a routed message. data is the
// encoded record if the message is to be stored. It returns false if the
// queue refused the message.
func (q *Queue) enqueue(m *Message, data []byte, done func(error), now int64, batch *Batch) (accepted, stored, refused bool) {
	if q.st != nil {
		return q.st.enqueue(m, data, done, now, batch)
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return false, false, false
	}
	if p := q.proxy(); p != nil {
		q.counters.publish.Add(1)
		confirm := done != nil && q.storesMessage(m)
		if !confirm {
			done = func(error) {}
		}
		// Handed over under q.mu (ordered with the role's changes);
		// the owner's back-pressure is waited for after it (STYLE 14).
		wait := publishRemote(p.r, m, done)
		q.mu.Unlock()
		if wait != nil {
			wait()
		}
		return true, confirm, false
	}
	if q.dropAbove > 0 && q.ready.n >= int(q.dropAbove) && !m.Props.Persistent() {
		// At most once, and the consumers are that far behind.
		q.counters.dropBehind.Add(1)
		q.vh.counters.dropBehind.Add(1)
		q.mu.Unlock()
		return true, false, false
	}
	e := entry{msg: m, seq: q.takeSeq()}
	if data != nil && q.storesMessage(m) {
		e.stored = true
	}
	if !q.cmdAdmit(e) {
		q.unlock()
		return false, false, true
	}
	q.counters.publish.Add(1)
	if m.rec != nil && !e.stored && !q.gated && m.held < maxHeld {
		// Held in memory only: this queue's hold on a reusable message
		// (one Publish paid for already, if it reaches several queues).
		if m.prepaid > 0 {
			m.prepaid--
		} else {
			m.holds.Add(1)
		}
		m.held++
		e.own = true
	}
	q.cmdEnqueue(e, data, done)
	q.batch = batch
	q.dispatchLocked(now)
	q.batch = nil
	q.scheduleExpiry(now)
	q.unlock()
	return true, e.stored, false
}

// dispatchLocked delivers ready messages to consumers with credit.
func (q *Queue) dispatchLocked(now int64) {
	// A gated queue's uncommitted messages (pending) wait for LogApplied.
	for q.ready.n > q.ready.pending.n && len(q.consumers) > 0 {
		c := q.pickConsumer()
		if c == nil {
			return
		}
		e, ok := q.cmdTake(now)
		if !ok {
			if !c.noAck && c.limit != nil {
				c.limit.release(1)
			}
			return
		}
		q.countDeliver(false, c.noAck, e.deliveries)
		q.observeWait(c.proto, &e, now)
		if c.noAck {
			q.dropStored(&e)
		}
		d := Delivery{Queue: q, Consumer: c, Msg: e.msg, Seq: q.toDelivery(e.seq), Redelivered: e.deliveries > 1, Batch: q.batch}
		var more, done bool
		if c.copier != nil {
			more, done = c.copier.DeliverCopy(d)
		} else {
			more = c.sink.Deliver(d)
		}
		// A sink that keeps the message pins it: the hold stays.
		e.own = e.own && (done || c.settler) && !e.stored
		if !c.noAck {
			q.cmdDeliveredAt(e, c, now)
		} else if e.own {
			e.msg.Release()
		}
		if !more {
			c.blocked = true
		}
	}
	if q.ready.n > 0 {
		q.cmdExpire(now)
	}
}

// pickConsumer chooses the next consumer round-robin among those of the
// highest priority that can take a message. It acquires the consumer's
// channel limit credit.
func (q *Queue) pickConsumer() *Consumer {
	cs := q.consumers
	if q.a.sac {
		if cs[0].canTake() {
			return cs[0]
		}
		return nil
	}
	for start := 0; start < len(cs); {
		end := start + 1
		for end < len(cs) && cs[end].priority == cs[start].priority {
			end++
		}
		size := end - start
		for k := 0; k < size; k++ {
			i := start + (int(q.rr)+k)%size
			if cs[i].canTake() {
				q.rr = int32((int(q.rr) + k + 1) % size)
				return cs[i]
			}
		}
		start = end
	}
	return nil
}

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
func (q *Queue) toDelivery(seq uint64) uint64 { return q.epoch<<epochShift | seq&seqMask }

// fromDelivery is the entry seq of a delivery seq of the current epoch.
func (q *Queue) fromDelivery(d uint64) (uint64, bool) {
	if d>>epochShift != q.epoch {
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

// Get takes one message (basic.get). With noAck false the message stays
// unacked until Ack or Reject. It is Fetch without Fetch's error (ok
// false then too).
func (q *Queue) Get(noAck bool) (Delivery, bool) {
	d, ok, _ := q.Fetch(noAck)
	return d, ok
}

// Fetch is basic.get: it takes one message; ok false with a nil error
// when the queue is empty. It never answers empty for want of an
// answer: on a proxy whose owner does not answer (its node is gone, a
// quorum queue's leader is being elected) it waits, at most
// getOwnerWait, for the queue's owner to change (a new leader located,
// or this node leading it) and asks again, and then fails with a
// KindResourceError error (a channel error: the client may retry).
func (q *Queue) Fetch(noAck bool) (Delivery, bool, error) {
	if q.st != nil {
		return Delivery{}, false, nil // refused by the front ends first (CheckGet)
	}
	q.mu.Lock()
	if r := q.remoteLocked(); r != nil {
		q.mu.Unlock()
		return q.getRemote(r, noAck)
	}
	d, ok := q.getLocked(noAck)
	return d, ok, nil
}

// getLocked is Get on a queue whose messages are here. Called under
// q.mu, which it releases.
func (q *Queue) getLocked(noAck bool) (Delivery, bool) {
	now := nowNano()
	q.lastUsed = now
	e, ok := q.cmdTake(now)
	if !ok {
		q.counters.getEmpty.Add(1)
		q.vh.counters.getEmpty.Add(1)
		q.unlock()
		return Delivery{}, false
	}
	q.countDeliver(true, noAck, e.deliveries)
	q.observeWait(ProtoAMQP, &e, now)
	e.own = false // the caller keeps the message: the hold stays
	if noAck {
		q.dropStored(&e)
	} else {
		q.cmdDeliveredAt(e, nil, now)
	}
	d := Delivery{Queue: q, Msg: e.msg, Seq: q.toDelivery(e.seq), Redelivered: e.deliveries > 1, Remaining: q.ready.n - q.ready.pending.n}
	q.scheduleExpiry(now)
	q.unlock()
	return d, true
}

// Purge removes every ready message and returns how many.
func (q *Queue) Purge() int {
	if q.st != nil {
		return 0 // refused by PurgeQueue
	}
	q.mu.Lock()
	if r := q.remoteLocked(); r != nil {
		q.mu.Unlock()
		n, err := r.Purge()
		if err != nil {
			q.vh.b.log.Warn("remote purge failed", "queue", q.name, "err", err)
		}
		return n
	}
	n := q.cmdPurge()
	q.unlock()
	return n
}

// --- consumers ---

func (q *Queue) addConsumer(o ConsumeOpts) (*Consumer, error) {
	if q.st != nil {
		return q.st.addConsumer(o)
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return nil, errorf(KindNotFound, "no queue '%s' in vhost '%s'", q.name, q.vh.name)
	}
	for _, c := range q.consumers {
		if c.excl {
			q.mu.Unlock()
			return nil, errorf(KindAccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.name, q.vh.name)
		}
	}
	if o.Exclusive && len(q.consumers) > 0 {
		q.mu.Unlock()
		return nil, errorf(KindAccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.name, q.vh.name)
	}
	c := &Consumer{q: q, tag: o.Tag, noAck: o.NoAck, excl: o.Exclusive, priority: o.Priority,
		prefetch: o.Prefetch, limit: o.Limit, sink: o.Sink, dropAbove: o.DropTransientAbove, proto: o.Protocol}
	c.copier, _ = o.Sink.(CopyingSink)
	_, c.settler = o.Sink.(SettlingSink)
	c.settler = c.settler && !c.noAck
	// Keep consumers sorted by priority, highest first, stable.
	i := sort.Search(len(q.consumers), func(i int) bool { return q.consumers[i].priority < c.priority })
	q.consumers = append(q.consumers, nil)
	copy(q.consumers[i+1:], q.consumers[i:])
	q.consumers[i] = c
	q.syncDropLocked()
	q.hadCons = true
	q.lastUsed = nowNano()
	if c.limit != nil {
		c.limit.attach(c)
	}
	q.consumeRemoteLocked()
	q.dispatchLocked(nowNano())
	q.unlock()
	return c, nil
}

func (q *Queue) removeConsumer(c *Consumer) {
	if q.st != nil {
		q.st.removeConsumer(c)
		return
	}
	q.mu.Lock()
	if c.cancelled {
		q.mu.Unlock()
		return
	}
	c.cancelled = true
	for i, e := range q.consumers {
		if e == c {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			break
		}
	}
	q.syncDropLocked()
	if c.limit != nil {
		c.limit.detach(c)
	}
	q.consumeRemoteLocked()
	q.lastUsed = nowNano()
	if len(q.consumers) == 0 && q.autoDelete && q.hadCons && !q.deleted {
		q.autoDeleted = true
	} else if q.a.sac {
		// A new single active consumer takes over.
		q.dispatchLocked(nowNano())
	}
	q.unlock()
}

// syncDropLocked sets dropAbove from the consumers: the largest limit
// asked for, and none unless every consumer asked for one (a queue
// without consumers keeps what it gets).
func (q *Queue) syncDropLocked() {
	n := 0
	for _, c := range q.consumers {
		if c.dropAbove <= 0 {
			n = 0
			break
		}
		n = max(n, c.dropAbove)
	}
	q.dropAbove = int32(min(n, 1<<31-1))
}

// --- timers ---

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
	if d == 0 || (q.expAt != 0 && q.expAt <= d) {
		return
	}
	q.expAt = d
	wait := time.Duration(d - now)
	if q.expTimer == nil {
		q.expTimer = time.AfterFunc(wait, q.onExpiryTimer)
	} else {
		q.expTimer.Reset(wait)
	}
}

func (q *Queue) onExpiryTimer() {
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return
	}
	q.expAt = 0
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
	q.idleTimer = time.AfterFunc(d, q.onIdleTimer)
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
		q.idleTimer.Reset(wait)
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

func parseExpiration(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
