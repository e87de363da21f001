package quorum

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Log is the MessageLog (and ReturnLog) of a quorum queue on the node
// that leads its Raft group: it turns the core's appends, deletes and
// returns into batched Raft entries that every member's FSM applies.
//
// Ops are encoded into the open batch as they are queued, under a mutex,
// and never wait for Raft (but see Options.MaxPendingBytes). Three
// goroutines move batches along:
//
//   - the proposer takes the oldest queued batch once fewer than
//     MaxInFlight are in flight (and, if any is, once the batch holds
//     EagerBytes) and hands it to raft.Apply; whatever is queued while
//     it waits goes into the next batch (group commit);
//   - the waiter waits for each proposed batch's ApplyFuture, in order;
//   - the notifier calls the batch's done callbacks, in order, so a slow
//     or blocking callback (one that takes the queue lock) never holds
//     up Raft or a caller blocked on MaxPendingBytes.
//
// Raft applies entries in the order they were proposed, and the proposer
// proposes batches in the order they were queued, so ops are applied in
// the order they were queued.
//
// A Log fails for good on its first error (raft.ErrNotLeader,
// raft.ErrLeadershipLost, raft.ErrEnqueueTimeout, raft.ErrRaftShutdown,
// ...): no batch is proposed after that, and every op queued later fails
// with the same error. An op that was never appended to the Raft log (its
// batch was not proposed, or Raft answered that it did not append it)
// fails with a *NotAppendedError wrapping the error: no member will ever
// apply it, so its publisher's message may go to the next leader
// instead. Any other error is an unknown outcome. What the FSMs hold is then a prefix of the ops
// queued (every op reported done(nil), perhaps some reported done(err),
// plus ops of batches already in flight), and the node rebuilds the
// queue from the FSM of whichever node leads next. A Log serves one
// leadership term: make a new one when Watch reports leadership again.
//
// The qid arguments are ignored: a Log serves the one queue its Raft
// group holds.
type Log struct {
	r    *raft.Raft
	opts Options

	mu           sync.Mutex
	ready        sync.Cond // the proposer waits here for a batch (or Close)
	space        sync.Cond // callers wait here while pendingBytes >= MaxPendingBytes
	pending      []*batch  // queued, not proposed, oldest first; the last one is open
	pendingBytes int
	flying       int // batches proposed, their futures not yet resolved
	closed       bool
	err          error // the first failure

	slots    chan struct{} // one token per batch in flight
	inflight chan *batch   // proposer → waiter, in order
	quit     chan struct{} // closed by Close

	nmu      sync.Mutex
	ncond    sync.Cond
	notify   []*batch // waiter → notifier, in order
	waitDone bool     // the waiter has exited: the notifier stops when notify is empty

	wg sync.WaitGroup
}

// batch is one Raft entry in the making.
type batch struct {
	buf   []byte
	dones []func(error)
	fut   raft.ApplyFuture // nil if not proposed
	err   error            // the outcome
	// notAppended: err says the batch was never appended to the Raft
	// log (NotAppendedError).
	notAppended bool
	slot        bool // holds a token of Log.slots
	// lastAppend is the key of the batch's last append, if hasAppend.
	lastAppend uint64
	hasAppend  bool
}

// New returns a Log proposing to r, which must have been created with
// this queue's FSM (raft.NewRaft takes the FSM first; the Log comes
// after, typically once Watch reports leadership). Zero options take
// their defaults.
func New(r *raft.Raft, opts Options) (*Log, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	l := &Log{
		r:        r,
		opts:     opts,
		slots:    make(chan struct{}, opts.MaxInFlight),
		inflight: make(chan *batch, opts.MaxInFlight),
		quit:     make(chan struct{}),
	}
	l.ready.L, l.space.L, l.ncond.L = &l.mu, &l.mu, &l.nmu
	l.wg.Add(3)
	go l.propose()
	go l.wait()
	go l.deliver()
	return l, nil
}

// AppendMessage queues message seq (data is copied) and returns at once.
// done, if not nil, is called exactly once, from another goroutine and
// never from within AppendMessage: with nil once the batch holding the
// message is committed by a majority and applied by this node's FSM,
// with an error otherwise. Callbacks run in the order of the calls.
func (l *Log) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	l.enqueue(op{kind: opAppend, seq: seq, data: data}, done)
}

// DeleteMessage queues the removal of message seq. An unknown seq is
// ignored when applied.
func (l *Log) DeleteMessage(qid, seq uint64) { l.enqueue(op{kind: opDelete, seq: seq}, nil) }

// DeleteRange queues the removal of every message whose key is in
// [from, to), as one op that each member applies as one range delete of
// its store (Store.DeleteMessages). count and bytes are what the range
// holds, which the members subtract from their counts (an FSM does not
// read its store to count): the caller reads them from this node's store,
// whose FSM has applied every entry before this term (Watch), and must
// see to it that no op it queued before this one and that is not applied
// yet adds or removes a key in the range. The range must not be empty,
// must lie within one key group (keys sharing their top byte) and count
// must not exceed its width, or nothing is queued and the error wraps
// ErrBadRange.
func (l *Log) DeleteRange(qid, from, to uint64, count, bytes int64) error {
	if count < 0 || bytes < 0 || !validRange(from, to, uint64(count)) {
		return fmt.Errorf("%w: [%d, %d) of %d messages, %d bytes", ErrBadRange, from, to, count, bytes)
	}
	l.enqueue(op{kind: opDeleteRange, seq: from, to: to, count: uint64(count), bytes: uint64(bytes)}, nil)
	return nil
}

// ReturnMessage queues one more return (delivery + requeue) of message
// seq. An unknown seq is ignored when applied.
func (l *Log) ReturnMessage(qid, seq uint64) { l.enqueue(op{kind: opReturn, seq: seq}, nil) }

// HoldMessage queues a message to be kept aside under key (data is
// copied): a retry waiting for its delay. done as for AppendMessage.
func (l *Log) HoldMessage(qid, key uint64, data []byte, done func(error)) {
	l.enqueue(op{kind: opHold, seq: key, data: data}, done)
}

// ReleaseMessage queues the removal of held message key.
func (l *Log) ReleaseMessage(qid, key uint64) { l.enqueue(op{kind: opRelease, seq: key}, nil) }

func (l *Log) enqueue(o op, done func(error)) {
	l.mu.Lock()
	for l.pendingBytes >= l.opts.MaxPendingBytes && !l.closed {
		l.space.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		if done != nil {
			go done(&NotAppendedError{Err: ErrClosed})
		}
		return
	}
	var b *batch
	if n := len(l.pending); n > 0 && len(l.pending[n-1].buf) < l.opts.MaxBatchBytes {
		b = l.pending[n-1]
	} else {
		b = &batch{buf: newEntry(min(opSize(o), l.opts.MaxBatchBytes))}
		l.pending = append(l.pending, b)
		l.pendingBytes += len(b.buf)
		l.ready.Signal()
	}
	n := len(b.buf)
	b.buf = appendOp(b.buf, o)
	if e := l.opts.EagerBytes; n < e && len(b.buf) >= e && len(l.pending) == 1 {
		l.ready.Signal() // the proposer may be waiting for it to grow
	}
	if o.kind == opAppend {
		b.lastAppend, b.hasAppend = o.seq, true
	}
	l.pendingBytes += len(b.buf) - n
	if done != nil {
		b.dones = append(b.dones, done)
	}
	l.mu.Unlock()
}

// ReportsApplied implements exchange.CommitLog: the Log reports its
// appends applied through Options.Applied when that is set, and the
// queue then delivers only what was reported.
func (l *Log) ReportsApplied() bool { return l.opts.Applied != nil }

// Err returns the error the Log failed with, ErrClosed after Close, or
// nil while it works.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil && l.closed {
		return ErrClosed
	}
	return l.err
}

// Close stops the Log: ops not yet proposed, and any queued later, fail
// with ErrClosed; Close waits for the batches in flight to complete (Raft
// resolves them: committed, or failed when leadership is lost or Raft
// shuts down) and for every callback to have returned. Close must not be
// called from a done callback.
func (l *Log) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.quit)
		l.ready.Broadcast()
		l.space.Broadcast()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return nil
}

// take removes the oldest queued batch, waiting for one (and, while
// another is in flight, for it to hold EagerBytes); nil once closed.
func (l *Log) take() (*batch, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.closed && (len(l.pending) == 0 || (l.flying > 0 && !l.eagerLocked())) {
		l.ready.Wait()
	}
	if l.closed {
		return nil, nil
	}
	b := l.pending[0]
	l.pending[0] = nil
	l.pending = l.pending[1:]
	l.pendingBytes -= len(b.buf)
	l.flying++
	l.space.Broadcast()
	return b, l.err
}

// eagerLocked reports whether the oldest queued batch is proposed while
// others are in flight: it holds EagerBytes, or it is closed (a later one
// is open), or EagerBytes is negative.
func (l *Log) eagerLocked() bool {
	e := l.opts.EagerBytes
	return e < 0 || len(l.pending) > 1 || len(l.pending[0].buf) >= e
}

// propose is the proposer goroutine.
func (l *Log) propose() {
	defer l.wg.Done()
	defer close(l.inflight)
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.quit:
			l.failPending()
			return
		}
		b, err := l.take()
		if b == nil {
			<-l.slots
			l.failPending()
			return
		}
		b.slot = true
		if err != nil {
			b.err = err
		} else {
			b.fut = l.r.Apply(b.buf, l.opts.ApplyTimeout)
		}
		l.inflight <- b
	}
}

// failPending hands every queued batch to the waiter as failed with
// ErrClosed (Close has been called: nothing is queued any more).
func (l *Log) failPending() {
	l.mu.Lock()
	rest := l.pending
	l.pending, l.pendingBytes = nil, 0
	l.space.Broadcast()
	l.mu.Unlock()
	for _, b := range rest {
		b.err = ErrClosed
		l.inflight <- b
	}
}

// wait is the waiter goroutine.
func (l *Log) wait() {
	defer l.wg.Done()
	for b := range l.inflight {
		if b.fut != nil {
			b.err = l.futureError(b.fut)
			b.notAppended = notAppendedByRaft(b.err)
			if b.err == nil {
				if err, ok := b.fut.Response().(error); ok {
					b.err = err // applied: its FSM's error
				}
			}
		} else {
			b.notAppended = true // never handed to Raft
		}
		if b.slot {
			l.mu.Lock()
			l.flying--
			if l.flying == 0 {
				l.ready.Signal() // a waiting batch goes now, whatever its size
			}
			l.mu.Unlock()
			<-l.slots
		}
		if b.err != nil && b.err != ErrClosed {
			l.fail(b.err)
		}
		b.buf, b.fut = nil, nil
		l.nmu.Lock()
		l.notify = append(l.notify, b)
		l.ncond.Signal()
		l.nmu.Unlock()
	}
	l.nmu.Lock()
	l.waitDone = true
	l.ncond.Signal()
	l.nmu.Unlock()
}

// shutdownPoll is how often a batch's wait for its future looks whether
// Raft has shut down.
const shutdownPoll = 100 * time.Millisecond

// futureError is f.Error(), or raft.ErrRaftShutdown once Raft has shut
// down without resolving f: hashicorp/raft never answers the futures of
// committed entries still queued for its FSM when it shuts down (its FSM
// goroutine returns and leaves them in its channel), and a done callback
// must always come. Such an entry may be committed: the caller treats
// the error as an unknown outcome (a publisher is nacked and
// republishes).
func (l *Log) futureError(f raft.ApplyFuture) error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	t := time.NewTicker(shutdownPoll)
	defer t.Stop()
	for {
		select {
		case err := <-ch:
			return err
		case <-t.C:
			if l.r.State() == raft.Shutdown {
				select {
				case err := <-ch:
					return err
				default:
					return raft.ErrRaftShutdown
				}
			}
		}
	}
}

// fail records the Log's first failure.
func (l *Log) fail(err error) {
	l.mu.Lock()
	first := l.err == nil
	if first {
		l.err = err
	}
	l.mu.Unlock()
	if first {
		l.opts.Logger.Warn("quorum log failed; no more batches are proposed", "err", err)
	}
}

// deliver is the notifier goroutine.
func (l *Log) deliver() {
	defer l.wg.Done()
	for {
		l.nmu.Lock()
		for len(l.notify) == 0 && !l.waitDone {
			l.ncond.Wait()
		}
		if len(l.notify) == 0 {
			l.nmu.Unlock()
			return
		}
		bs := l.notify
		l.notify = nil
		l.nmu.Unlock()
		for _, b := range bs {
			if b.err == nil && b.hasAppend && l.opts.Applied != nil {
				l.opts.Applied(b.lastAppend)
			}
			err := b.err
			if err != nil && b.notAppended {
				err = &NotAppendedError{Err: err}
			}
			for _, done := range b.dones {
				done(err)
			}
		}
	}
}
