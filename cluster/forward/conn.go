package forward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
)

// conn is a client connection to a peer's Server: a reader goroutine that
// settles publishes, hands deliveries to their sessions and answers
// calls; a writer (writer.go); a ticker that pings and gives up a
// connection whose oldest publish waited stuckAfter for its confirm.
type conn struct {
	l   *link
	gen uint32 // the link's count of connections: get tags carry it
	nc  net.Conn
	br  *bufio.Reader
	w   *writer
	log *slog.Logger

	mu       sync.Mutex
	dead     bool
	credit   [MaxHops]int // publishes of each hop the server lets us send
	nextID   uint64
	flights  map[uint64]flight // sent, awaiting their confirm
	sessions map[uint64]*session
	nextSess uint64
	reqs     map[uint64]chan frame.Frame
	nextReq  uint64
	scratch  []byte // the publisher's encoding buffer

	done chan struct{} // closed once dead
}

type flight struct {
	hop  uint8
	at   int64 // when it was sent (unix ns, per batch)
	done func(error)
}

// dialConn opens a connection and does the handshake.
func dialConn(l *link, gen uint32) (*conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	nc, err := l.f.dial(ctx, l.addr)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(callTimeout))
	hello, _ := frame.Append(nil, &frame.Hello{Version: frame.Version})
	if _, err := nc.Write(hello); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	f, err := readFrame(br)
	if err != nil {
		nc.Close()
		return nil, err
	}
	var credit int
	switch f := f.(type) {
	case *frame.Welcome:
		if f.Version != frame.Version {
			nc.Close()
			return nil, fmt.Errorf("%w: welcomed with version %d, this node speaks %d", ErrVersion, f.Version, frame.Version)
		}
		credit = int(f.Credit)
	case *frame.Refuse:
		nc.Close()
		return nil, fmt.Errorf("%w: the peer speaks version %d, this node %d (%s)", ErrVersion, f.Version, frame.Version, f.Reason)
	default:
		nc.Close()
		return nil, fmt.Errorf("%w: %v in answer to hello", ErrProtocol, f.Type())
	}
	_ = nc.SetDeadline(time.Time{})
	c := &conn{l: l, gen: gen, nc: nc, br: br, log: l.log, flights: map[uint64]flight{},
		sessions: map[uint64]*session{}, reqs: map[uint64]chan frame.Frame{}, done: make(chan struct{})}
	for i := range c.credit {
		c.credit[i] = credit
	}
	c.w = newWriter(nc, nil, nil)
	go c.read()
	go c.tick()
	return c, nil
}

func (c *conn) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

func (c *conn) read() {
	var deadlineAt time.Time
	for {
		if now := time.Now(); now.Sub(deadlineAt) > time.Second {
			deadlineAt = now
			_ = c.nc.SetReadDeadline(now.Add(3 * heartbeat))
		}
		f, err := readFrame(c.br)
		if err != nil {
			c.shut(errors.Join(ErrConnectionLost, err))
			return
		}
		switch f := f.(type) {
		case *frame.Confirm:
			c.confirmed(f)
		case *frame.Credit:
			c.mu.Lock()
			c.credit[f.Hop] += int(f.N)
			c.mu.Unlock()
			c.l.pub.kick()
		case *frame.Deliver:
			c.mu.Lock()
			s := c.sessions[f.Consumer]
			c.mu.Unlock()
			if s != nil {
				s.deliver(f)
			}
		case *frame.Cancelled:
			c.mu.Lock()
			s := c.sessions[f.Consumer]
			delete(c.sessions, f.Consumer)
			c.mu.Unlock()
			if s != nil {
				s.end(fmt.Errorf("%w: %s", ErrFailed, f.Reason), f.Refused)
			}
		case *frame.GetOK:
			c.answer(f.Req, f)
		case *frame.Result:
			c.answer(f.Req, f)
		case *frame.Pong:
		default:
			c.log.Error("forwarding connection closed: unexpected frame", "type", f.Type())
			c.shut(fmt.Errorf("%w: unexpected %v", ErrProtocol, f.Type()))
			return
		}
	}
}

func (c *conn) confirmed(f *frame.Confirm) {
	c.mu.Lock()
	fl, ok := c.flights[f.ID]
	delete(c.flights, f.ID)
	c.mu.Unlock()
	if !ok {
		return
	}
	c.l.pub.finished(int(fl.hop), 1)
	switch {
	case f.OK:
		fl.done(nil)
	case f.Reason == frame.ReasonNotAppended:
		fl.done(errors.Join(ErrNacked, ErrNotAppended))
	case f.Reason != "":
		fl.done(fmt.Errorf("%w: %s", ErrNacked, f.Reason))
	default:
		fl.done(ErrNacked)
	}
}

func (c *conn) answer(req uint64, f frame.Frame) {
	c.mu.Lock()
	ch := c.reqs[req]
	delete(c.reqs, req)
	c.mu.Unlock()
	if ch != nil {
		ch <- f // cap 1, one answer
	}
}

// tick pings, and gives the connection up when its oldest publish has
// waited stuckAfter for its confirm: the owning node answers every
// publish, so this is a fault worth an error in the log, and it must not
// hold the link's budget for good.
func (c *conn) tick() {
	t := time.NewTicker(heartbeat / 2)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		_, _ = c.w.send(&frame.Ping{}, false)
		var oldest int64
		c.mu.Lock()
		for _, fl := range c.flights {
			if oldest == 0 || fl.at < oldest {
				oldest = fl.at
			}
		}
		c.mu.Unlock()
		if oldest != 0 {
			if waited := time.Since(time.Unix(0, oldest)); waited > stuckAfter {
				c.log.Error("no confirm from the owning node: closing the connection", "waited", waited.Round(time.Millisecond))
				c.shut(ErrConnectionLost)
				return
			}
		}
	}
}

// sendPublishes sends as many of rs (all of hop) as the hop's credit
// allows, in order, and returns how many it took; a publish it took
// belongs to the connection from then on (its done runs on its confirm,
// or on the connection's end). The ones whose headers cannot be encoded
// are failed (ErrHeader). ok is false if the connection is dead.
func (c *conn) sendPublishes(hop int, rs []pubReq) (taken int, ok bool) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return 0, false
	}
	n := min(c.credit[hop], len(rs))
	c.credit[hop] -= n
	base := c.nextID
	c.nextID += uint64(n)
	buf := c.scratch[:0]
	c.scratch = nil
	c.mu.Unlock()
	if n == 0 {
		return 0, true
	}
	var bad []int
	for i := range rs[:n] {
		r := &rs[i]
		b, err := frame.Append(buf, &frame.Publish{ID: base + uint64(i), Hop: r.m.Hops, Meta: r.meta,
			VHost: r.vhost, Queue: r.queue, Msg: toFrame(r.m)})
		if err != nil {
			bad = append(bad, i)
			continue
		}
		buf = b
	}
	now := time.Now().UnixNano()
	c.mu.Lock()
	dead := c.dead
	if !dead {
		c.credit[hop] += len(bad) // not sent
		j := 0
		for i := range rs[:n] {
			if j < len(bad) && bad[j] == i {
				j++
				continue
			}
			c.flights[base+uint64(i)] = flight{hop: uint8(hop), at: now, done: rs[i].done}
		}
	}
	c.mu.Unlock()
	for _, i := range bad {
		c.l.pub.finished(hop, 1)
		rs[i].done(ErrHeader)
	}
	if dead {
		k := n - len(bad)
		c.l.pub.finished(hop, k)
		for i := range rs[:n] {
			if !contains(bad, i) {
				rs[i].done(ErrConnectionLost)
			}
		}
		return n, true
	}
	if err := c.w.sendRaw(buf); err != nil {
		c.shut(errors.Join(ErrConnectionLost, err))
	}
	c.mu.Lock()
	if cap(buf) <= 1<<20 {
		c.scratch = buf[:0]
	}
	c.mu.Unlock()
	return n, true
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// consume registers s and starts its consumer.
func (c *conn) consume(s *session, f *frame.Consume) error {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return ErrConnectionLost
	}
	c.nextSess++
	s.id = c.nextSess
	c.sessions[s.id] = s
	c.mu.Unlock()
	f.Consumer = s.id
	if _, err := c.w.send(f, true); err != nil {
		return errors.Join(ErrConnectionLost, err)
	}
	return nil
}

// cancel stops s's consumer: the server requeues what it has not settled.
func (c *conn) cancel(s *session) {
	c.mu.Lock()
	_, live := c.sessions[s.id]
	delete(c.sessions, s.id)
	c.mu.Unlock()
	if live {
		_, _ = c.w.send(&frame.Cancel{Consumer: s.id}, true)
	}
}

// call sends the frame mk makes for a new request id and waits for its
// answer until deadline; the connection is dropped if it does not come
// (a peer that does not answer fails every call on it).
func (c *conn) call(mk func(req uint64) frame.Frame, deadline time.Time) (frame.Frame, error) {
	if time.Until(deadline) <= 0 {
		return nil, ErrTimeout // dialling took it all: nothing was asked
	}
	ch := make(chan frame.Frame, 1)
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return nil, ErrConnectionLost
	}
	c.nextReq++
	req := c.nextReq
	c.reqs[req] = ch
	c.mu.Unlock()
	if _, err := c.w.send(mk(req), true); err != nil {
		c.mu.Lock()
		delete(c.reqs, req)
		c.mu.Unlock()
		return nil, errors.Join(ErrConnectionLost, err)
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case f := <-ch:
		return f, nil
	case <-c.done:
		return nil, ErrConnectionLost
	case <-t.C:
		c.log.Warn("the owning node did not answer a call: dropping the connection")
		c.shut(ErrTimeout)
		return nil, ErrTimeout
	}
}

// shut ends the connection: what is in flight fails with err, sessions
// end, calls return; the publisher is woken to send what is queued on a
// new connection. A close (ErrClosed) first writes what is queued.
func (c *conn) shut(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	fl, ss := c.flights, c.sessions
	c.flights, c.sessions, c.reqs = nil, nil, nil
	c.mu.Unlock()
	close(c.done)
	if errors.Is(err, ErrClosed) {
		c.w.close()
	} else {
		c.w.abort()
	}
	var n [MaxHops]int
	for _, f := range fl {
		n[f.hop]++
	}
	for hop, k := range n {
		c.l.pub.finished(hop, k)
	}
	for _, f := range fl {
		f.done(err)
	}
	for _, s := range ss {
		s.end(err, false)
	}
	c.l.pub.kick()
}

// session is one upstream consumer on a connection. The reader queues its
// deliveries; the Remote's goroutine takes them.
type session struct {
	addr     string
	c        *conn
	id       uint64
	gen      uint32
	prefetch int
	withArgs bool     // the prefetch is the consumer's (ConsumeWith)
	unacked  []uint64 // delivery ids pushed and not settled, ascending

	mu      sync.Mutex
	queue   []*frame.Deliver
	ended   bool
	refused bool // the owner never started it (Cancelled.Refused)
	why     error
	notify  chan struct{} // cap 1
}

func (s *session) deliver(f *frame.Deliver) {
	s.mu.Lock()
	if !s.ended {
		s.queue = append(s.queue, f)
	}
	s.mu.Unlock()
	s.signal()
}

func (s *session) end(why error, refused bool) {
	s.mu.Lock()
	if !s.ended {
		s.ended, s.why, s.refused = true, why, refused
	}
	s.mu.Unlock()
	s.signal()
}

func (s *session) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns the queued deliveries (into buf) and whether the session
// ended, and why.
func (s *session) take(buf []*frame.Deliver) ([]*frame.Deliver, bool, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = append(buf, s.queue...)
	clear(s.queue)
	s.queue = s.queue[:0]
	return buf, s.ended, s.refused, s.why
}
