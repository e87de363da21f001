package forward

import (
	"errors"
	"sync"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// publisher is a link's publishing side: one goroutine that takes what
// Publish queued and sends it, in order per hop, as far as the
// connection's credit for that hop goes; the rest waits for a Credit
// frame (conn.read kicks it) or for a new connection.
//
// Why a budget and a credit per hop: a message that the owning node
// forwards again (its view of where the queue lives is behind: a classic
// queue declared on two nodes at once, a quorum queue that just changed
// leader) is confirmed only once its next hop is. If that next hop came
// back to this link and shared the budget of the messages waiting on it,
// a full budget would wait for itself. Messages of hop k wait only for
// room of hop k, which their own hop k+1 never takes, and the last hop
// never forwards (MaxHops), so no wait can close a circle. Confirms come
// in any order, so no confirm waits behind another.
type publisher struct {
	l *link

	mu      sync.Mutex
	space   sync.Cond         // signalled when pending drops, or the link closes
	queue   [MaxHops][]pubReq // not yet sent, by hop
	pending [MaxHops]int      // by hop: queued + sent and awaiting a confirm
	closed  bool
	started bool

	wake chan struct{} // cap 1
	stop chan struct{}
}

type pubReq struct {
	m     *exchange.Message
	vhost string
	queue string
	meta  uint64 // the metadata index it carries, 0 for none (Forwarder.SetMetaIndex)
	done  func(error)
	// unsentSince: when the publish first failed unsent (ErrUnsent),
	// zero if it has not; a Remote keeps it for locateWait from then.
	unsentSince time.Time
}

func newPublisher(l *link) *publisher {
	p := &publisher{l: l, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	p.space.L = &p.mu
	return p
}

// publish queues r; it never waits. over is true when r took its hop
// past its budget (MaxPending queued or unconfirmed): the caller then
// runs waitRoom for that hop once it holds no lock, which is how the
// owning node's back-pressure reaches the publisher. Each caller takes a
// hop past its budget by at most the one publish it then waits for.
func (p *publisher) publish(r pubReq) (over bool) {
	hop := int(r.m.Hops)
	if hop >= MaxHops {
		// Forwarded MaxHops times already: the nodes disagree about
		// where the queue lives; refuse rather than pass it on.
		p.l.log.Warn("message refused: forwarded too many times", "queue", r.queue, "hops", r.m.Hops)
		go r.done(ErrTooManyHops)
		return false
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		go r.done(ErrClosed)
		return false
	}
	p.queue[hop] = append(p.queue[hop], r)
	p.pending[hop]++
	over = p.pending[hop] > p.l.f.maxPending
	if !p.started {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	p.kick()
	return over
}

// roomWait is the deadline of waitRoom. Its owner is the link: a slot
// frees when a publish is confirmed or fails, and the stuck check fails
// every publish of a connection whose oldest waited stuckAfter, so a
// waiter is released by then; the deadline is the backstop that makes
// the wait end whatever happens.
const roomWait = stuckAfter + 5*time.Second

// waitRoom waits, for at most roomWait, while hop is over its budget and
// the link is open. It is called with no lock held (STYLE 14).
func (p *publisher) waitRoom(hop int) {
	if hop < 0 || hop >= MaxHops {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending[hop] <= p.l.f.maxPending || p.closed {
		return
	}
	expired := false
	t := time.AfterFunc(p.roomWait(), func() {
		p.mu.Lock()
		expired = true
		p.space.Broadcast()
		p.mu.Unlock()
	})
	defer t.Stop()
	for p.pending[hop] > p.l.f.maxPending && !p.closed && !expired {
		p.space.Wait()
	}
}

func (p *publisher) roomWait() time.Duration {
	if d := p.l.f.roomWait; d > 0 {
		return d
	}
	return roomWait
}

func (p *publisher) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// finished releases n pending slots of hop (waking publishers waiting
// for room). Called before the callbacks run.
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
	var batch [MaxHops][]pubReq
	for {
		select {
		case <-p.wake:
		case <-p.stop:
		}
		p.mu.Lock()
		closed := p.closed
		for h := range batch {
			batch[h], p.queue[h] = p.queue[h], batch[h][:0]
		}
		p.mu.Unlock()
		if closed {
			for h := range batch {
				p.fail(h, batch[h], ErrClosed)
			}
			return
		}
		for h := range batch {
			if len(batch[h]) == 0 {
				continue
			}
			rest := p.send(h, batch[h])
			if len(rest) > 0 {
				// No credit: these go first once it comes.
				p.mu.Lock()
				p.queue[h] = append(append(make([]pubReq, 0, len(rest)+len(p.queue[h])), rest...), p.queue[h]...)
				p.mu.Unlock()
			}
			clear(batch[h]) // drop references to messages and callbacks
			batch[h] = batch[h][:0]
		}
	}
}

// send sends rs, of hop, on the link's connection, dialling if need be,
// and returns what the credit left unsent; if the peer cannot be reached
// they all fail at once rather than hold the core's publishers.
func (p *publisher) send(hop int, rs []pubReq) []pubReq {
	for attempt := 0; ; attempt++ {
		c, err := p.l.connection()
		if err != nil {
			if attempt == 0 && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrClosed) {
				err = errors.Join(ErrUnsent, err) // none of rs went on a connection
			}
			p.fail(hop, rs, err)
			return nil
		}
		n, ok := c.sendPublishes(hop, rs)
		if ok {
			return rs[n:]
		}
		if attempt == 1 {
			p.fail(hop, rs, ErrConnectionLost)
			return nil
		}
	}
}

func (p *publisher) fail(hop int, rs []pubReq, err error) {
	p.finished(hop, len(rs))
	for _, r := range rs {
		r.done(err)
	}
}
