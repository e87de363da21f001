package stream

import (
	"math"
	"strconv"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// A subscription is a core consumer of the stream (the stream's cursor
// reads ahead and delivers as the consumer's prefetch allows); its sink
// keeps the deliveries until the client's credit lets the writer turn them
// into chunks: one chunk per credit, consecutive offsets, at most
// maxChunkMsgs messages and maxChunkBytes (and the frame max). The writer
// acks what it wrote, which gives the core its credit back, so a
// subscription holds at most Config.Prefetch messages in memory whatever
// the client's pace.

const (
	maxChunkMsgs  = 1000
	maxChunkBytes = 1 << 20
)

type subscription struct {
	c      *conn
	id     uint8
	stream string
	q      *exchange.Queue
	cons   *exchange.Consumer

	// Guarded by c.w.Mu.
	credit       int
	pending      []exchange.Delivery
	pendingBytes int
	gone         bool
	// Single active consumer (consumerupdate.go): the subscribe answer
	// was written; the ConsumerUpdate waiting for its answer (0 none).
	answered  bool
	askCorr   uint32
	askActive bool
	askT      *time.Timer
}

// maxPendingBytes pauses a subscription's consumer (besides its prefetch)
// while its deliveries waiting for credit hold this many body bytes; the
// writer resumes it once it has written (frontend.Output.Paused).
const maxPendingBytes = 4 << 20

// Deliver takes a delivery from the stream's cursor (stream.mu held).
func (s *subscription) Deliver(d exchange.Delivery) bool {
	c := s.c
	more := true
	c.w.Mu.Lock()
	if !s.gone && !c.w.Closed {
		s.pending = append(s.pending, d)
		s.pendingBytes += sizeOf(d)
		if s.credit > 0 {
			c.w.Signal()
		}
		if s.pendingBytes >= maxPendingBytes {
			c.w.Paused = append(c.w.Paused, d.Consumer)
			more = false
		}
	}
	c.w.Mu.Unlock()
	return more
}

// Cancelled: the stream was deleted.
func (s *subscription) Cancelled(*exchange.Consumer) {
	c := s.c
	c.w.Mu.Lock()
	s.gone = true
	s.pending, s.pendingBytes = nil, 0
	if !c.w.Closed {
		c.w.Buf = wire.AppendMetadataUpdate(c.w.Buf, wire.StreamNotAvailable, s.stream)
		c.w.Signal()
	}
	c.w.Mu.Unlock()
}

// sizeOf is what a pending delivery counts for (maxPendingBytes): its
// body, or its stored record.
func sizeOf(d exchange.Delivery) int {
	if d.Msg != nil {
		return len(d.Msg.Body)
	}
	return len(d.Record)
}

// offsetOf is a delivery's offset in its stream.
func offsetOf(d exchange.Delivery) (uint64, bool) { return exchange.StreamOffset(d) }

// chunkLocked writes one chunk of s's pending deliveries (w.Mu held,
// s.credit > 0, pending not empty).
func (c *conn) chunkLocked(s *subscription) {
	first, ok := offsetOf(s.pending[0])
	if !ok {
		c.log.Error("stream delivery without an offset dropped", "stream", s.stream)
		c.toAck = append(c.toAck, ackRef{q: s.q, seq: s.pending[0].Seq})
		s.pendingBytes -= sizeOf(s.pending[0])
		s.pending = s.pending[1:]
		return
	}
	b, ch := wire.BeginDeliver(c.w.Buf, s.id, first, time.Now().UnixMilli())
	start := len(b)
	// Within the negotiated frame max, unless one message alone is over it.
	limit := min(maxChunkBytes, int(c.frameMax)-128)
	n := 0
	for n < len(s.pending) && n < maxChunkMsgs {
		d := s.pending[n]
		if off, ok := offsetOf(d); !ok || off != first+uint64(n) {
			break // a gap (retention, a crash): the next chunk starts there
		}
		if d.Msg != nil || d.Shared != nil {
			enc := c.encode(d)
			if n > 0 && len(b)-start+4+len(enc) > limit {
				break
			}
			b = ch.Add(b, enc)
		} else {
			// A stored record read alone, encoded into the frame in place.
			m := c.view(s, d)
			mark := len(b)
			var at int
			b, at = ch.BeginEntry(b)
			b = appendStored(b, &m, &c.mapScratch)
			if n > 0 && len(b)-start > limit {
				b = b[:mark]
				break
			}
			b = ch.EndEntry(b, at)
		}
		c.toAck = append(c.toAck, ackRef{q: s.q, seq: d.Seq})
		s.pendingBytes -= sizeOf(d)
		n++
	}
	c.w.Buf = ch.End(b)
	// What is left moves to the front: the slice keeps its array (at
	// most Config.Prefetch deliveries) rather than reslicing past it and
	// growing a new one from nothing after each chunk (~160 bytes
	// allocated per delivery, the largest churn of a read from first).
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	s.credit--
	c.delivered.Add(uint64(n))
	if cap(c.scratch) > 1<<20 {
		c.scratch = nil
	}
}

// amqp10 is the key of a message's AMQP 1.0 encoding, cached on messages
// the stream's raw readers share.
var amqp10 = exchange.NewEncodingKey("stream-amqp10")

// view reads d's stored record in place.
func (c *conn) view(s *subscription, d exchange.Delivery) exchange.StoredMessage {
	m, err := exchange.ViewStoredMessage(d.Record)
	if err != nil { // the core checked it: never
		off, _ := offsetOf(d)
		c.log.Error("stream delivery unreadable", "stream", s.stream, "offset", off, "err", err)
	}
	return m
}

// encode is d's message in AMQP 1.0: a stored record that other
// subscriptions read too (Delivery.Shared) encoded once and cached on what
// they share; a message cached on it when other subscriptions deliver the
// same message (exchange.SharedDelivery), else in c.scratch.
func (c *conn) encode(d exchange.Delivery) []byte {
	if d.Shared != nil {
		if b := d.Shared.Encoding(amqp10); b != nil {
			return b
		}
		m, err := exchange.ViewStoredMessage(d.Record)
		if err != nil { // the core checked it: never
			c.log.Error("stream delivery unreadable", "err", err)
		}
		b := appendStored(make([]byte, 0, len(d.Record)+64), &m, &c.mapScratch)
		return d.Shared.AddEncoding(&exchange.Encoding{Key: amqp10, Bytes: b})
	}
	if exchange.SharedDelivery(d) {
		if b := d.Msg.Encoding(amqp10); b != nil {
			return b
		}
		// Room for the body and the usual properties: one allocation.
		b := appendFromCore(make([]byte, 0, len(d.Msg.Body)+128), d.Msg)
		return d.Msg.AddEncoding(&exchange.Encoding{Key: amqp10, Bytes: b})
	}
	c.scratch = appendFromCore(c.scratch[:0], d.Msg)
	return c.scratch
}

func (c *conn) subscribe(f wire.Subscribe) {
	reply := func(code wire.Code) { c.respond(wire.KeySubscribe, f.Corr, code) }
	if _, dup := c.subs[f.ID]; dup {
		reply(wire.SubscriptionIDExists)
		return
	}
	if code := c.streamCode(f.Stream, true); code != wire.OK {
		reply(code)
		return
	}
	var sac bool
	var name, super string
	for _, p := range f.Props {
		switch p.Key {
		case "single-active-consumer":
			sac = p.Value == "true"
		case "name":
			name = p.Value
		case "super-stream":
			super = p.Value
		}
	}
	spec, ok := offsetArg(f.OffsetType, f.Offset)
	if !ok {
		reply(wire.PreconditionFailed)
		return
	}
	s := &subscription{c: c, id: f.ID, stream: f.Stream}
	// A partition of the super stream the subscription names has its
	// index: a single-active group spreads the partitions (streamsac.go).
	cons, err := c.vh.Consume(f.Stream, exchange.ConsumeOpts{Tag: "stream.sub-" + strconv.Itoa(int(f.ID)),
		Prefetch: c.s.cfg.Prefetch, Sink: s, Owner: c, Args: exchange.Table{"x-stream-offset": spec},
		SingleActive: sac, GroupName: name, PartitionIndex: c.partitionIndex(f.Stream, super), NoOffsetHeader: true,
		StoredRecords: true})
	if err != nil {
		reply(codeOf(err))
		return
	}
	s.cons, s.q = cons, cons.Queue()
	c.subs[f.ID] = s
	// The answer goes before any chunk: credit is given only now.
	c.w.Mu.Lock()
	c.w.Buf = wire.AppendResponse(c.w.Buf, wire.KeySubscribe, f.Corr, wire.OK)
	s.credit = int(f.Credit)
	c.wsubs = append(c.wsubs, s)
	s.answered = true
	if s.askCorr != 0 {
		c.w.Buf = wire.AppendConsumerUpdate(c.w.Buf, s.askCorr, s.id, s.askActive)
	}
	c.w.Signal()
	c.w.Mu.Unlock()
}

// offsetArg turns a protocol offset specification into an
// x-stream-offset value, ok false for an unknown type.
func offsetArg(typ uint16, off uint64) (any, bool) {
	switch typ {
	case wire.OffsetFirst:
		return "first", true
	case wire.OffsetLast:
		return "last", true
	case wire.OffsetNext:
		return "next", true
	case wire.OffsetOffset:
		return int64(min(off, math.MaxInt64)), true
	case wire.OffsetTimestamp:
		return time.UnixMilli(int64(off)), true
	}
	return nil, false
}

func (c *conn) unsubscribe(id uint8) wire.Code {
	s, ok := c.subs[id]
	if !ok {
		return wire.SubscriptionIDNotExist
	}
	delete(c.subs, id)
	s.cons.Cancel() // no Deliver after it returns
	c.w.Mu.Lock()
	s.gone = true
	s.pending, s.pendingBytes = nil, 0
	if s.askT != nil {
		s.askT.Stop()
	}
	for i, ws := range c.wsubs {
		if ws == s {
			c.wsubs = append(c.wsubs[:i], c.wsubs[i+1:]...)
			break
		}
	}
	c.w.Mu.Unlock()
	return wire.OK
}

func (c *conn) credit(f wire.Credit) {
	s, ok := c.subs[f.ID]
	if !ok {
		c.write(func(b []byte) []byte { return wire.AppendCreditResponse(b, wire.SubscriptionIDNotExist, f.ID) })
		return
	}
	c.w.Mu.Lock()
	s.credit += int(f.Credit)
	if s.credit > 0 && len(s.pending) > 0 {
		c.w.Signal()
	}
	c.w.Mu.Unlock()
}

// storeOffset keeps a reference's offset (no answer, as in RabbitMQ; a
// refusal is logged).
func (c *conn) storeOffset(f wire.StoreOffset) {
	if code := c.streamCode(f.Stream, true); code != wire.OK {
		c.log.Warn("store offset refused", append(c.who(), "stream", f.Stream, "reference", f.Reference, "code", uint16(code))...)
		return
	}
	q, err := c.vh.Queue(f.Stream, c)
	if err == nil {
		err = q.StoreStreamOffset(f.Reference, f.Offset)
	}
	if err != nil {
		c.log.Warn("store offset refused", append(c.who(), "stream", f.Stream, "reference", f.Reference, "err", err)...)
	}
}

func (c *conn) queryOffset(f wire.QueryOffset) {
	reply := func(code wire.Code, off uint64) {
		c.write(func(b []byte) []byte { return wire.AppendQueryOffsetResponse(b, f.Corr, code, off) })
	}
	if code := c.streamCode(f.Stream, true); code != wire.OK {
		reply(code, 0)
		return
	}
	q, err := c.vh.Queue(f.Stream, c)
	if err != nil {
		reply(wire.StreamDoesNotExist, 0)
		return
	}
	off, ok := q.StreamOffset(f.Reference)
	if !ok {
		reply(wire.NoOffset, 0)
		return
	}
	reply(wire.OK, off)
}
