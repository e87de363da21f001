package stream

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"strconv"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/streamlog"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// A subscription is a core consumer of the stream (the stream's cursor
// reads ahead and hands over what it read as runs of stored records, as
// the consumer's prefetch allows: exchange's streamrun.go); its sink keeps
// them until the client's credit lets the writer turn them into chunks:
// one chunk per credit, consecutive offsets, at most maxChunkMsgs messages
// and maxChunkBytes (and the frame max). The writer settles what it wrote,
// which gives the core its credit back, so a subscription holds at most
// Config.Prefetch messages in memory whatever the client's pace. A
// clustered stream read from another member delivers Messages one by one
// (pending), which the writer chunks the same way.

const (
	maxChunkMsgs  = 1024 // a run of records (exchange's runRecs) in one chunk
	maxChunkBytes = 1 << 20
)

type subscription struct {
	c      *conn
	id     uint8
	stream string
	q      *exchange.Queue
	cons   *exchange.Consumer

	// Guarded by c.w.Mu.
	credit int
	// runs are the runs of records to write, runs[0] from its record
	// runAt on; pending the messages (from another member).
	runs         []exchange.RecordRun
	runAt        int
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

// Deliver takes a message from the stream's cursor (stream.mu held): a
// clustered stream's, read from another member.
func (s *subscription) Deliver(d exchange.Delivery) bool {
	return s.take(d.Consumer, func() int {
		s.pending = append(s.pending, d)
		return len(d.Msg.Body)
	})
}

// DeliverRun takes a run of records from the stream's cursor (stream.mu
// held).
func (s *subscription) DeliverRun(r exchange.RecordRun) bool {
	return s.take(r.Consumer, func() int {
		s.runs = append(s.runs, r)
		return runBytes(r.Recs)
	})
}

// take keeps what add appends (its size) unless the subscription is gone;
// false pauses the consumer.
func (s *subscription) take(cons *exchange.Consumer, add func() int) bool {
	c := s.c
	more := true
	c.w.Mu.Lock()
	if !s.gone && !c.w.Closed {
		s.pendingBytes += add()
		if s.credit > 0 {
			c.w.Signal()
		}
		if s.pendingBytes >= maxPendingBytes {
			c.w.Paused = append(c.w.Paused, cons)
			more = false
		}
	}
	c.w.Mu.Unlock()
	return more
}

func runBytes(recs []streamlog.Rec) int {
	n := 0
	for _, r := range recs {
		n += len(r.Data)
	}
	return n
}

// hasPending reports whether s has something to write (w.Mu held).
func (s *subscription) hasPending() bool { return len(s.runs) > 0 || len(s.pending) > 0 }

// dropPending forgets what s had to write (w.Mu held).
func (s *subscription) dropPending() {
	s.runs, s.runAt, s.pending, s.pendingBytes = nil, 0, nil, 0
}

// Cancelled: the stream was deleted.
func (s *subscription) Cancelled(*exchange.Consumer) {
	c := s.c
	c.w.Mu.Lock()
	s.gone = true
	s.dropPending()
	if !c.w.Closed {
		c.w.Buf = wire.AppendMetadataUpdate(c.w.Buf, wire.StreamNotAvailable, s.stream)
		c.w.Signal()
	}
	c.w.Mu.Unlock()
}

// offsetOf is a delivery's offset in its stream.
func offsetOf(d exchange.Delivery) (uint64, bool) { return exchange.StreamOffset(d) }

// chunkLocked writes one chunk of what s has to write (w.Mu held,
// s.credit > 0, s.hasPending()).
func (c *conn) chunkLocked(s *subscription) {
	if len(s.runs) > 0 {
		c.runChunkLocked(s)
	} else {
		c.messageChunkLocked(s)
	}
	s.credit--
	if cap(c.scratch) > 1<<20 {
		c.scratch = nil
	}
}

// limit is what a chunk's messages may take: within the negotiated frame
// max, unless one message alone is over it.
func (c *conn) limit() int { return min(maxChunkBytes, int(c.frameMax)-128) }

// runChunkLocked writes a chunk of s.runs[0] from s.runAt: the run's
// shared encoding if other subscriptions read it too (encoded by the
// first), else its records encoded in place.
func (c *conn) runChunkLocked(s *subscription) {
	r := &s.runs[0]
	if s.runAt == 0 && r.Shared != nil {
		if enc := c.sharedRun(r); len(enc) > 0 {
			c.w.Buf = wire.AppendChunk(c.w.Buf, s.id, r.Recs[0].Off, time.Now().UnixMilli(), len(r.Recs),
				binary.BigEndian.Uint32(enc), enc[4:])
			c.wroteRun(s, len(r.Recs), len(r.Recs), runBytes(r.Recs))
			return
		}
	}
	recs := r.Recs[s.runAt:]
	first := recs[0].Off
	b, ch := wire.BeginDeliver(c.w.Buf, s.id, first, time.Now().UnixMilli())
	start, limit := len(b), c.limit()
	n, size := 0, 0
	for n < len(recs) && ch.Len() < maxChunkMsgs {
		rec := recs[n]
		if rec.Off != first+uint64(ch.Len()) {
			break // a gap (retention, a crash): the next chunk starts there
		}
		mark := len(b)
		var at int
		b, at = ch.BeginEntry(b)
		var ok bool
		if b, ok = c.appendRecord(b, s, rec); !ok {
			// Unreadable (logged, counted): skipped, which makes a gap.
			b = b[:mark]
			n++
			size += len(rec.Data)
			break
		}
		if ch.Len() > 0 && len(b)-start > limit {
			b = b[:mark]
			break
		}
		b = ch.EndEntry(b, at)
		n++
		size += len(rec.Data)
	}
	if ch.Len() > 0 {
		c.w.Buf = ch.End(b)
	} else {
		c.w.Buf = b[:len(c.w.Buf)] // nothing but a skipped record: no chunk, credit kept
		s.credit++
	}
	c.wroteRun(s, s.runAt+n, n, size)
}

// wroteRun settles the first upto records of s.runs[0] (n of them written
// or skipped now, size bytes) once written, and moves on.
func (c *conn) wroteRun(s *subscription, upto, n, size int) {
	r := &s.runs[0]
	c.toAck = append(c.toAck, ackRef{q: s.q, seq: r.SeqOf(upto - 1), n: n})
	s.pendingBytes -= size
	c.delivered.Add(uint64(n))
	if upto < len(r.Recs) {
		s.runAt = upto
		return
	}
	s.runAt = 0
	rest := copy(s.runs, s.runs[1:])
	clear(s.runs[rest:])
	s.runs = s.runs[:rest]
}

// appendRecord appends a stored record's message in AMQP 1.0, read in
// place; ok false (nothing appended) for a record that cannot be read,
// which is logged and counted.
func (c *conn) appendRecord(b []byte, s *subscription, rec streamlog.Rec) ([]byte, bool) {
	if raw, ok := exchange.StoredAMQP10(rec.Data); ok {
		return append(b, raw...), true // as it was published
	}
	err := exchange.ViewStoredMessageTo(&c.view, rec.Data)
	if err == nil {
		return appendStored(b, &c.view, &c.mapScratch), true
	}
	// A header key twice (never written by Trident): decoded, as the core
	// would keep it.
	msg, derr := exchange.DecodeStoredMessage(rec.Data)
	if derr == nil {
		return appendFromCore(b, msg), true
	}
	c.log.Error("corrupt stream message skipped", "stream", s.stream, "offset", rec.Off, "err", err)
	s.q.NoteUnreadable(1)
	return b, false
}

// amqp10run is the key of a shared run's encoding: its chunk's CRC (4
// bytes, big-endian) and the entries; empty if the run cannot be sent as
// one chunk (a record unreadable, or over the frame max).
var amqp10run = exchange.NewEncodingKey("stream-amqp10-run")

// sharedRun is r's shared encoding, made and cached if nobody made it yet.
func (c *conn) sharedRun(r *exchange.RecordRun) []byte {
	if enc := r.Shared.Encoding(amqp10run); enc != nil {
		return enc
	}
	size := 4
	for _, rec := range r.Recs {
		size += len(rec.Data) + 64
	}
	b := make([]byte, 4, size)
	var ch wire.Chunk // only its entries are used
	limit := c.limit()
	for _, rec := range r.Recs {
		var at int
		var ok bool
		b, at = ch.BeginEntry(b)
		if b, ok = c.appendRecordQuiet(b, rec); !ok || len(b)-4 > limit {
			b = b[:0]
			break
		}
		b = ch.EndEntry(b, at)
	}
	if len(b) > 0 {
		binary.BigEndian.PutUint32(b, crc32.ChecksumIEEE(b[4:]))
	}
	return r.Shared.AddEncoding(&exchange.Encoding{Key: amqp10run, Bytes: b})
}

// appendRecordQuiet is appendRecord without the log and count: the run's
// records are then written one by one, which logs and counts.
func (c *conn) appendRecordQuiet(b []byte, rec streamlog.Rec) ([]byte, bool) {
	if raw, ok := exchange.StoredAMQP10(rec.Data); ok {
		return append(b, raw...), true
	}
	if err := exchange.ViewStoredMessageTo(&c.view, rec.Data); err == nil {
		return appendStored(b, &c.view, &c.mapScratch), true
	}
	if msg, err := exchange.DecodeStoredMessage(rec.Data); err == nil {
		return appendFromCore(b, msg), true
	}
	return b, false
}

// messageChunkLocked writes one chunk of s's pending messages.
func (c *conn) messageChunkLocked(s *subscription) {
	first, ok := offsetOf(s.pending[0])
	if !ok {
		c.log.Error("stream delivery without an offset dropped", "stream", s.stream)
		c.toAck = append(c.toAck, ackRef{q: s.q, seq: s.pending[0].Seq})
		s.pendingBytes -= len(s.pending[0].Msg.Body)
		s.pending = s.pending[1:]
		s.credit++
		return
	}
	b, ch := wire.BeginDeliver(c.w.Buf, s.id, first, time.Now().UnixMilli())
	start, limit := len(b), c.limit()
	n := 0
	for n < len(s.pending) && n < maxChunkMsgs {
		d := s.pending[n]
		if off, ok := offsetOf(d); !ok || off != first+uint64(n) {
			break // a gap (retention, a crash): the next chunk starts there
		}
		enc := c.encode(d)
		if n > 0 && len(b)-start+4+len(enc) > limit {
			break
		}
		b = ch.Add(b, enc)
		c.toAck = append(c.toAck, ackRef{q: s.q, seq: d.Seq})
		s.pendingBytes -= len(d.Msg.Body)
		n++
	}
	c.w.Buf = ch.End(b)
	// What is left moves to the front: the slice keeps its array (at
	// most Config.Prefetch deliveries) rather than reslicing past it and
	// growing a new one from nothing after each chunk.
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	c.delivered.Add(uint64(n))
}

// encode is d's message in AMQP 1.0, in c.scratch.
func (c *conn) encode(d exchange.Delivery) []byte {
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
		SingleActive: sac, GroupName: name, PartitionIndex: c.partitionIndex(f.Stream, super),
		StoredRuns: true})
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
	s.dropPending()
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
	if s.credit > 0 && s.hasPending() {
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
