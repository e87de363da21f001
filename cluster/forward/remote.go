package forward

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// Delivery tags handed to the core: bit 63 says the delivery came from
// Get rather than the consumer; bits 40-62 hold the generation (of the
// consumer session, or of the connection the Get used); bits 0-39 the
// server's delivery id. A tag of an older generation is ignored.
const (
	tagGet     = 1 << 63
	tagGenBits = 23
	tagBits    = 40
	tagMask    = 1<<tagBits - 1
	genMask    = 1<<tagGenBits - 1
)

func makeTag(get bool, gen uint32, dtag uint64) uint64 {
	t := uint64(gen&genMask)<<tagBits | dtag&tagMask
	if get {
		t |= tagGet
	}
	return t
}

func splitTag(t uint64) (get bool, gen uint32, dtag uint64) {
	return t&tagGet != 0, uint32(t>>tagBits) & genMask, t & tagMask
}

// remote implements exchange.Remote. One goroutine (run, started by the
// first Consume, Ack or Nack) owns the consumer session and sends every
// settlement; Publish goes to the link's publisher; Get, Purge and Count
// run on the caller's goroutine.
type remote struct {
	f      *Forwarder
	vhost  string
	queue  string
	locate Locator
	log    *slog.Logger

	mu       sync.Mutex
	want     bool // a consumer is wanted
	prefetch int
	push     func(m *exchange.Message, tag uint64, redelivered bool)
	reset    func()
	// args, set by ConsumeWith, are the consumer's arguments; with them
	// the prefetch is the consumer's own (a stream's consumer needs
	// one), not a window that Consume resizes.
	args     exchange.Table
	withArgs bool
	gen      uint32   // consumer generation: bumped when a session ends
	acks     []settle // queued by Ack and Nack
	closed   bool
	started  bool
	getConn  *conn         // the connection of the last Get: its tags settle there
	wake     chan struct{} // cap 1
	loopDone chan struct{}

	getMu sync.Mutex // serializes Get

	// Publishes made while the queue could not be located (a quorum
	// queue electing its leader, a node restarting) wait here, in order,
	// for at most locateWait.
	waiting  []pubReq
	locating bool
	// later, set by HandBack, takes every publish from then on.
	later func(m *exchange.Message, done func(error))

	// Publishes handed to a link and awaiting their confirm (inflight.go).
	inflight pubFlights

	// confirmedBy is the address whose node confirmed a publish of this
	// Remote: from then on its publishes there carry no metadata index
	// (Forwarder.SetMetaIndex).
	confirmedBy atomic.Pointer[string]
}

// locateWait is how long publishes wait for an unlocatable queue before
// failing; maxWaiting bounds how many wait.
const (
	locateWait  = 5 * time.Second
	locateRetry = 50 * time.Millisecond
	maxWaiting  = MaxPending
	// unsentWait is how long a publish that could not be sent because
	// its owner was unreachable is kept for the next one (keepUnsent): a
	// quorum queue's leader whose process died is replaced well within
	// it (cluster/groups, peerdown.go); a classic queue whose home is
	// down is nacked after it.
	unsentWait = 2 * time.Second
	// notAppendedWait is how long a publish the owner refused as not
	// appended (ErrNotAppended: a quorum leader handing over) is kept
	// for the queue's next owner: a hand-over completes well within it.
	notAppendedWait = 5 * time.Second
)

type settle struct {
	tag          uint64
	ack, requeue bool
}

func newRemote(f *Forwarder, vhost, queue string, locate Locator) *remote {
	return &remote{f: f, vhost: vhost, queue: queue, locate: locate,
		log: f.log.With("vhost", vhost, "queue", queue),
		gen: 1, wake: make(chan struct{}, 1), loopDone: make(chan struct{})}
}

// Publish implements exchange.Remote: PublishPaced without the wait. It
// never blocks.
func (r *remote) Publish(m *exchange.Message, done func(error)) { r.PublishPaced(m, done) }

// PublishPaced implements exchange.PacedRemote. It calls the Locator and
// queues the message on the link to where the queue is now, without
// waiting. When that link has more than MaxPending publishes of the
// message's hop queued or unconfirmed it returns the wait for room, which
// the caller runs once it holds no lock: the owning node's back-pressure
// reaches the publisher, never a core lock.
func (r *remote) PublishPaced(m *exchange.Message, done func(error)) (wait func()) {
	r.mu.Lock()
	if later := r.later; later != nil {
		r.mu.Unlock()
		later(m, done)
		return nil
	}
	if r.closed {
		r.mu.Unlock()
		go done(ErrClosed)
		return nil
	}
	if r.locating {
		// Behind publishes still waiting for the queue's location.
		if len(r.waiting) >= maxWaiting {
			r.mu.Unlock()
			go done(ErrConnectionLost)
			return nil
		}
		r.waiting = append(r.waiting, pubReq{m: m, vhost: r.vhost, queue: r.queue, done: done})
		r.mu.Unlock()
		return nil
	}
	addr, err := r.locate()
	if err != nil {
		r.waiting = append(r.waiting, pubReq{m: m, vhost: r.vhost, queue: r.queue, done: done})
		r.locating = true
		r.mu.Unlock()
		go r.relocate(err)
		return nil
	}
	r.mu.Unlock()
	l := r.f.link(addr)
	if l == nil {
		go done(ErrClosed)
		return nil
	}
	if r.send(l, addr, pubReq{m: m, vhost: r.vhost, queue: r.queue, done: done}) {
		hop := int(m.Hops)
		return func() { l.pub.waitRoom(hop) }
	}
	return nil
}

// send hands w, whose done is the core's, to link l towards addr, with
// the metadata index it carries and its confirm tracked; a publish the
// link fails unsent (ErrUnsent) comes back to the Remote (keepUnsent)
// rather than to the core. It reports whether the link's budget is
// full (PublishPaced).
func (r *remote) send(l *link, addr string, w pubReq) bool {
	core, since := w.done, w.unsentSince
	m := w.m
	done := func(err error) {
		if (errors.Is(err, ErrUnsent) || errors.Is(err, ErrNotAppended)) && r.keepUnsent(m, core, since, err) {
			return
		}
		core(err)
	}
	w.meta, done = r.metaIndex(addr, done)
	w.done = r.tracked(addr, done)
	return l.pub.publish(w)
}

// keepUnsent takes back a publish that never left this node because its
// owner could not be reached (a quorum queue's leader whose process
// died, until its successor is located), or that its owner refused as
// not appended (ErrNotAppended: a leader handing over, whose log never
// appended it, so that no member holds it): it waits with the publishes
// waiting for the queue's location, and goes to whichever node the
// Locator names next (or, handed back, to this node's queue), instead of
// being nacked. false (the caller fails it) once it has been kept for
// unsentWait (notAppendedWait for ErrNotAppended) since it first failed,
// when too many wait, or when the Remote is closed.
func (r *remote) keepUnsent(m *exchange.Message, done func(error), since time.Time, err error) bool {
	keep := unsentWait
	if errors.Is(err, ErrNotAppended) {
		keep = notAppendedWait
	}
	if since.IsZero() {
		since = time.Now()
	} else if time.Since(since) > keep {
		return false
	}
	r.mu.Lock()
	if later := r.later; later != nil {
		r.mu.Unlock()
		later(m, done)
		return true
	}
	if r.closed || len(r.waiting) >= maxWaiting {
		r.mu.Unlock()
		return false
	}
	r.waiting = append(r.waiting, pubReq{m: m, vhost: r.vhost, queue: r.queue, done: done, unsentSince: since})
	start := !r.locating
	r.locating = true
	r.mu.Unlock()
	if start {
		go r.relocate(err)
	}
	return true
}

// metaIndex returns the metadata index a publish to addr carries, 0 once
// that node confirmed one of this Remote's publishes, and done wrapped
// to notice that confirm.
func (r *remote) metaIndex(addr string, done func(error)) (uint64, func(error)) {
	if r.f.applied == nil {
		return 0, done
	}
	if by := r.confirmedBy.Load(); by != nil && *by == addr {
		return 0, done
	}
	return r.f.applied(), func(err error) {
		if err == nil {
			r.confirmedBy.Store(&addr)
		}
		done(err)
	}
}

// HandBack implements exchange.HandBackRemote: the publishes waiting for
// the queue's location, which relocate has not sent, are the caller's now.
func (r *remote) HandBack(later func(m *exchange.Message, done func(error))) []exchange.HeldPublish {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.later = later
	held := make([]exchange.HeldPublish, len(r.waiting))
	for i, w := range r.waiting {
		held[i] = exchange.HeldPublish{Msg: w.m, Done: w.done}
	}
	r.waiting, r.locating = nil, false
	return held
}

// tracked wraps done for a publish sent to addr (see inflight).
func (r *remote) tracked(addr string, done func(error)) func(error) {
	cb, start := r.inflight.track(addr, done)
	if start {
		go r.watchInflight()
	}
	return cb
}

// relocate retries the Locator for the waiting publishes and sends them,
// in order, once it answers, or fails them after locateWait.
func (r *remote) relocate(err error) {
	deadline := time.Now().Add(locateWait)
	for {
		time.Sleep(locateRetry)
		r.mu.Lock()
		if r.closed {
			err = ErrClosed
		} else {
			var addr string
			if addr, err = r.locate(); err == nil {
				l := r.f.link(addr)
				if l == nil {
					err = ErrClosed
				} else {
					// Under r.mu, so that new publishes queue behind;
					// publish never waits (a budget overrun is waited
					// for by the next publishes, outside core locks).
					for _, w := range r.waiting {
						r.send(l, addr, w)
					}
					r.waiting, r.locating = nil, false
					r.mu.Unlock()
					return
				}
			}
		}
		if err == ErrClosed || time.Now().After(deadline) {
			ws := r.waiting
			r.waiting, r.locating = nil, false
			r.mu.Unlock()
			if len(ws) == 0 {
				return // handed back
			}
			r.log.Warn("publishes failed: the queue could not be located", "messages", len(ws), "err", err)
			for _, w := range ws {
				w.done(err)
			}
			return
		}
		r.mu.Unlock()
	}
}

// Consume implements exchange.Remote.
func (r *remote) Consume(prefetch int, push func(m *exchange.Message, tag uint64, redelivered bool), reset func()) {
	r.mu.Lock()
	r.want, r.prefetch, r.push, r.reset = true, prefetch, push, reset
	r.kickLocked()
	r.mu.Unlock()
}

// ConsumeWith implements exchange.StreamRemote: Consume with consumer
// arguments and a per-consumer prefetch. The next session (after a reset)
// uses the arguments given last, so a reset callback that calls it again
// decides where the new session starts.
func (r *remote) ConsumeWith(args exchange.Table, prefetch int, push func(m *exchange.Message, tag uint64, redelivered bool), reset func()) {
	r.mu.Lock()
	r.args, r.withArgs = args, true
	r.want, r.prefetch, r.push, r.reset = true, prefetch, push, reset
	r.kickLocked()
	r.mu.Unlock()
}

// StopConsuming implements exchange.Remote. Tags pushed before are dead
// at once; the consumer is cancelled by the goroutine, which makes the
// owning node requeue them. A push already under way may still
// arrive, with a dead tag.
func (r *remote) StopConsuming() {
	r.mu.Lock()
	if r.want {
		r.want = false
		r.gen++
	}
	r.kickLocked()
	r.mu.Unlock()
}

// Ack implements exchange.Remote; it queues the settlement.
func (r *remote) Ack(tag uint64) { r.settle(settle{tag: tag, ack: true}) }

// Nack implements exchange.Remote; it queues the settlement.
func (r *remote) Nack(tag uint64, requeue bool) { r.settle(settle{tag: tag, requeue: requeue}) }

func (r *remote) settle(s settle) {
	r.mu.Lock()
	if !r.closed {
		r.acks = append(r.acks, s)
		r.kickLocked()
	}
	r.mu.Unlock()
}

// kickLocked wakes the goroutine, starting it if need be.
func (r *remote) kickLocked() {
	if !r.started {
		r.started = true
		go r.run()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Close implements exchange.Remote. It does not wait for the goroutine.
func (r *remote) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed, r.want = true, false
	r.gen++
	// A stream consumer's (ConsumeWith) last acks are still sent before
	// its cancel: they are its named offset's last moves.
	if !r.withArgs {
		r.acks = nil
	}
	r.kickLocked()
	r.mu.Unlock()
	if r.inflight.close() {
		go r.watchInflight()
	}
	r.f.forget(r)
}

// wait waits for the goroutine, if it was started, to finish after Close.
func (r *remote) wait() {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if started {
		<-r.loopDone
	}
}
