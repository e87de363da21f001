package forward

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
	"github.com/trident-broker/trident/exchange"
)

// Server is the owning node's end: it serves peers' Forwarders by calling
// the core directly (exchange.Broker, VHost, Queue), with no protocol
// front end in the loop. The transport is the authentication (a cluster
// multiplexer stream, cookie-checked or mutual TLS): a peer acts with
// every permission on every vhost, and is not counted against connection
// or rate limits (its own node checked all of these already).
//
// Per connection: a reader that never blocks on the core's behalf (it
// queues publishes for their hop's worker and consumer frames for the
// consumers' goroutine, and runs Get, Purge and Count on goroutines of
// their own), a worker per hop that routes publishes in order, the
// consumers' goroutine that applies consumes, window changes, cancels and
// settles in order, and a writer that core callbacks (confirms,
// deliveries) only append to.
type Server struct {
	b        *exchange.Broker
	waitMeta func(idx uint64)
	log      *slog.Logger
	credit   int

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[*sconn]struct{}
	closed bool
}

// maxCalls bounds the Get, Purge and Count calls a connection runs at
// once; beyond it a call is answered with an error.
const maxCalls = 64

// NewServer makes a Server over b. waitMeta (may be nil) waits, briefly,
// until this node has applied the metadata log up to an index: a
// forwarded publish that carries one is routed only after it returns.
func NewServer(b *exchange.Broker, waitMeta func(idx uint64), log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{b: b, waitMeta: waitMeta, log: log.With("component", "forward-server"), credit: MaxPending,
		lns: map[net.Listener]struct{}{}, conns: map[*sconn]struct{}{}}
}

// Serve accepts peers' connections on ln until Close or ln fails.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			delete(s.lns, ln)
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrClosed
			}
			return err
		}
		go s.serveConn(nc)
	}
}

// Close stops every listener and connection: consumers are cancelled and
// what they had not settled is requeued, on the connections' goroutines
// (not waited for: a cancel may wait on the network).
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	lns, cs := s.lns, s.conns
	s.lns, s.conns = map[net.Listener]struct{}{}, map[*sconn]struct{}{}
	s.mu.Unlock()
	for ln := range lns {
		_ = ln.Close()
	}
	for c := range cs {
		c.nc.Close() // the reader ends
		<-c.done
	}
}

func (s *Server) serveConn(nc net.Conn) {
	log := s.log.With("peer", nc.RemoteAddr().String())
	br := bufio.NewReaderSize(nc, 64<<10)
	_ = nc.SetDeadline(time.Now().Add(callTimeout))
	f, err := readFrame(br)
	if err != nil {
		log.Warn("forwarding connection refused", "err", err)
		nc.Close()
		return
	}
	h, ok := f.(*frame.Hello)
	if !ok {
		log.Warn("forwarding connection refused: no hello", "type", f.Type())
		nc.Close()
		return
	}
	if h.Version != frame.Version {
		log.Error("forwarding connection refused: the peer speaks another protocol version",
			"peer_version", h.Version, "version", frame.Version)
		b, _ := frame.Append(nil, &frame.Refuse{Version: frame.Version, Reason: "unsupported version " + strconv.Itoa(int(h.Version))})
		_, _ = nc.Write(b)
		nc.Close()
		return
	}
	b, _ := frame.Append(nil, &frame.Welcome{Version: frame.Version, Credit: uint32(s.credit)})
	if _, err := nc.Write(b); err != nil {
		nc.Close()
		return
	}
	_ = nc.SetDeadline(time.Time{})
	c := &sconn{s: s, nc: nc, br: br, log: log, consumers: map[uint64]*scons{}, gets: map[uint64]getRef{},
		calls: make(chan struct{}, maxCalls), ctlWake: make(chan struct{}, 1), done: make(chan struct{})}
	for i := range c.granted {
		c.granted[i].Store(int64(s.credit))
		c.hops[i] = make(chan *frame.Publish, s.credit)
	}
	c.w = newWriter(nc, c.grant, c.resume)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.w.abort()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.serve()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// sconn is one peer connection on the server.
type sconn struct {
	s   *Server
	nc  net.Conn
	br  *bufio.Reader
	w   *writer
	log *slog.Logger

	hops    [MaxHops]chan *frame.Publish // to the hop's worker; cap: the credit
	granted [MaxHops]atomic.Int64        // credit the client holds
	owed    [MaxHops]atomic.Int64        // credit to grant (settled publishes)
	alarmed atomic.Bool                  // a goroutine waits for an alarm to clear

	mu        sync.Mutex // consumers, gets; never held while calling the core
	consumers map[uint64]*scons
	gets      map[uint64]getRef // unsettled Get deliveries
	nextGet   uint64
	closed    bool

	pmu    sync.Mutex // a leaf
	paused []*exchange.Consumer

	ctlMu   sync.Mutex    // a leaf
	ctl     []frame.Frame // for the consumers' goroutine
	ctlWake chan struct{} // cap 1

	calls chan struct{} // semaphore of running calls
	done  chan struct{}
}

type getRef struct {
	q   *exchange.Queue
	seq uint64
}

// serve is the reader; it cleans up when the connection ends.
func (c *sconn) serve() {
	// The workers end once they have routed what they hold (their
	// confirms then go nowhere). They are not waited for: one may wait in
	// the core for its next hop's budget, which this node's shutdown
	// releases only later.
	for h := range c.hops {
		go func() {
			for p := range c.hops[h] {
				c.publish(p)
			}
		}()
	}
	go c.runConsumers()
	err := c.read()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		c.log.Debug("forwarding connection ended", "err", err)
	}
	for h := range c.hops {
		close(c.hops[h])
	}
	c.mu.Lock()
	c.closed = true // a Get answered from now on is requeued
	c.mu.Unlock()
	c.queueCtl(nil) // the consumers' goroutine cleans up, and ends
	c.w.abort()
	close(c.done)
}

// queueCtl hands a consumer frame (Consume, Qos, Cancel, Settle; nil for
// the end) to the consumers' goroutine.
func (c *sconn) queueCtl(f frame.Frame) {
	c.ctlMu.Lock()
	c.ctl = append(c.ctl, f)
	c.ctlMu.Unlock()
	select {
	case c.ctlWake <- struct{}{}:
	default:
	}
}

// runConsumers applies the consumer frames in order, off the reader: a core
// call for a consumer may wait on the network (a stream consumer's
// cancel writes its offset through the metadata log).
func (c *sconn) runConsumers() {
	var fs []frame.Frame
	for range c.ctlWake {
		c.ctlMu.Lock()
		fs, c.ctl = c.ctl, fs[:0]
		c.ctlMu.Unlock()
		for i, f := range fs {
			fs[i] = nil
			switch f := f.(type) {
			case nil:
				c.cleanup()
				return
			case *frame.Consume:
				c.consume(f)
			case *frame.Qos:
				c.mu.Lock()
				sc := c.consumers[f.Consumer]
				c.mu.Unlock()
				if sc != nil && sc.limit != nil {
					sc.limit.SetMax(int(f.Prefetch))
				}
			case *frame.Cancel:
				c.cancel(f.Consumer)
			case *frame.Settle:
				c.settle(f)
			}
		}
	}
}

func (c *sconn) read() error {
	var deadlineAt time.Time
	for {
		if now := time.Now(); now.Sub(deadlineAt) > time.Second {
			deadlineAt = now
			_ = c.nc.SetReadDeadline(now.Add(3 * heartbeat))
		}
		f, err := readFrame(c.br)
		if err != nil {
			var fe *frame.Error
			if errors.As(err, &fe) {
				c.log.Error("forwarding connection closed: bad frame", "err", err)
			}
			return err
		}
		switch f := f.(type) {
		case *frame.Publish:
			if c.granted[f.Hop].Add(-1) < 0 {
				c.log.Error("forwarding connection closed: publish without credit", "hop", f.Hop)
				return ErrProtocol
			}
			c.hops[f.Hop] <- f // never blocks: at most the credit is in it
		case *frame.Consume, *frame.Qos, *frame.Cancel, *frame.Settle:
			c.queueCtl(f)
		case *frame.Get, *frame.Purge, *frame.Count:
			c.call(f)
		case *frame.Ping:
			_, _ = c.w.send(&frame.Pong{}, false)
		default:
			c.log.Error("forwarding connection closed: unexpected frame", "type", f.Type())
			return ErrProtocol
		}
	}
}

// publish routes one forwarded message (a hop's worker). Its confirm
// comes now or from the core's Confirmer call.
func (c *sconn) publish(p *frame.Publish) {
	if p.Meta > 0 && c.s.waitMeta != nil {
		c.s.waitMeta(p.Meta)
	}
	tag := p.ID<<2 | uint64(p.Hop)
	vh, ok := c.s.b.VHost(p.VHost)
	if !ok {
		c.confirm(tag, false, "no vhost '"+p.VHost+"'")
		return
	}
	m := toCore(&p.Msg)
	m.Hops = p.Hop + 1
	o := exchange.PublishOpts{Confirmer: c, Tag: tag}
	if m.Exchange != "" || m.RoutingKey != p.Queue {
		// Published elsewhere through an exchange: it goes to this one
		// queue, keeping what it was published with for its consumers.
		o.Queue = p.Queue
	}
	res, err := vh.Publish(m, o)
	switch {
	case err != nil:
		c.confirm(tag, false, err.Error())
	case res.NotAppended:
		c.NotAppended(tag)
	case !res.Pending:
		// A message routed nowhere (the queue is not here, yet or any
		// more) is refused rather than confirmed.
		c.confirm(tag, res.OK && res.Routed > 0, "")
	}
}

// Confirm implements exchange.Confirmer. It may run under core locks: it
// only appends to the writer.
func (c *sconn) Confirm(tag uint64, ok bool) { c.confirm(tag, ok, "") }

// NotAppended implements exchange.NotAppendedConfirmer: the queue's log
// never appended the publish (its leader is handing over), and the
// client sends it to the queue's next owner.
func (c *sconn) NotAppended(tag uint64) { c.confirm(tag, false, frame.ReasonNotAppended) }

func (c *sconn) confirm(tag uint64, ok bool, reason string) {
	c.owed[tag&3].Add(1)
	_, _ = c.w.send(&frame.Confirm{ID: tag >> 2, OK: ok, Reason: reason}, false)
}

// grant (the writer's before) gives back the credit of settled
// publishes, unless a resource alarm blocks publishing: then it waits,
// and the peer's publishers wait for it, as a client connection's reader
// stops during an alarm.
func (c *sconn) grant() {
	if a := c.s.b.Alarms(); a.Raised() {
		if blocked, cleared, reason := a.Blocked(); blocked {
			if c.alarmed.CompareAndSwap(false, true) {
				c.log.Info("forwarded publishing blocked by a resource alarm", "reason", reason)
				go func() {
					select {
					case <-cleared:
					case <-c.done:
					}
					c.alarmed.Store(false)
					c.w.kick()
				}()
			}
			return
		}
	}
	for h := range c.owed {
		if n := c.owed[h].Swap(0); n > 0 {
			c.granted[h].Add(n)
			_, _ = c.w.send(&frame.Credit{Hop: uint8(h), N: uint32(n)}, false)
		}
	}
}

// resume (the writer's after) restarts the consumers Deliver paused once
// the writer has room again.
func (c *sconn) resume() {
	if c.w.queued() >= writerMax/2 {
		return
	}
	c.pmu.Lock()
	ps := c.paused
	c.paused = nil
	c.pmu.Unlock()
	for _, p := range ps {
		p.Resume()
	}
}

// call runs a Get, Purge or Count on a goroutine of its own: the queue may
// be a proxy here too, whose answer waits on the network.
func (c *sconn) call(f frame.Frame) {
	select {
	case c.calls <- struct{}{}:
	default:
		var req uint64
		switch f := f.(type) {
		case *frame.Get:
			req = f.Req
		case *frame.Purge:
			req = f.Req
		case *frame.Count:
			req = f.Req
		}
		_, _ = c.w.send(&frame.Result{Req: req, Err: "too many calls at once"}, false)
		return
	}
	go func() {
		defer func() { <-c.calls }()
		var res frame.Frame
		switch f := f.(type) {
		case *frame.Get:
			res = c.get(f)
		case *frame.Purge:
			res = c.purge(f)
		case *frame.Count:
			res = c.count(f)
		}
		if res != nil {
			_, _ = c.w.send(res, false)
		}
	}()
}

func (c *sconn) vhost(name string) (*exchange.VHost, error) {
	vh, ok := c.s.b.VHost(name)
	if !ok {
		return nil, fmt.Errorf("no vhost '%s'", name)
	}
	return vh, nil
}

func (c *sconn) get(f *frame.Get) frame.Frame {
	vh, err := c.vhost(f.VHost)
	if err != nil {
		return &frame.Result{Req: f.Req, Err: err.Error()}
	}
	q, err := vh.Queue(f.Queue, c)
	if err == nil {
		err = q.CheckGet()
	}
	if err != nil {
		return &frame.Result{Req: f.Req, Err: err.Error()}
	}
	d, ok, err := q.Fetch(f.NoAck)
	if err != nil {
		return &frame.Result{Req: f.Req, Err: err.Error()}
	}
	if !ok {
		return &frame.Result{Req: f.Req}
	}
	var id uint64
	if !f.NoAck {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			q.Reject([]uint64{d.Seq}, true)
			return nil
		}
		c.nextGet++
		id = c.nextGet
		c.gets[id] = getRef{q: q, seq: d.Seq}
		c.mu.Unlock()
	}
	return &frame.GetOK{Req: f.Req, Delivery: id, Redelivered: d.Redelivered, Remaining: uint64(max(d.Remaining, 0)), Msg: toFrame(d.Msg)}
}

func (c *sconn) purge(f *frame.Purge) frame.Frame {
	vh, err := c.vhost(f.VHost)
	if err != nil {
		return &frame.Result{Req: f.Req, Err: err.Error()}
	}
	n, err := vh.PurgeQueue(f.Queue, c)
	if err != nil {
		return &frame.Result{Req: f.Req, Err: err.Error()}
	}
	return &frame.Result{Req: f.Req, A: uint64(max(n, 0))}
}

func (c *sconn) count(f *frame.Count) frame.Frame {
	vh, err := c.vhost(f.VHost)
	if err != nil {
		return &frame.Result{Req: f.Req, Err: err.Error()}
	}
	info, err := vh.DeclareQueue(f.Queue, exchange.QueueOpts{Passive: true, Owner: c})
	if err != nil {
		return &frame.Result{Req: f.Req, Err: err.Error()}
	}
	return &frame.Result{Req: f.Req, A: uint64(max(info.Messages, 0)), B: uint64(max(info.Consumers, 0))}
}

// settle applies a Settle frame: the deliveries it names that are still
// unsettled, in one core call per queue and kind.
func (c *sconn) settle(f *frame.Settle) {
	var q *exchange.Queue
	seqs := make([]uint64, 0, len(f.Deliveries))
	if f.Consumer == 0 {
		c.mu.Lock()
		for _, id := range f.Deliveries {
			if g, ok := c.gets[id]; ok {
				delete(c.gets, id)
				if q != nil && g.q != q {
					c.mu.Unlock()
					apply(q, f.Op, seqs)
					seqs = seqs[:0]
					c.mu.Lock()
				}
				q = g.q
				seqs = append(seqs, g.seq)
			}
		}
		c.mu.Unlock()
	} else {
		c.mu.Lock()
		sc := c.consumers[f.Consumer]
		c.mu.Unlock()
		if sc == nil {
			return
		}
		q, seqs = sc.take(f.Deliveries, seqs)
	}
	if q != nil && len(seqs) > 0 {
		apply(q, f.Op, seqs)
	}
}

func apply(q *exchange.Queue, op frame.SettleOp, seqs []uint64) {
	switch op {
	case frame.Ack:
		if len(seqs) == 1 {
			q.Ack(seqs[0])
		} else {
			q.AckMany(seqs)
		}
	case frame.Requeue:
		q.Reject(seqs, true)
	case frame.Reject:
		q.Reject(seqs, false)
	}
}

// cleanup cancels every consumer and requeues what the connection had not
// settled, as a closed AMQP channel does.
func (c *sconn) cleanup() {
	c.mu.Lock()
	c.closed = true
	ids := make([]uint64, 0, len(c.consumers))
	for id := range c.consumers {
		ids = append(ids, id)
	}
	gets := c.gets
	c.gets = map[uint64]getRef{}
	c.mu.Unlock()
	for _, id := range ids {
		c.cancel(id)
	}
	byQueue := map[*exchange.Queue][]uint64{}
	for _, g := range gets {
		byQueue[g.q] = append(byQueue[g.q], g.seq)
	}
	for q, seqs := range byQueue {
		q.Reject(seqs, true)
	}
}
