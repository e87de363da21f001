package stream

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// A publisher is declared on one stream (write permission checked then,
// as RabbitMQ does) and publishes to that stream alone: the core's
// PublishOpts.Queue, past every exchange. Each message is confirmed once
// the core has it on disk (on a majority for a replicated stream), or
// refused with a PublishError carrying the protocol's code.
//
// A publisher declared with a reference is a named producer: its
// messages carry the reference and their publishing ids into the stream
// (Message.SetStreamWriter), which appends an id only if it is above the
// highest it holds of that reference and confirms the others without
// appending them (exchange/streamlog/writers.go). QueryPublisherSequence
// answers that highest id.

type publisher struct {
	id        uint8
	stream    string
	reference string
}

func (c *conn) declarePublisher(f wire.DeclarePublisher) wire.Code {
	if _, dup := c.pubs[f.ID]; dup {
		return wire.PreconditionFailed
	}
	if len(f.Reference) > 255 {
		return wire.PreconditionFailed
	}
	if f.Reference != "" && !c.vh.StreamWritersEnabled() {
		c.log.Warn("named producer refused: "+exchange.ErrStreamWritersDisabled.Error(), append(c.who(), "stream", f.Stream)...)
		return wire.PreconditionFailed
	}
	if code := c.streamCode(f.Stream, false); code != wire.OK {
		return code
	}
	if err := c.actor.CheckWrite(c.vh.Name(), exchange.ResourceQueue, f.Stream); err != nil {
		c.denied("declare_publisher", f.Stream, err)
		return wire.AccessRefused
	}
	c.pubs[f.ID] = &publisher{id: f.ID, stream: f.Stream, reference: f.Reference}
	c.s.addPublisher(c, c.vh.Name(), f.Stream)
	return wire.OK
}

func (c *conn) deletePublisher(id uint8) wire.Code {
	p, ok := c.pubs[id]
	if !ok {
		return wire.PublisherDoesNotExist
	}
	delete(c.pubs, id)
	c.s.dropPublisher(c, c.vh.Name(), p.stream)
	return wire.OK
}

// streamCode checks that name is a stream of the vhost: OK,
// StreamDoesNotExist, or (with read) AccessRefused without read
// permission on it.
func (c *conn) streamCode(name string, read bool) wire.Code {
	q, err := c.vh.Queue(name, c)
	if err != nil || !q.IsStream() {
		return wire.StreamDoesNotExist
	}
	if read {
		if err := c.actor.CheckRead(c.vh.Name(), exchange.ResourceQueue, name); err != nil {
			c.denied("read", name, err)
			return wire.AccessRefused
		}
	}
	return wire.OK
}

func (c *conn) publish(f wire.Publish) error {
	p := c.pubs[f.ID]
	if p == nil {
		errs := make([]wire.PublishingError, len(f.Messages))
		for i, m := range f.Messages {
			errs[i] = wire.PublishingError{ID: m.ID, Code: wire.PublisherDoesNotExist}
		}
		c.publishErrors(f.ID, errs)
		return nil
	}
	if err := c.admitPublish(); err != nil {
		return err
	}
	writers := c.vh.StreamWritersEnabled() // else filter values are dropped: the client post-filters
	if c.publishRun(p, f, writers) {
		return nil
	}
	// One lock for the frame's tags rather than one per message: a
	// client's frame is its batch (100 to 256 messages, or more).
	tags := c.tags[:0]
	c.pmu.Lock()
	for _, pm := range f.Messages {
		tags = append(tags, c.pending.add(p.id, pm.ID))
	}
	c.pmu.Unlock()
	c.tags = tags[:0]
	var refused []uint64 // tags answered here, not by the core
	for i, pm := range f.Messages {
		tag := tags[i]
		m, err := toCore(pm.Data, p.stream)
		if err != nil {
			refused = append(refused, tag)
			c.publishErrors(p.id, []wire.PublishingError{{ID: pm.ID, Code: wire.PreconditionFailed}})
			continue
		}
		if p.reference != "" {
			m.SetStreamWriter(p.reference, pm.ID) // deduplicated by the stream
		}
		if pm.Filter != "" && writers {
			m.SetStreamFilter(pm.Filter) // publish version 2
		}
		res, err := c.vh.Publish(m, exchange.PublishOpts{Queue: p.stream, Confirmer: c, Tag: tag, Batch: &c.batch})
		if res.Pending && err == nil {
			c.published.Add(1)
			continue
		}
		refused = append(refused, tag)
		switch {
		case err != nil:
			c.publishErrors(p.id, []wire.PublishingError{{ID: pm.ID, Code: codeOf(err)}})
		case res.Routed == 0:
			c.publishErrors(p.id, []wire.PublishingError{{ID: pm.ID, Code: wire.StreamDoesNotExist}})
		case !res.OK:
			c.publishErrors(p.id, []wire.PublishingError{{ID: pm.ID, Code: wire.InternalError}})
		default:
			c.published.Add(1)
			c.w.Mu.Lock()
			c.confirms[p.id] = append(c.confirms[p.id], pm.ID)
			c.w.Signal()
			c.w.Mu.Unlock()
		}
	}
	if len(refused) > 0 {
		c.pmu.Lock()
		for _, tag := range refused {
			c.pending.take(tag)
		}
		c.pmu.Unlock()
	}
	return nil
}

// publishRun hands a frame's messages to the stream as one run
// (exchange.PublishRun), answered once; false if the stream cannot take
// it whole (then nothing was published and the frame goes one by one).
// A message that does not decode is answered at once and left out.
func (c *conn) publishRun(p *publisher, f wire.Publish, writers bool) bool {
	if cap(c.run) < len(f.Messages) {
		c.run = make([]exchange.Message, len(f.Messages))
	}
	run, ptrs, ids := c.run[:len(f.Messages)], c.runPtr[:0], c.runIDs[:0]
	// Kept as published where the stream may (exchange/streamamqp10.go):
	// checked as a conversion would, not converted.
	var raw [][]byte
	if c.vh.StreamAMQP10Enabled() {
		if raw = c.runRaw[:0]; raw == nil {
			raw = make([][]byte, 0, len(f.Messages))
		}
	}
	var bad []wire.PublishingError
	for i, pm := range f.Messages {
		m := &run[i]
		var err error
		if raw != nil {
			if _, err = wire.DecodeMessage(pm.Data); err == nil {
				m.RoutingKey = p.stream
				raw = append(raw, pm.Data)
			}
		} else {
			err = toCoreInto(m, pm.Data, p.stream, false)
		}
		if err != nil {
			bad = append(bad, wire.PublishingError{ID: pm.ID, Code: wire.PreconditionFailed})
			continue
		}
		if p.reference != "" {
			m.SetStreamWriter(p.reference, pm.ID) // deduplicated by the stream
		}
		if pm.Filter != "" && writers {
			m.SetStreamFilter(pm.Filter) // publish version 2
		}
		ptrs = append(ptrs, m)
		ids = append(ids, pm.ID)
	}
	ok := true
	if len(ptrs) > 0 {
		// The confirm's ids outlive the frame: a slice of their own.
		mine := slices.Clone(ids)
		pub := p.id
		var n int
		n, ok = c.vh.PublishRun(p.stream, ptrs, raw, &c.batch, func(err error) { c.confirmRun(pub, mine, err) })
		c.published.Add(uint64(n))
	}
	clear(run) // no header, string or body of this frame kept
	clear(ptrs)
	clear(raw)
	c.runPtr, c.runIDs = ptrs[:0], ids[:0]
	if raw != nil {
		c.runRaw = raw[:0]
	}
	if cap(c.run) > keptRun {
		// A frame of many small messages: not kept for the next.
		c.run, c.runPtr, c.runIDs, c.runRaw = nil, nil, nil, nil
	}
	if !ok {
		return false
	}
	if len(bad) > 0 {
		c.publishErrors(p.id, bad)
	}
	return true
}

// keptRun is how many messages' room publishRun keeps between frames
// (a Message is ~300 bytes): a client's usual frame (100 to 256
// messages, rabbitmq-stream-go-client's up to 1,000).
const keptRun = 1024

// confirmRun answers a run (publishRun): every id confirmed, or each an
// error.
func (c *conn) confirmRun(pub uint8, ids []uint64, err error) {
	c.w.Mu.Lock()
	if err == nil {
		c.confirms[pub] = append(c.confirms[pub], ids...)
	} else {
		for _, id := range ids {
			c.perrs[pub] = append(c.perrs[pub], wire.PublishingError{ID: id, Code: wire.InternalError})
		}
	}
	c.w.Signal()
	c.w.Mu.Unlock()
}

// Confirm is the core's answer to a pending publish (exchange.Confirmer),
// from another goroutine.
func (c *conn) Confirm(tag uint64, ok bool) {
	c.pmu.Lock()
	pp, found := c.pending.take(tag)
	c.pmu.Unlock()
	if !found {
		return
	}
	c.w.Mu.Lock()
	if ok {
		c.confirms[pp.pub] = append(c.confirms[pp.pub], pp.id)
	} else {
		c.perrs[pp.pub] = append(c.perrs[pp.pub], wire.PublishingError{ID: pp.id, Code: wire.InternalError})
	}
	c.w.Signal()
	c.w.Mu.Unlock()
}

func (c *conn) publishErrors(id uint8, errs []wire.PublishingError) {
	c.w.Mu.Lock()
	c.perrs[id] = append(c.perrs[id], errs...)
	c.w.Signal()
	c.w.Mu.Unlock()
}

// metadataUpdate tells the client that stream is no longer available.
func (c *conn) metadataUpdate(stream string) {
	c.write(func(b []byte) []byte { return wire.AppendMetadataUpdate(b, wire.StreamNotAvailable, stream) })
}

// admitPublish holds a Publish while a resource alarm (memory, disk) is
// raised or the publisher is over its rate limit: the reader stops
// reading, and TCP stalls the client, as RabbitMQ does. Deliveries go on.
func (c *conn) admitPublish() error {
	alarms := c.s.b.Alarms()
	if alarms.Raised() {
		if blocked, cleared, reason := alarms.Blocked(); blocked {
			c.batch.Flush()
			c.log.Info("publishing blocked by a resource alarm", "reason", reason)
			c.lastRead.Store(math.MaxInt64) // no heartbeat is read meanwhile
			select {
			case <-cleared:
			case <-c.stop:
				return errClosed
			}
			c.lastRead.Store(time.Now().UnixNano())
		}
	}
	if c.s.b.Limiter().RateLimited() {
		c.batch.Flush()
	}
	ok := c.s.b.Limiter().WaitPublish(c.user.Name(), c.vh.Name(), c.stop)
	c.lastRead.Store(time.Now().UnixNano())
	if !ok {
		return errClosed
	}
	return nil
}

// codeOf maps a core error onto a response code.
func codeOf(err error) wire.Code {
	var ce *exchange.Error
	if errors.As(err, &ce) {
		switch ce.Kind {
		case exchange.KindNotFound:
			return wire.StreamDoesNotExist
		case exchange.KindAccessRefused:
			return wire.AccessRefused
		case exchange.KindPreconditionFailed, exchange.KindNotImplemented:
			return wire.PreconditionFailed
		}
	}
	var code wire.Code
	if errors.As(err, &code) {
		return code
	}
	if isAccessError(err) {
		return wire.AccessRefused
	}
	return wire.InternalError
}

// queryPublisherSequence answers the highest publishing id the stream
// holds of a named producer, 0 if none (as RabbitMQ, also for an empty
// reference).
func (c *conn) queryPublisherSequence(f wire.QueryPublisherSequence) {
	reply := func(code wire.Code, seq uint64) {
		c.write(func(b []byte) []byte { return wire.AppendQueryPublisherSequenceResponse(b, f.Corr, code, seq) })
	}
	if code := c.streamCode(f.Stream, false); code != wire.OK {
		reply(code, 0)
		return
	}
	q, err := c.vh.Queue(f.Stream, c)
	if err != nil {
		reply(wire.StreamDoesNotExist, 0)
		return
	}
	if f.Reference == "" {
		reply(wire.OK, 0)
		return
	}
	seq, err := q.StreamPublisherSequence(f.Reference)
	if errors.Is(err, exchange.ErrStreamWritersDisabled) {
		c.log.Warn("publisher sequence refused: "+err.Error(), append(c.who(), "stream", f.Stream)...)
		reply(wire.PreconditionFailed, 0)
		return
	}
	if errors.Is(err, exchange.ErrNoStreamCopy) {
		// Better a refused named producer than one that numbers new
		// messages as duplicates: the client can reach a member.
		c.log.Info("publisher sequence asked of a node without a copy of the stream", append(c.who(), "stream", f.Stream)...)
		reply(wire.StreamNotAvailable, 0)
		return
	}
	if err != nil {
		c.log.Warn("publisher sequence not read", append(c.who(), "stream", f.Stream, "err", err)...)
		reply(wire.InternalError, 0)
		return
	}
	reply(wire.OK, seq)
}
