package forward

import (
	"errors"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/exchange"
)

// publisher is a link's publishing side: one goroutine that takes what
// Publish queued, in batches, and publishes it on a confirm-mode channel
// of the message's hop; a second goroutine per channel matches
// confirms (which amqp091-go hands over in tag order, splitting
// multiple=true acks into one per tag) to a FIFO of callbacks.
//
// Why a channel per hop: amqp091-go releases a channel's confirms in tag
// order, so a confirm waits for every earlier one on its channel. A
// message that the owning node forwards again (its view of where the
// queue lives is behind: a classic queue declared on two nodes at once, a
// quorum queue that just changed leader) is confirmed only once its next
// hop is. If that next hop came back on the same channel behind it, each
// would wait for the other for ever, and every later confirm of the link
// with them. Messages of hop k wait only for earlier ones of hop k and
// for their own hop k+1, and the last hop never forwards (MaxHops), so
// no wait can close a circle.
type publisher struct {
	l *link

	mu      sync.Mutex
	space   sync.Cond    // signalled when pending drops
	queue   []pubReq     // not yet sent
	pending [MaxHops]int // by hop: queued + sent and awaiting a confirm
	closed  bool
	started bool

	wake chan struct{} // cap 1
	stop chan struct{}
}

type pubReq struct {
	m     *exchange.Message
	queue string
	meta  uint64 // the metadata index it carries, 0 for none (Forwarder.SetMetaIndex)
	done  func(error)
}

// hop indexes r's channel and budget: how many times its message was
// forwarded before, 0 for one published on this node.
func (r *pubReq) hop() int { return int(r.m.Hops) }

func newPublisher(l *link) *publisher {
	p := &publisher{l: l, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	p.space.L = &p.mu
	return p
}

// publish queues m for queue. It blocks only while MaxPending publishes
// are queued or unconfirmed.
func (p *publisher) publish(m *exchange.Message, queue string, meta uint64, done func(error)) {
	if int(m.Hops) >= MaxHops {
		// Forwarded MaxHops times already: the nodes disagree about
		// where the queue lives; refuse rather than pass it on.
		p.l.log.Warn("message refused: forwarded too many times", "queue", queue, "hops", m.Hops)
		go done(ErrTooManyHops)
		return
	}
	p.mu.Lock()
	// Each hop has its own budget: a forward of the next hop must
	// never wait for room that messages waiting on it hold.
	hop := int(m.Hops)
	for p.pending[hop] >= MaxPending && !p.closed {
		p.space.Wait()
	}
	if p.closed {
		p.mu.Unlock()
		go done(ErrClosed)
		return
	}
	p.queue = append(p.queue, pubReq{m: m, queue: queue, meta: meta, done: done})
	p.pending[hop]++
	if !p.started {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// finished releases n pending slots. Called before the callbacks run, so
// that a callback waiting for a lock held by a blocked Publish cannot
// deadlock.
func (p *publisher) finished(hop, n int) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	p.pending[hop] -= n
	p.space.Broadcast()
	p.mu.Unlock()
}

func (p *publisher) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.space.Broadcast()
	p.mu.Unlock()
	close(p.stop)
}

func (p *publisher) run() {
	var cur [MaxHops]*confirmChan // by hop
	var batch []pubReq
	for {
		select {
		case <-p.wake:
		case <-p.stop:
		}
		p.mu.Lock()
		closed := p.closed
		batch, p.queue = p.queue, batch[:0]
		p.mu.Unlock()
		if closed {
			p.fail(batch, ErrClosed)
			for _, cc := range cur {
				if cc != nil {
					_ = cc.ch.Close() // its listener fails what is unconfirmed
				}
			}
			return
		}
		p.send(&cur, batch)
		clear(batch) // drop references to messages and callbacks
	}
}

// send publishes a batch, each message on the channel of its hop,
// opening a channel where there is none or it died; what cannot be
// published fails at once.
func (p *publisher) send(cur *[MaxHops]*confirmChan, batch []pubReq) {
	now := time.Now().UnixNano()
	for i, r := range batch {
		hop := r.hop()
		pub, err := toPublishing(r.m, r.queue, r.meta)
		if err != nil {
			p.fail(batch[i:i+1], err)
			continue
		}
		for attempt := 0; ; attempt++ {
			cc := cur[hop]
			if cc == nil || cc.isDead() {
				if cc, err = p.open(hop); err != nil {
					// The peer is unreachable: fail the rest of the batch
					// rather than hold the core's publishers.
					cur[hop] = nil
					p.fail(batch[i:], err)
					return
				}
				cur[hop] = cc
			}
			if cc.send(r.queue, pub, r.done, now) {
				break
			}
			if attempt == 1 {
				p.fail(batch[i:i+1], ErrConnectionLost)
				break
			}
		}
	}
}

func (p *publisher) fail(rs []pubReq, err error) {
	var n [MaxHops]int
	for i := range rs {
		n[rs[i].hop()]++
	}
	for hop, k := range n {
		p.finished(hop, k)
	}
	for _, r := range rs {
		r.done(err)
	}
}

// open makes a new confirm-mode channel for messages of hop and starts
// its listener.
func (p *publisher) open(hop int) (*confirmChan, error) {
	c, err := p.l.connection()
	if err != nil {
		return nil, err
	}
	ch, err := c.Channel()
	if err != nil {
		return nil, errors.Join(ErrConnectionLost, err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, errors.Join(ErrConnectionLost, err)
	}
	cc := &confirmChan{p: p, ch: ch, hop: hop}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go cc.listen(confirms, closes)
	return cc, nil
}

// confirmChan is one confirm-mode channel and its callbacks in tag order.
type confirmChan struct {
	p   *publisher
	ch  *amqp.Channel
	hop int

	mu   sync.Mutex
	fifo []inflight // fifo[head:] await their confirm, tags ascending
	head int
	dead bool
}

type inflight struct {
	tag  uint64
	at   int64 // when it was sent (unix ns, per batch)
	done func(error)
}

func (cc *confirmChan) isDead() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.dead
}

// send publishes on the channel; false if the channel is already dead
// (done is then not taken). Once it returns true, done belongs to the
// listener.
func (cc *confirmChan) send(queue string, pub amqp.Publishing, done func(error), now int64) bool {
	cc.mu.Lock()
	if cc.dead {
		cc.mu.Unlock()
		return false
	}
	// Only this goroutine publishes on the channel: the tag is ours.
	cc.fifo = append(cc.fifo, inflight{tag: cc.ch.GetNextPublishSeqNo(), at: now, done: done})
	cc.mu.Unlock()
	if err := cc.ch.Publish("", queue, false, false, pub); err != nil {
		// The channel or connection is gone; closing it makes sure the
		// listener fails every callback, this one included.
		_ = cc.ch.Close()
	}
	return true
}

// listen settles callbacks as confirms arrive, and fails the rest once
// the channel is closed. A channel whose oldest publish has waited
// stuckAfter for its confirm is closed (its publishes fail, the next ones
// go on a new channel): the owning node answers every publish, so this
// is a fault worth an error in the log, and it must not hold the link.
func (cc *confirmChan) listen(confirms <-chan amqp.Confirmation, closes <-chan *amqp.Error) {
	var settled []inflight
	check := time.NewTicker(stuckAfter / 4)
	defer check.Stop()
	for {
		var c amqp.Confirmation
		var ok bool
		select {
		case c, ok = <-confirms:
		case <-check.C:
			cc.mu.Lock()
			var oldest inflight
			if cc.head < len(cc.fifo) {
				oldest = cc.fifo[cc.head]
			}
			cc.mu.Unlock()
			if oldest.at != 0 && time.Since(time.Unix(0, oldest.at)) > stuckAfter {
				cc.p.l.log.Error("no confirm from the owning node: closing the channel", "tag", oldest.tag,
					"waited", time.Since(time.Unix(0, oldest.at)).Round(time.Millisecond))
				go cc.ch.Close() // confirms is closed once it is
			}
			continue
		}
		if !ok {
			break
		}
		cc.mu.Lock()
		for cc.head < len(cc.fifo) && cc.fifo[cc.head].tag <= c.DeliveryTag {
			settled = append(settled, cc.fifo[cc.head])
			cc.fifo[cc.head] = inflight{}
			cc.head++
		}
		cc.compact()
		cc.mu.Unlock()
		cc.p.finished(cc.hop, len(settled))
		for _, s := range settled {
			if s.tag == c.DeliveryTag && !c.Ack {
				s.done(ErrNacked)
			} else {
				s.done(nil)
			}
		}
		clear(settled)
		settled = settled[:0]
	}
	err := ErrConnectionLost
	select {
	case e := <-closes:
		if e != nil {
			err = errors.Join(ErrConnectionLost, e)
		}
	default:
	}
	cc.mu.Lock()
	cc.dead = true
	rest := cc.fifo[cc.head:]
	cc.fifo, cc.head = nil, 0
	cc.mu.Unlock()
	cc.p.finished(cc.hop, len(rest))
	for _, s := range rest {
		s.done(err)
	}
}

// compact reclaims the settled front of the FIFO. Called with mu held.
func (cc *confirmChan) compact() {
	switch {
	case cc.head == len(cc.fifo):
		cc.fifo, cc.head = cc.fifo[:0], 0
	case cc.head > 1024 && cc.head > len(cc.fifo)/2:
		n := copy(cc.fifo, cc.fifo[cc.head:])
		clear(cc.fifo[n:])
		cc.fifo, cc.head = cc.fifo[:n], 0
	}
}
