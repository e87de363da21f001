package exchange

// queueState is what a classic queue (or a quorum queue led here) knows
// of its messages: its arguments in effect, the ready list with its
// paging, the unacked deliveries and the next seq. Its commands (the cmd*
// methods, queue.go) change it and nothing else: what they do outside it
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

	a       queueArgs // in effect: the declared ones with the policy (policy.go)
	nextSeq uint64
	ready   readyList
	unacked unackedSet
	// gated is set while the queue leads from a CommitLog (commit.go):
	// only messages with seqs up to releasedSeq, the committed ones, are
	// delivered.
	gated       bool
	releasedSeq uint64

	fx effects
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
	// Carried out once q.mu is released.
	dl   []deadLetter
	kick []*Limit
	// memDelta is the change of the ready list's in-memory bytes counted
	// in the broker's total (memUsed), in steps of memQuantum.
	memDelta int64
	// expiring: a message with a per-message TTL was read back.
	expiring bool
	// acks is the number of messages acknowledged (counters).
	acks uint64
	// problems found reading the store, to be logged and counted.
	notes []stateNote
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
func (s *queueState) released(e *entry) bool { return e.seq <= s.releasedSeq }
