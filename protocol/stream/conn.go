package stream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// conn is one stream protocol connection. Frames are read and handled on
// the reader goroutine (Serve); the core calls the subscriptions' sinks
// and Confirm from its own goroutines, which only queue work for the
// writer (frontend.Output) under w.Mu.
//
// Lock order: stream.mu (core, a sink's Deliver) → conn.w.Mu; conn.pmu →
// nothing. The reader never holds w.Mu or pmu while it calls the core;
// the writer acks what it wrote after releasing w.Mu.
type conn struct {
	s    *Server
	nc   net.Conn
	id   uint64
	name string
	log  *slog.Logger

	// Handshake state (reader goroutine only, but opened).
	peerProps  []wire.KV
	mechs      []string
	user       *auth.User
	actor      auth.Actor
	vh         *exchange.VHost
	frameMax   uint32
	heartbeat  time.Duration
	tuned      bool
	opened     atomic.Bool
	expiry     *auth.ExpiryWatch
	releaseCon func()
	closing    bool // a Close was sent or answered: stop reading

	// Reader goroutine only.
	pubs  map[uint8]*publisher
	subs  map[uint8]*subscription
	batch exchange.Batch
	rbuf  []byte
	tags  []uint64 // a Publish frame's tags (publish)
	// A Publish frame's messages taken whole (publishRun), reused.
	run    []exchange.Message
	runPtr []*exchange.Message
	runIDs []uint64
	runRaw [][]byte

	// Publishes waiting for the store (Confirm), by tag (pendingRing).
	pmu     sync.Mutex
	pending pendingRing

	// Output. Guarded by w.Mu besides the buffer: the subscriptions'
	// deliveries waiting for credit (wsubs), confirms and errors by
	// publisher, the deliveries written and to be acked.
	w        frontend.Output
	wsubs    []*subscription
	confirms map[uint8][]uint64
	perrs    map[uint8][]wire.PublishingError
	toAck    []ackRef
	scratch  []byte
	// mapScratch holds a stored record's application properties while
	// its encoding is written (appendStored); view is the record read in
	// place (the writer's, under w.Mu).
	mapScratch []byte
	view       exchange.StoredMessage

	// The writer goroutine's alone (ackWritten).
	ackSpare []ackRef
	ackSeqs  []uint64

	lastRead, lastWrite atomic.Int64
	recvOct, sendOct    atomic.Uint64
	published           atomic.Uint64
	delivered           atomic.Uint64
	connectedAt         time.Time
	corr                atomic.Uint32 // the server's correlation ids (Close)

	wdone  chan struct{}
	done   chan struct{}
	stop   chan struct{} // closed by kill: wakes a reader blocked by an alarm
	forced atomic.Pointer[string]

	lg logState
}

type ackRef struct {
	q   *exchange.Queue
	seq uint64
	// n > 0: a run's n records up to seq (Queue.SettleRun), else the
	// delivery seq alone.
	n int
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, id: s.seq.Add(1), pubs: map[uint8]*publisher{}, subs: map[uint8]*subscription{},
		confirms: map[uint8][]uint64{}, perrs: map[uint8][]wire.PublishingError{},
		wdone: make(chan struct{}), done: make(chan struct{}), stop: make(chan struct{}), connectedAt: time.Now()}
	c.name = fmt.Sprintf("%s -> %s", nc.RemoteAddr(), nc.LocalAddr())
	c.log = s.log.With("conn", c.name)
	c.w.Init()
	c.w.Pending = c.hasOutputLocked
	c.w.Prepare = c.prepareLocked
	now := time.Now().UnixNano()
	c.lastRead.Store(now)
	c.lastWrite.Store(now)
	return c
}

// Abort closes the socket at once (frontend.Conn).
func (c *conn) Abort() { c.nc.Close() }

// Serve runs the connection until it ends (frontend.Conn).
func (c *conn) Serve() {
	go c.writer()
	hs := time.AfterFunc(c.s.cfg.HandshakeTimeout, func() {
		if !c.opened.Load() {
			c.log.Info("stream connection not opened in time, closing")
			c.nc.Close()
		}
	})
	err := c.readLoop(bufio.NewReaderSize(frontend.ReadMeter{R: c.nc, Batch: &c.batch, LastRead: &c.lastRead, Bytes: &c.recvOct}, 64<<10))
	hs.Stop()
	c.cleanup()
	c.w.Stop()
	close(c.done)
	select {
	case <-c.wdone:
	case <-time.After(5 * time.Second):
	}
	c.nc.Close()
	if c.opened.Load() {
		c.logClosed(err)
	}
}

// errClosed ends the read loop after a Close.
var errClosed = errors.New("stream: connection closed")

func (c *conn) readLoop(r *bufio.Reader) error {
	defer c.batch.Flush()
	for {
		max := c.s.cfg.InitialFrameMax
		if c.opened.Load() {
			max = c.frameMax
		}
		p, err := wire.ReadFrame(r, max, c.rbuf)
		if c.forced.Load() != nil {
			return errClosed
		}
		if err != nil {
			switch {
			case errors.Is(err, wire.ErrFrameTooLarge):
				c.protocolError(wire.FrameTooLarge, "frame too large", err)
			case errors.Is(err, wire.ErrMalformed):
				c.protocolError(wire.UnknownFrame, "unknown frame", err)
			}
			return err
		}
		if cap(p) <= 64<<10 {
			c.rbuf = p[:0] // reuse a small buffer; a large one goes
		}
		f, err := wire.Decode(p)
		if err != nil {
			c.protocolError(wire.UnknownFrame, "unknown frame", err)
			return err
		}
		c.w.WaitBelowHigh()
		if err := c.handle(f); err != nil {
			return err
		}
		if c.closing {
			return errClosed
		}
	}
}

// handle runs one frame.
func (c *conn) handle(f wire.Frame) error {
	if !c.opened.Load() {
		return c.handshake(f)
	}
	switch f := f.(type) {
	case wire.Heartbeat:
	case wire.Publish:
		return c.publish(f)
	case wire.Credit:
		c.credit(f)
	case wire.DeclarePublisher:
		c.respond(wire.KeyDeclarePublisher, f.Corr, c.declarePublisher(f))
	case wire.DeletePublisher:
		c.respond(wire.KeyDeletePublisher, f.Corr, c.deletePublisher(f.ID))
	case wire.QueryPublisherSequence:
		c.queryPublisherSequence(f)
	case wire.Subscribe:
		c.subscribe(f)
	case wire.Unsubscribe:
		c.respond(wire.KeyUnsubscribe, f.Corr, c.unsubscribe(f.ID))
	case wire.StoreOffset:
		c.storeOffset(f)
	case wire.QueryOffset:
		c.queryOffset(f)
	case wire.Create:
		c.respond(wire.KeyCreate, f.Corr, c.create(f))
	case wire.Delete:
		c.respond(wire.KeyDelete, f.Corr, c.delete(f))
	case wire.Metadata:
		c.metadata(f)
	case wire.StreamStats:
		c.streamStats(f)
	case wire.ExchangeCommandVersions:
		c.write(func(b []byte) []byte {
			return wire.AppendExchangeCommandVersionsResponse(b, f.Corr, wire.OK, commandVersions)
		})
	case wire.Route:
		c.route(f)
	case wire.Partitions:
		c.partitions(f)
	case wire.CreateSuperStream:
		c.respond(wire.KeyCreateSuperStream, f.Corr, c.createSuperStream(f))
	case wire.DeleteSuperStream:
		c.respond(wire.KeyDeleteSuperStream, f.Corr, c.deleteSuperStream(f))
	case wire.ConsumerUpdateResponse:
		c.consumerUpdateResponse(f)
	case wire.Close:
		c.respond(wire.KeyClose, f.Corr, wire.OK)
		c.lg.clientClose = f.Reason
		c.closing = true
	case wire.CloseResponse:
		c.closing = true
	default:
		// Peer properties, SASL, tune or open again.
		c.protocolError(wire.UnknownFrame, "unknown frame", fmt.Errorf("unexpected %T after open", f))
		return errClosed
	}
	return nil
}

// commandVersions answers ExchangeCommandVersions: every command at
// version 1 but publish, 1 to 2 (version 2 gives each message a filter
// value, RabbitMQ 3.13's filtering; clients enable it by this answer).
var commandVersions = func() []wire.CommandVersion {
	var out []wire.CommandVersion
	for _, k := range []uint16{wire.KeyDeclarePublisher, wire.KeyPublish, wire.KeyQueryPublisherSequence,
		wire.KeyDeletePublisher, wire.KeySubscribe, wire.KeyCredit, wire.KeyStoreOffset, wire.KeyQueryOffset,
		wire.KeyUnsubscribe, wire.KeyCreate, wire.KeyDelete, wire.KeyMetadata, wire.KeyPeerProperties,
		wire.KeySaslHandshake, wire.KeySaslAuthenticate, wire.KeyTune, wire.KeyOpen, wire.KeyClose,
		wire.KeyHeartbeat, wire.KeyExchangeCommandVersions, wire.KeyStreamStats,
		wire.KeyPublishConfirm, wire.KeyPublishError, wire.KeyDeliver, wire.KeyMetadataUpdate,
		wire.KeyRoute, wire.KeyPartitions, wire.KeyCreateSuperStream, wire.KeyDeleteSuperStream} {
		v := wire.CommandVersion{Key: k, Min: 1, Max: 1}
		if k == wire.KeyPublish {
			v.Max = 2
		}
		out = append(out, v)
	}
	return out
}()

// --- output ---

// write queues one frame appended by fn.
func (c *conn) write(fn func([]byte) []byte) {
	c.w.Mu.Lock()
	if !c.w.Closed {
		c.w.Buf = fn(c.w.Buf)
		c.w.Signal()
	}
	c.w.Mu.Unlock()
}

// respond queues a response that carries only a code.
func (c *conn) respond(key uint16, corr uint32, code wire.Code) {
	c.write(func(b []byte) []byte { return wire.AppendResponse(b, key, corr, code) })
}

// protocolError sends a Close with code (as RabbitMQ does for a frame too
// large or an unknown frame) and stops reading; the socket is closed once
// the Close is written.
func (c *conn) protocolError(code wire.Code, reason string, err error) {
	if c.closing {
		return
	}
	c.closing = true
	c.lg.errSent = reason
	c.log.Warn("stream protocol error, closing", append(c.who(), "code", uint16(code), "reason", reason, "err", err)...)
	corr := c.corr.Add(1)
	c.write(func(b []byte) []byte { return wire.AppendClose(b, corr, code, reason) })
}

// forceClose is called from other goroutines (shutdown, management, an
// expired token): it sends a Close and ends the connection.
func (c *conn) forceClose(reason string) {
	if !c.forced.CompareAndSwap(nil, &reason) {
		return
	}
	close(c.stop)
	if c.opened.Load() {
		corr := c.corr.Add(1)
		c.write(func(b []byte) []byte { return wire.AppendClose(b, corr, wire.OK, reason) })
	}
	c.w.Stop()
	go func() {
		select {
		case <-c.wdone:
		case <-time.After(2 * time.Second):
		}
		c.nc.Close()
	}()
}

func (c *conn) writer() {
	defer close(c.wdone)
	err := c.w.Run(func(buf []byte, _ []int) error {
		_, err := c.nc.Write(buf)
		if err == nil {
			c.sendOct.Add(uint64(len(buf)))
		}
		c.lastWrite.Store(time.Now().UnixNano())
		c.ackWritten()
		return err
	})
	if err != nil {
		c.nc.Close()
	}
}

// hasOutputLocked tells the writer there is output to prepare: confirms,
// errors, or deliveries with credit (w.Mu held).
func (c *conn) hasOutputLocked() bool {
	if len(c.confirms) > 0 || len(c.perrs) > 0 {
		return true
	}
	for _, s := range c.wsubs {
		if s.credit > 0 && s.hasPending() {
			return true
		}
	}
	return false
}

// prepareLocked encodes what waits into the buffer (w.Mu held).
func (c *conn) prepareLocked() {
	for id, ids := range c.confirms {
		for len(ids) > 0 {
			n := min(len(ids), 8192)
			c.w.Buf = wire.AppendPublishConfirm(c.w.Buf, id, ids[:n])
			ids = ids[n:]
		}
		delete(c.confirms, id)
	}
	for id, errs := range c.perrs {
		for len(errs) > 0 {
			n := min(len(errs), 8192)
			c.w.Buf = wire.AppendPublishError(c.w.Buf, id, errs[:n])
			errs = errs[n:]
		}
		delete(c.perrs, id)
	}
	// A chunk of each subscription in turn: subscriptions of one
	// connection reading the same stream stay in step, so that they
	// share the encoding of what they read (exchange's SharedRun).
	for more := true; more && len(c.w.Buf) < frontend.High; {
		more = false
		for _, s := range c.wsubs {
			if s.credit > 0 && s.hasPending() && len(c.w.Buf) < frontend.High {
				c.chunkLocked(s)
				more = true
			}
		}
	}
}

// ackWritten gives the core back its credit for deliveries written. The
// writer keeps the arrays it emptied (ackSpare, ackSeqs) for the next
// write: per delivery, nothing is allocated.
func (c *conn) ackWritten() {
	c.w.Mu.Lock()
	acks := c.toAck
	c.toAck = c.ackSpare
	c.w.Mu.Unlock()
	c.ackSpare = nil
	if len(acks) == 0 {
		c.ackSpare = acks
		return
	}
	seqs := c.ackSeqs[:0]
	q := acks[0].q
	for _, a := range acks {
		if a.n > 0 {
			a.q.SettleRun(a.seq, a.n)
			continue
		}
		if a.q != q {
			q.AckMany(seqs)
			q, seqs = a.q, seqs[:0]
		}
		seqs = append(seqs, a.seq)
	}
	if len(seqs) > 0 {
		q.AckMany(seqs) // AckMany keeps no reference to seqs
	}
	clear(acks)
	if cap(acks) <= maxAckKeep {
		c.ackSpare, c.ackSeqs = acks[:0], seqs[:0]
	} else {
		c.ackSeqs = nil // a burst's arrays go
	}
}

// maxAckKeep bounds the acks' arrays a writer keeps (Config.Prefetch
// deliveries of each subscription fit in it usually).
const maxAckKeep = 1 << 14

// heartbeater sends a heartbeat when nothing was written for an interval
// and closes the connection when nothing was read for two.
func (c *conn) heartbeater() {
	hb := c.heartbeat
	t := time.NewTicker(hb / 2)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		now := time.Now()
		if now.Sub(time.Unix(0, c.lastWrite.Load())) >= hb/2 {
			c.w.Mu.Lock()
			if !c.w.Closed && len(c.w.Buf) == 0 {
				c.w.Buf = wire.AppendHeartbeat(c.w.Buf)
				c.w.Signal()
			}
			c.w.Mu.Unlock()
		}
		if last := c.lastRead.Load(); last > 0 && now.Sub(time.Unix(0, last)) > 2*hb {
			c.lg.hbTimeout.Store(true)
			c.log.Warn("no heartbeat from client, closing", append(c.who(), "interval", hb)...)
			c.nc.Close()
			return
		}
	}
}

// cleanup cancels the subscriptions and forgets the publishers.
func (c *conn) cleanup() {
	c.expiry.Stop()
	for id := range c.subs {
		c.unsubscribe(id)
	}
	for id := range c.pubs {
		c.deletePublisher(id)
	}
	if c.releaseCon != nil {
		c.releaseCon()
		c.releaseCon = nil
	}
}

func (c *conn) info() (ConnInfo, bool) {
	if !c.opened.Load() {
		return ConnInfo{}, false
	}
	client := map[string]any{}
	for _, kv := range c.peerProps {
		client[kv.Key] = kv.Value
	}
	return ConnInfo{Name: c.name, User: c.user.Name(), VHost: c.vh.Name(), Peer: c.nc.RemoteAddr().String(),
		Local: c.nc.LocalAddr().String(), ConnectedAt: c.connectedAt, Heartbeat: c.heartbeat, Client: client,
		RecvOct: c.recvOct.Load(), SendOct: c.sendOct.Load(), Published: c.published.Load(), Delivered: c.delivered.Load()}, true
}

// isEOF reports an ordinary end of the peer's side.
func isEOF(err error) bool {
	return err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}
