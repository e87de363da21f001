package forward

import (
	"slices"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
)

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
		ds       []*frame.Deliver
		relocate = time.NewTicker(relocateEvery)
		retry    = time.NewTimer(time.Hour)
	)
	defer relocate.Stop()
	defer retry.Stop()
	for {
		r.mu.Lock()
		closed, want, prefetch, gen := r.closed, r.want, r.prefetch, r.gen
		acks, r.acks = r.acks, acks[:0]
		getConn := r.getConn
		r.mu.Unlock()

		r.sendSettles(s, getConn, acks)
		clear(acks)
		if closed {
			if s != nil {
				s.c.cancel(s)
			}
			return
		}
		if s != nil && (!want || s.gen != gen) {
			s.c.cancel(s) // upstream requeues what is unacked
			s = nil
		}
		if s != nil && prefetch != s.prefetch {
			s.prefetch = prefetch
			if !s.withArgs {
				_, _ = s.c.w.send(&frame.Qos{Consumer: s.id, Prefetch: uint32(max(prefetch, 0))}, true)
			}
		}
		failed := func(err error) {
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			retryAt = time.Now().Add(backoff)
			retry.Reset(backoff)
			r.log.Debug("cannot consume from the owning node", "err", err, "retry_in", backoff)
		}
		if s == nil && want && !time.Now().Before(retryAt) {
			var err error
			if s, err = r.start(prefetch, gen); err != nil {
				failed(err)
			}
		}

		var notify chan struct{}
		if s != nil {
			notify = s.notify
		}
		select {
		case <-r.wake:
		case <-retry.C:
		case <-notify:
			var ended, refused bool
			var why error
			ds, ended, refused, why = s.take(ds[:0])
			if refused {
				// It never ran: no tag of it was pushed, the core has
				// nothing to reset. Retry with backoff.
				s.c.cancel(s)
				s = nil
				failed(why)
				continue
			}
			if len(ds) > 0 {
				backoff = 0
			}
			r.mu.Lock()
			push, live := r.push, r.want && r.gen == s.gen
			r.mu.Unlock()
			for _, d := range ds {
				if !live || push == nil {
					break // the consumer is cancelled next round: requeued
				}
				s.unacked = append(s.unacked, d.Delivery)
				push(toCore(&d.Msg), makeTag(false, s.gen, d.Delivery), d.Redelivered)
			}
			clear(ds)
			if ended {
				s = r.lost(s, why)
			}
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

// start opens a consumer session where the queue is now. Its failure on
// the owning node (no such queue) comes later, as the session's end.
func (r *remote) start(prefetch int, gen uint32) (*session, error) {
	addr, err := r.locate()
	if err != nil {
		return nil, err
	}
	l := r.f.link(addr)
	if l == nil {
		return nil, ErrClosed
	}
	c, err := l.connection()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	args, withArgs := r.args, r.withArgs
	r.mu.Unlock()
	s := &session{addr: addr, c: c, gen: gen, prefetch: prefetch, withArgs: withArgs, notify: make(chan struct{}, 1)}
	err = c.consume(s, &frame.Consume{VHost: r.vhost, Queue: r.queue, Prefetch: uint32(max(prefetch, 0)),
		PerConsumer: withArgs, Args: args})
	if err != nil {
		c.cancel(s)
		return nil, err
	}
	return s, nil
}

// lost ends session s (its connection died, the owning node ended it, or
// the queue moved): its tags become dead, and reset tells the core. It
// returns nil, the new session.
func (r *remote) lost(s *session, why error) *session {
	s.c.cancel(s)
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

// sendSettles sends queued settlements, in order, a run of the same kind
// as one Settle frame: consumer tags of the live session, get tags on the
// connection of their generation while it lives. Tags of older
// generations, and unknown tags (settled twice), are dropped.
func (r *remote) sendSettles(s *session, getConn *conn, ops []settle) {
	if len(ops) == 0 {
		return
	}
	var cur *frame.Settle
	var curConn *conn
	flush := func() {
		if cur != nil && len(cur.Deliveries) > 0 {
			_, _ = curConn.w.send(cur, true)
		}
		cur = nil
	}
	for _, op := range ops {
		get, gen, dtag := splitTag(op.tag)
		var c *conn
		var consumer uint64
		switch {
		case get:
			if getConn == nil || gen != getConn.gen&genMask || getConn.isDead() {
				continue
			}
			c = getConn
		case s != nil && gen == s.gen&genMask:
			i, found := slices.BinarySearch(s.unacked, dtag)
			if !found {
				continue
			}
			s.unacked = slices.Delete(s.unacked, i, i+1)
			c, consumer = s.c, s.id
		default:
			continue
		}
		kind := frame.Ack
		switch {
		case op.ack:
		case op.requeue:
			kind = frame.Requeue
		default:
			kind = frame.Reject
		}
		if cur == nil || curConn != c || cur.Consumer != consumer || cur.Op != kind {
			flush()
			cur, curConn = &frame.Settle{Consumer: consumer, Op: kind}, c
		}
		cur.Deliveries = append(cur.Deliveries, dtag)
	}
	flush()
}
