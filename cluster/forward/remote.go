package forward

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/exchange"
)

// Delivery tags handed to the core: bit 63 says the delivery came from
// basic.get (the get channel) rather than the consumer; bits 40-62 hold
// the generation of that channel; bits 0-39 the upstream delivery tag. A
// tag of an older generation is ignored.
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
// first Consume, Ack or Nack) owns the consumer channel and sends every
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
	// args, set by ConsumeWith, are the consumer's basic.consume
	// arguments; with them the prefetch is the consumer's own (a
	// stream's consumer needs one), not the channel's.
	args     amqp.Table
	withArgs bool
	gen      uint32   // consumer generation: bumped when a session ends
	acks     []settle // queued by Ack and Nack
	closed   bool
	started  bool
	getCh    *amqp.Channel // the get channel, also under getMu to change
	getAddr  string
	getGen   uint32
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
)

type settle struct {
	tag          uint64
	ack, requeue bool
}

func newRemote(f *Forwarder, vhost, queue string, locate Locator) *remote {
	return &remote{f: f, vhost: vhost, queue: queue, locate: locate,
		log: f.log.With("vhost", vhost, "queue", queue), getGen: 1,
		gen: 1, wake: make(chan struct{}, 1), loopDone: make(chan struct{})}
}

// Publish implements exchange.Remote. It calls the Locator and queues the
// message on the link to where the queue is now; it blocks only while
// that link has MaxPending publishes queued or unconfirmed.
func (r *remote) Publish(m *exchange.Message, done func(error)) {
	r.mu.Lock()
	if later := r.later; later != nil {
		r.mu.Unlock()
		later(m, done)
		return
	}
	if r.closed {
		r.mu.Unlock()
		go done(ErrClosed)
		return
	}
	if r.locating {
		// Behind publishes still waiting for the queue's location.
		if len(r.waiting) >= maxWaiting {
			r.mu.Unlock()
			go done(ErrConnectionLost)
			return
		}
		r.waiting = append(r.waiting, pubReq{m: m, queue: r.queue, done: done})
		r.mu.Unlock()
		return
	}
	addr, err := r.locate()
	if err != nil {
		r.waiting = append(r.waiting, pubReq{m: m, queue: r.queue, done: done})
		r.locating = true
		r.mu.Unlock()
		go r.relocate(err)
		return
	}
	r.mu.Unlock()
	l := r.f.link(addr, r.vhost)
	if l == nil {
		go done(ErrClosed)
		return
	}
	meta, done := r.metaIndex(addr, done)
	l.pub.publish(m, r.queue, meta, r.tracked(addr, done))
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
				l := r.f.link(addr, r.vhost)
				if l == nil {
					err = ErrClosed
				} else {
					// Under r.mu, so that new publishes queue behind.
					for _, w := range r.waiting {
						meta, done := r.metaIndex(addr, w.done)
						l.pub.publish(w.m, w.queue, meta, r.tracked(addr, done))
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

// ConsumeWith implements exchange.StreamRemote: Consume with basic.consume
// arguments and a per-consumer prefetch. The next session (after a reset)
// uses the arguments given last, so a reset callback that calls it again
// decides where the new session starts.
func (r *remote) ConsumeWith(args exchange.Table, prefetch int, push func(m *exchange.Message, tag uint64, redelivered bool), reset func()) {
	t, err := outTable(args, 0)
	if err != nil {
		r.log.Warn("consumer arguments not forwarded", "err", err)
		t = nil
	}
	r.mu.Lock()
	r.args, r.withArgs = t, true
	r.want, r.prefetch, r.push, r.reset = true, prefetch, push, reset
	r.kickLocked()
	r.mu.Unlock()
}

// StopConsuming implements exchange.Remote. Tags pushed before are dead
// at once; the consumer channel is closed by the goroutine, which makes
// the owning node requeue them. A push already under way may still
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
	// its channel closes: they are its named offset's last moves.
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

// Get implements exchange.Remote: basic.get on a channel kept for it
// (an unacked message stays on that channel until settled).
func (r *remote) Get(noAck bool) (m *exchange.Message, tag uint64, redelivered bool, remaining int, ok bool, err error) {
	r.getMu.Lock()
	defer r.getMu.Unlock()
	var (
		d   amqp.Delivery
		got bool
		gen uint32
		l   *link
	)
	// On a timeout the closure may still be running: its results are read
	// only when it returned.
	err = withTimeout(func() error {
		addr, err := r.locate()
		if err != nil {
			return err
		}
		ll := r.f.link(addr, r.vhost)
		if ll == nil {
			return ErrClosed
		}
		r.mu.Lock()
		l = ll
		r.mu.Unlock()
		ch, g, err := r.getChannel(ll)
		if err != nil {
			return err
		}
		if d, got, err = ch.Get(r.queue, noAck); err != nil {
			r.dropGetChannel(ch)
			return err
		}
		gen = g
		return nil
	}, func() {
		r.mu.Lock()
		ll := l
		r.mu.Unlock()
		if ll != nil {
			ll.dropConn()
		}
	})
	if err != nil || !got {
		return nil, 0, false, 0, false, err
	}
	if !noAck {
		tag = makeTag(true, gen, d.DeliveryTag)
	}
	return fromDelivery(&d), tag, d.Redelivered, int(d.MessageCount), true, nil
}

// getChannel returns the get channel to l, opening a new one (of a new
// generation) if the queue moved or the channel died. Called with getMu.
func (r *remote) getChannel(l *link) (*amqp.Channel, uint32, error) {
	r.mu.Lock()
	ch, addr, gen := r.getCh, r.getAddr, r.getGen
	r.mu.Unlock()
	if ch != nil && addr == l.key.addr && !ch.IsClosed() {
		return ch, gen, nil
	}
	if ch != nil {
		r.dropGetChannel(ch)
	}
	c, err := l.connection()
	if err != nil {
		return nil, 0, err
	}
	nch, err := c.Channel()
	if err != nil {
		return nil, 0, errors.Join(ErrConnectionLost, err)
	}
	r.mu.Lock()
	r.getCh, r.getAddr = nch, l.key.addr
	gen = r.getGen
	r.mu.Unlock()
	return nch, gen, nil
}

// dropGetChannel retires ch (its unacked messages are requeued upstream)
// and the tags of its generation.
func (r *remote) dropGetChannel(ch *amqp.Channel) {
	r.mu.Lock()
	if r.getCh == ch {
		r.getCh = nil
		r.getGen++
	}
	r.mu.Unlock()
	go ch.Close()
}

// Purge implements exchange.Remote.
func (r *remote) Purge() (int, error) {
	l, err := r.link()
	if err != nil {
		return 0, err
	}
	var n int
	err = l.control(func(ch *amqp.Channel) error {
		var err error
		n, err = ch.QueuePurge(r.queue, false)
		return err
	})
	if err != nil { // n may still be written by a call that timed out
		return 0, err
	}
	return n, nil
}

// Count implements exchange.Remote (a passive queue.declare).
func (r *remote) Count() (messages, consumers int, err error) {
	l, err := r.link()
	if err != nil {
		return 0, 0, err
	}
	var q amqp.Queue
	err = l.control(func(ch *amqp.Channel) error {
		var err error
		q, err = ch.QueueDeclarePassive(r.queue, false, false, false, false, nil)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return q.Messages, q.Consumers, nil
}

func (r *remote) link() (*link, error) {
	addr, err := r.locate()
	if err != nil {
		return nil, err
	}
	l := r.f.link(addr, r.vhost)
	if l == nil {
		return nil, ErrClosed
	}
	return l, nil
}

// session is one upstream consumer: a channel with basic.consume.
type session struct {
	addr       string
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	gen        uint32
	prefetch   int
	withArgs   bool     // the prefetch is the consumer's (ConsumeWith)
	unacked    []uint64 // delivery tags pushed and not settled, ascending
}

// run is the remote's goroutine: it keeps a consumer session going while
// one is wanted, moves it when the Locator says the queue moved, and
// sends settlements.
func (r *remote) run() {
	defer close(r.loopDone)
	var (
		s        *session
		backoff  time.Duration
		retryAt  time.Time
		acks     []settle
		relocate = time.NewTicker(relocateEvery)
		retry    = time.NewTimer(time.Hour)
	)
	defer relocate.Stop()
	defer retry.Stop()
	for {
		r.mu.Lock()
		closed, want, prefetch, gen := r.closed, r.want, r.prefetch, r.gen
		acks, r.acks = r.acks, acks[:0]
		getCh, getGen := r.getCh, r.getGen
		r.mu.Unlock()

		r.sendSettles(s, getCh, getGen, acks)
		clear(acks)
		if closed {
			if s != nil {
				_ = s.ch.Close()
			}
			if getCh != nil {
				_ = getCh.Close()
			}
			return
		}
		if s != nil && (!want || s.gen != gen) {
			_ = s.ch.Close() // upstream requeues what is unacked
			s = nil
		}
		if s != nil && prefetch != s.prefetch {
			if err := s.ch.Qos(prefetch, 0, !s.withArgs); err != nil {
				s = r.lost(s, err)
			} else {
				s.prefetch = prefetch
			}
		}
		if s == nil && want && !time.Now().Before(retryAt) {
			var err error
			if s, err = r.start(prefetch, gen); err != nil {
				backoff = min(max(2*backoff, minBackoff), maxBackoff)
				retryAt = time.Now().Add(backoff)
				retry.Reset(backoff)
				r.log.Debug("cannot consume from the owning node", "err", err, "retry_in", backoff)
			} else {
				backoff = 0
			}
		}

		var deliveries <-chan amqp.Delivery
		if s != nil {
			deliveries = s.deliveries
		}
		select {
		case <-r.wake:
		case <-retry.C:
		case d, ok := <-deliveries:
			if !ok {
				s = r.lost(s, errors.New("channel closed"))
				continue
			}
			r.mu.Lock()
			push, live := r.push, r.want && r.gen == s.gen
			r.mu.Unlock()
			if !live || push == nil {
				continue // the channel is closed next round: requeued
			}
			s.unacked = append(s.unacked, d.DeliveryTag)
			push(fromDelivery(&d), makeTag(false, s.gen, d.DeliveryTag), d.Redelivered)
		case <-relocate.C:
			if s == nil {
				continue
			}
			if addr, err := r.locate(); err == nil && addr != s.addr {
				r.log.Info("queue moved", "from", s.addr, "to", addr)
				s = r.lost(s, nil)
			}
		}
	}
}

// start opens a consumer session where the queue is now.
func (r *remote) start(prefetch int, gen uint32) (*session, error) {
	addr, err := r.locate()
	if err != nil {
		return nil, err
	}
	l := r.f.link(addr, r.vhost)
	if l == nil {
		return nil, ErrClosed
	}
	r.mu.Lock()
	args, withArgs := r.args, r.withArgs
	r.mu.Unlock()
	var s *session
	err = withTimeout(func() error {
		c, err := l.connection()
		if err != nil {
			return err
		}
		ch, err := c.Channel()
		if err != nil {
			return errors.Join(ErrConnectionLost, err)
		}
		if err := ch.Qos(prefetch, 0, !withArgs); err != nil {
			_ = ch.Close()
			return err
		}
		ds, err := ch.Consume(r.queue, "", false, false, false, false, args)
		if err != nil {
			_ = ch.Close()
			return err
		}
		s = &session{addr: addr, ch: ch, deliveries: ds, gen: gen, prefetch: prefetch, withArgs: withArgs}
		return nil
	}, l.dropConn) // a late session dies with the connection
	if err != nil {
		return nil, err
	}
	return s, nil
}

// lost ends session s (its channel died, or the queue moved): its tags
// become dead, and reset tells the core. It returns nil, the new session.
func (r *remote) lost(s *session, why error) *session {
	_ = s.ch.Close()
	r.mu.Lock()
	var reset func()
	if r.gen == s.gen {
		r.gen++
		reset = r.reset
	}
	r.mu.Unlock()
	if why != nil {
		r.log.Info("upstream consumer lost", "addr", s.addr, "err", why)
	}
	if reset != nil {
		reset()
	}
	return nil
}

// sendSettles sends queued settlements: consumer tags of the live
// session, with one multiple=true ack for a run of acks from the oldest
// unacked delivery, and get tags on the live get channel. Tags of older
// generations, and unknown tags (settled twice), are dropped: AMQP would
// close the channel for them.
func (r *remote) sendSettles(s *session, getCh *amqp.Channel, getGen uint32, ops []settle) {
	if len(ops) == 0 {
		return
	}
	var acked map[uint64]bool
	for _, op := range ops {
		get, gen, dtag := splitTag(op.tag)
		switch {
		case get:
			if getCh == nil || gen != getGen&genMask {
				continue
			}
			if op.ack {
				_ = getCh.Ack(dtag, false)
			} else {
				_ = getCh.Nack(dtag, false, op.requeue)
			}
		case s != nil && gen == s.gen&genMask:
			if _, found := slices.BinarySearch(s.unacked, dtag); !found {
				continue
			}
			if op.ack {
				if acked == nil {
					acked = map[uint64]bool{}
				}
				acked[dtag] = true
				continue
			}
			_ = s.ch.Nack(dtag, false, op.requeue)
			s.unacked = remove(s.unacked, dtag)
		}
	}
	if len(acked) == 0 {
		return
	}
	k := 0
	for k < len(s.unacked) && acked[s.unacked[k]] {
		k++
	}
	if k > 0 {
		_ = s.ch.Ack(s.unacked[k-1], k > 1)
		for _, t := range s.unacked[:k] {
			delete(acked, t)
		}
		s.unacked = append(s.unacked[:0], s.unacked[k:]...)
	}
	for t := range acked {
		_ = s.ch.Ack(t, false)
		s.unacked = remove(s.unacked, t)
	}
}

// remove deletes t from the sorted slice ts.
func remove(ts []uint64, t uint64) []uint64 {
	if i, found := slices.BinarySearch(ts, t); found {
		return slices.Delete(ts, i, i+1)
	}
	return ts
}
