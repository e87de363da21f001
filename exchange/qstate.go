package exchange

// queueState is what a classic queue (or a quorum queue led here) knows
// of its messages: its arguments in effect, the ready list with its
// paging, the unacked deliveries and the next seq. Its commands (the cmd*
// methods, qcommands.go) change it and nothing else: what they do outside it
// is recorded as effects (fx) that Queue carries out — store writes, in
// the order they were issued, before any read of the store and before
// q.mu is released (flush), then dead letters and waking other queues
// once q.mu is released (Queue.unlock). What the state learns from
// outside (the node's window and memory pressure, how far a replicated
// log is stored, the store's records) it asks its queueEnv for; the
// store is read only through the env, which issues every queued write
// first, so a read sees every write the state issued before it.
//
// Queue embeds queueState: q.ready, q.unacked and the commands are the
// state's.
type queueState struct {
	env queueEnv

	// a is in effect: the declared ones with the policy (policy.go).
	// Never modified: cmdSetArgs replaces it, and until a policy changes
	// something it is the queue's xa, which queues declared without
	// arguments share (184 bytes of every MQTT device's queue).
	a       *queueArgs
	nextSeq uint64
	ready   readyList
	unacked unackedSet
	// rare is what few queues use (stateRare), nil until first used.
	rare *stateRare

	fx effects
}

// stateRare is the part of a queue's state that few queues use, made on
// first use and kept: an idle MQTT device's queue is an ordinary queue
// whose every byte counts (issue 42), so a queue that never leads from a
// commit log and never recovered a message does not carry these 88
// bytes. The same lock as the rest of the state (q.mu).
type stateRare struct {
	// gated is set while the queue leads from a CommitLog (commit.go):
	// only messages with seqs up to releasedSeq, the committed ones, are
	// delivered.
	gated       bool
	releasedSeq uint64
	// pending is a gated queue's uncommitted messages (commit.go), all
	// of them counted in the ready list's n and bytes too.
	pending pendingList
	// Recovered at start: mid messages with seqs up to recAll are flagged
	// redelivered, and so are those in recSeen; recMax bounds the seqs
	// whose bytes were estimated.
	recAll, recMax uint64
	recSeen        map[uint64]bool
}

// rareState is s.rare, made if there is none yet.
func (s *queueState) rareState() *stateRare {
	if s.rare == nil {
		s.rare = &stateRare{}
	}
	return s.rare
}

// gated reports whether the state leads from a commit log and holds its
// uncommitted messages back (stateRare.gated).
func (s *queueState) gated() bool { return s.rare != nil && s.rare.gated }

// pendingLen is the number of uncommitted messages, and their bytes,
// that a gated state holds (counted in the ready list's too).
func (s *queueState) pendingLen() (int, int64) {
	if s.rare == nil {
		return 0, 0
	}
	return s.rare.pending.n, s.rare.pending.bytes
}

// pendingCount is the number of uncommitted messages a gated state holds.
func (s *queueState) pendingCount() int {
	if s.rare == nil {
		return 0
	}
	return s.rare.pending.n
}

// recMax bounds the seqs of recovered messages (stateRare.recMax).
func (s *queueState) recMax() uint64 {
	if s.rare == nil {
		return 0
	}
	return s.rare.recMax
}

// queueEnv is what a queueState asks of the world: facts it does not
// own, and the store's records. Queue implements it.
type queueEnv interface {
	// envWindow is the node's in-memory window per lane (queues.window_*).
	envWindow() (msgs, bytes int64)
	// envPressure reports that queues must not keep more in memory.
	envPressure() bool
	// envPages reports that the messages are in the node's store (not a
	// proxy's, whose messages live on another node).
	envPages() bool
	// envCanPage reports whether the message seq is in the node's store,
	// or will be by the time it is read (a quorum queue's is once its
	// log's FSM applied it).
	envCanPage(seq uint64) bool
	// envReturns is how often the log saw message key come back, for a
	// message recovered from a replicated log (0 otherwise).
	envReturns(key uint64) uint32
	// envConsumers is the number of consumers.
	envConsumers() int
	// envExpiring reports that some message in the vhost has a
	// per-message TTL.
	envExpiring() bool
	// envRead and envKeys read the queue's records from key from on, in
	// key order, after issuing every write queued in the state's effects.
	envRead(from uint64, fn func(key uint64, data []byte) bool) error
	envKeys(from uint64, fn func(key uint64, size int64) bool) error
	// envRetry takes a rejected message to retry later (retry.go), if
	// the queue retries: false if it does not (it is dead-lettered).
	envRetry(e entry) bool
}

// effects is what the state's commands did outside it, in order, to be
// carried out by Queue.
type effects struct {
	ops []storeOp
	// memDelta is the change of the ready list's in-memory bytes counted
	// in the broker's total (memUsed), in steps of memQuantum.
	memDelta int64
	// acks is the number of messages acknowledged (counters).
	acks uint64
	// rare holds the effects that few commands have, made by the first
	// (more) and kept: three slice headers fewer in every queue.
	rare *rareEffects
	// expiring: a message with a per-message TTL was read back.
	expiring bool
}

// rareEffects are the effects of dead-lettering, of credit given back to
// a blocked limit and of problems reading the store.
type rareEffects struct {
	// Carried out once q.mu is released.
	dl   []deadLetter
	kick []*Limit
	// problems found reading the store, to be logged and counted.
	notes []stateNote
}

// more is f.rare, made if there is none yet.
func (f *effects) more() *rareEffects {
	if f.rare == nil {
		f.rare = &rareEffects{}
	}
	return f.rare
}

type storeOpKind uint8

const (
	opAppend      storeOpKind = iota // the message log: a published message (done)
	opPage                           // the node's store: a message paged out (never a log's)
	opDelete                         // the message log
	opReturn                         // the message log (ReturnLog): a requeue
	opDeleteRange                    // the message log: keys [key, arg), count records at most
	opRemoteAck                      // the remote (proxy): settled
	opRemoteNack                     // the remote: rejected, key is requeue (1) or not
)

// storeOp is one write the state issued (or a proxy's settle, which must
// keep its order with the others too).
type storeOp struct {
	kind  storeOpKind
	key   uint64 // store key, or the remote's delivery tag
	arg   uint64
	count int
	data  []byte
	done  func(error)
	// pooled: data came from encodePool, back there once written.
	pooled *[]byte
}

type stateNote struct {
	seq     uint64
	missing int // 0: the record with seq failed to decode (err)
	err     error
}

func (f *effects) op(o storeOp) { f.ops = append(f.ops, o) }

// --- the store writes of a state's commands ---

func (s *queueState) issueAppend(e *entry, data []byte, done func(error)) {
	s.fx.op(storeOp{kind: opAppend, key: s.storeKey(e), data: data, done: done})
}

func (s *queueState) issueDelete(key uint64) {
	s.fx.op(storeOp{kind: opDelete, key: key})
}

// storeKey is e's key in the queue's message log.
func (s *queueState) storeKey(e *entry) uint64 {
	return storeKey(s.ready.laneOf(e), e.seq, e.page)
}

// released reports whether e is committed, for a gated queue.
func (s *queueState) released(e *entry) bool { return s.rare != nil && e.seq <= s.rare.releasedSeq }

// --- the commands by which the world outside sets the state ---
//
// Recovery, a switch of role (role.go), a replicated log's commits and a
// policy change reach the state by these commands too, never by setting
// its fields.

// takeSeq gives the next seq to a message entering the state.
func (s *queueState) takeSeq() uint64 {
	seq := s.nextSeq
	s.nextSeq++
	return seq
}

// cmdRestore adds n messages of lane ln, bytes bytes, found in the store
// from key first on, with seqs up to maxSeq: what a restart counted, or
// what a replicated log that became local holds. None is read now: they
// are the lane's paged-out messages (mid), read a window at a time.
func (s *queueState) cmdRestore(ln int, first uint64, n int, bytes int64, maxSeq uint64) {
	r := &s.ready
	l := &r.lanes()[ln]
	if l.mid == 0 || first < l.from {
		l.from = first
	}
	l.mid += n
	l.midBytes += bytes
	r.n += n
	r.bytes += bytes
	s.cmdSeqsUsed(maxSeq)
}

// cmdSeqsUsed records that the seqs up to maxSeq were given before: a
// restored message's, or one of a log's emptied groups.
func (s *queueState) cmdSeqsUsed(maxSeq uint64) {
	s.nextSeq = max(s.nextSeq, maxSeq+1)
	if maxSeq > s.recMax() {
		s.rareState().recMax = maxSeq
	}
}

// cmdFlagRestored flags the restored messages with seqs up to upto, and
// those in seen, redelivered when they are read: whoever held them
// before may have delivered them.
func (s *queueState) cmdFlagRestored(upto uint64, seen map[uint64]bool) {
	if upto == 0 && len(seen) == 0 && s.rare == nil {
		return
	}
	r := s.rareState()
	r.recAll = min(upto, r.recMax)
	if len(seen) > 0 {
		r.recSeen = seen
	}
}

// cmdForget drops the ready and unacked messages held in memory without
// settling them anywhere: they belong to another holder now (a switch of
// role, proxy.go), which redelivers what was not acknowledged to it.
// Consumers get their credit back; nothing is gated.
func (s *queueState) cmdForget() {
	s.ready.clear(false)
	if r := s.rare; r != nil {
		r.recAll, r.recMax = 0, 0
		r.gated = false
	}
	s.unacked.clear(func(u *unackedEntry) { s.releaseCredit(u.c) })
}

// cmdGate makes every message up to the current seq committed and, if
// gated, holds every later one back until cmdRelease commits it
// (commit.go): the state leads from a log that reports its commits.
func (s *queueState) cmdGate(gated bool) {
	if !gated && s.rare == nil {
		return // nothing gated, nothing pending: nothing to make
	}
	r := s.rareState()
	r.gated = gated
	r.releasedSeq = s.nextSeq - 1
	r.pending.reset()
}

// cmdRelease commits every message up to seq, for a gated state: they may
// be delivered, expire and count for drop-head, which drops what the
// commit took past the limits. False if it commits nothing new.
func (s *queueState) cmdRelease(seq uint64) bool {
	r := s.rare
	if r == nil || !r.gated || seq <= r.releasedSeq {
		return false
	}
	r.releasedSeq = seq
	r.pending.release(seq)
	if s.a.overflow == OverflowDropHead {
		s.cmdTrim()
	}
	return true
}

// cmdSetArgs puts a in effect (the declared arguments with a policy) and
// enforces what changed: expiry under a new TTL, drop-head under new
// limits. A proxy's owner enforces them. It returns the arguments that
// were in effect.
func (s *queueState) cmdSetArgs(a queueArgs, now int64) queueArgs {
	old := *s.a
	// These only: the queue's type and the like stay as declared.
	n := old
	n.messageTTL, n.expires = a.messageTTL, a.expires
	n.maxLen, n.maxLenBytes, n.overflow = a.maxLen, a.maxLenBytes, a.overflow
	n.dlx, n.hasDLX, n.dlrk, n.hasDLRK = a.dlx, a.hasDLX, a.dlrk, a.hasDLRK
	n.deliveryLimit = a.deliveryLimit
	n.memLen, n.memBytes = a.memLen, a.memBytes
	n.sched = a.sched
	if n != old {
		s.a = sharedArgs(n)
	}
	if !s.env.envPages() {
		return old
	}
	if a.messageTTL != old.messageTTL {
		s.cmdExpire(now)
	}
	if a.overflow == OverflowDropHead {
		s.cmdTrim()
	}
	return old
}

// cmdBuffer takes a message a proxy's remote consumer pushed (its tag
// there is up) into the ready list; settling it settles it there.
func (s *queueState) cmdBuffer(m *Message, up uint64, redelivered bool) {
	e := entry{msg: m, seq: s.takeSeq(), up: up}
	if redelivered {
		e.deliveries = 1
	}
	s.ready.push(e)
}

// cmdDropBuffered forgets the ready messages a proxy buffered: its
// remote consumer stopped or was lost, so the owner redelivers them.
func (s *queueState) cmdDropBuffered() { s.ready.clear(false) }
