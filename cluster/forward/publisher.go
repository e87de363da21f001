package forward

import (
	"errors"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/exchange"
)

// publisher is a link's publishing side: one goroutine that takes what
// Publish queued, in batches, and publishes it on one confirm-mode
// channel; a second goroutine per channel matches confirms (which arrive
// in order; amqp091-go splits multiple=true acks into one per tag) to a
// FIFO of callbacks.
type publisher struct {
	l *link

	mu      sync.Mutex
	space   sync.Cond // signalled when pending drops
	queue   []pubReq  // not yet sent
	pending int       // queued + sent and awaiting a confirm
	closed  bool
	started bool

	wake chan struct{} // cap 1
	stop chan struct{}
}

type pubReq struct {
	m     *exchange.Message
	queue string
	done  func(error)
}

func newPublisher(l *link) *publisher {
	p := &publisher{l: l, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	p.space.L = &p.mu
	return p
}

// publish queues m for queue. It blocks only while MaxPending publishes
// are queued or unconfirmed.
func (p *publisher) publish(m *exchange.Message, queue string, done func(error)) {
	p.mu.Lock()
	for p.pending >= MaxPending && !p.closed {
		p.space.Wait()
	}
	if p.closed {
		p.mu.Unlock()
		go done(ErrClosed)
		return
	}
	p.queue = append(p.queue, pubReq{m: m, queue: queue, done: done})
	p.pending++
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
func (p *publisher) finished(n int) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	p.pending -= n
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
	var cur *confirmChan
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
			if cur != nil {
				_ = cur.ch.Close() // its listener fails what is unconfirmed
			}
			return
		}
		cur = p.send(cur, batch)
		clear(batch) // drop references to messages and callbacks
	}
}

// send publishes a batch on cur, opening a channel when there is none or
// it died; what cannot be published fails at once.
func (p *publisher) send(cur *confirmChan, batch []pubReq) *confirmChan {
	for i, r := range batch {
		pub, err := toPublishing(r.m, r.queue)
		if err != nil {
			p.fail(batch[i:i+1], err)
			continue
		}
		for attempt := 0; ; attempt++ {
			if cur == nil || cur.isDead() {
				if cur, err = p.open(); err != nil {
					// The peer is unreachable: fail the rest of the batch
					// rather than hold the core's publishers.
					p.fail(batch[i:], err)
					return nil
				}
			}
			if cur.send(r.queue, pub, r.done) {
				break
			}
			if attempt == 1 {
				p.fail(batch[i:i+1], ErrConnectionLost)
				break
			}
		}
	}
	return cur
}

func (p *publisher) fail(rs []pubReq, err error) {
	p.finished(len(rs))
	for _, r := range rs {
		r.done(err)
	}
}

// open makes a new confirm-mode channel and starts its listener.
func (p *publisher) open() (*confirmChan, error) {
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
	cc := &confirmChan{p: p, ch: ch}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go cc.listen(confirms, closes)
	return cc, nil
}

// confirmChan is one confirm-mode channel and its callbacks in tag order.
type confirmChan struct {
	p  *publisher
	ch *amqp.Channel

	mu   sync.Mutex
	fifo []inflight // fifo[head:] await their confirm, tags ascending
	head int
	dead bool
}

type inflight struct {
	tag  uint64
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
func (cc *confirmChan) send(queue string, pub amqp.Publishing, done func(error)) bool {
	cc.mu.Lock()
	if cc.dead {
		cc.mu.Unlock()
		return false
	}
	// Only this goroutine publishes on the channel: the tag is ours.
	cc.fifo = append(cc.fifo, inflight{tag: cc.ch.GetNextPublishSeqNo(), done: done})
	cc.mu.Unlock()
	if err := cc.ch.Publish("", queue, false, false, pub); err != nil {
		// The channel or connection is gone; closing it makes sure the
		// listener fails every callback, this one included.
		_ = cc.ch.Close()
	}
	return true
}

// listen settles callbacks as confirms arrive, and fails the rest once
// the channel is closed.
func (cc *confirmChan) listen(confirms <-chan amqp.Confirmation, closes <-chan *amqp.Error) {
	var settled []inflight
	for c := range confirms {
		cc.mu.Lock()
		for cc.head < len(cc.fifo) && cc.fifo[cc.head].tag <= c.DeliveryTag {
			settled = append(settled, cc.fifo[cc.head])
			cc.fifo[cc.head] = inflight{}
			cc.head++
		}
		cc.compact()
		cc.mu.Unlock()
		cc.p.finished(len(settled))
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
	cc.p.finished(len(rest))
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
