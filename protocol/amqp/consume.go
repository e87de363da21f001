package amqp

import (
	"crypto/rand"
	"encoding/base64"
	"sync/atomic"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
)

func randomTag(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func (ch *channel) consume(m *wire.BasicConsume) error {
	tag := m.ConsumerTag
	if tag == "" {
		tag = randomTag("amq.ctag-")
	}
	if old, dup := ch.consumers[tag]; dup {
		if !old.gone.Load() {
			return connErr(wire.NotAllowed, m, "attempt to reuse consumer tag '%s'", tag)
		}
		delete(ch.consumers, tag)
	}
	s := &sink{ch: ch, tag: tag, noAck: m.NoAck}
	o := exchange.ConsumeOpts{Tag: tag, NoAck: m.NoAck, Exclusive: m.Exclusive, Sink: s, Owner: ch.c,
		Prefetch: ch.prefetch, Limit: &ch.limit, Args: m.Arguments, Protocol: exchange.ProtoAMQP}
	if p, ok := m.Arguments["x-priority"]; ok {
		n, ok := toInt(p)
		if !ok {
			return chanErr(wire.PreconditionFailed, m, "invalid arg 'x-priority' for consumer")
		}
		o.Priority = n
	}
	if m.Queue == exchange.ReplyToQueue {
		if ch.replyTo != "" {
			return chanErr(wire.PreconditionFailed, m, "reply consumer already set")
		}
		cons, name, err := ch.vh().ConsumeReplyTo(o)
		if err != nil {
			return err
		}
		ch.replyTo = name
		s.cons = cons
		ch.consumers[tag] = s
		if !m.NoWait {
			ch.c.send(ch.id, &wire.BasicConsumeOK{ConsumerTag: tag})
		}
		return nil
	}
	if err := ch.check(auth.Read, "queue", m.Queue); err != nil {
		return err
	}
	// The consume-ok must precede the first delivery: hold the delivery
	// lock so that dispatch inside Consume waits for it.
	ch.dmu.Lock()
	s.pending = true
	ch.dmu.Unlock()
	cons, err := ch.vh().Consume(m.Queue, o)
	if err != nil {
		return err
	}
	s.cons = cons
	ch.consumers[tag] = s
	if !m.NoWait {
		ch.c.send(ch.id, &wire.BasicConsumeOK{ConsumerTag: tag})
	}
	s.release()
	return nil
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int8:
		return int(n), true
	case uint8:
		return int(n), true
	case int16:
		return int(n), true
	case uint16:
		return int(n), true
	case int32:
		return int(n), true
	case uint32:
		return int(n), true
	case int64:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
}

// --- the consumer sink ---

// sink delivers a consumer's messages onto its channel.
type sink struct {
	ch      *channel
	tag     string
	noAck   bool
	cons    *exchange.Consumer
	pending bool                // consume-ok not yet sent; under ch.dmu
	gone    atomic.Bool         // cancelled by the core
	held    []exchange.Delivery // deliveries before consume-ok; under ch.dmu
}

// release sends deliveries held back until consume-ok was queued.
func (s *sink) release() {
	ch := s.ch
	ch.dmu.Lock()
	s.pending = false
	held := s.held
	s.held = nil
	for _, d := range held {
		s.write(d)
	}
	ch.dmu.Unlock()
}

// Deliver implements exchange.Sink.
func (s *sink) Deliver(d exchange.Delivery) bool {
	ok, _ := s.DeliverCopy(d)
	return ok
}

// DeliverCopy implements exchange.CopyingSink: a delivery written at once
// is copied into the connection's output buffer; one held until the
// consume-ok is written keeps its message.
func (s *sink) DeliverCopy(d exchange.Delivery) (ok, done bool) {
	ch := s.ch
	ch.dmu.Lock()
	if s.pending {
		d.Batch = nil // written later, by another goroutine
		s.held = append(s.held, d)
		ch.dmu.Unlock()
		return true, false
	}
	ok = s.write(d)
	ch.dmu.Unlock()
	return ok, true
}

// write assigns the delivery tag and encodes the delivery. Called with dmu.
func (s *sink) write(d exchange.Delivery) bool {
	ch := s.ch
	c := ch.c
	if ch.timedOut {
		// The channel is closing: keep the delivery for cleanup to
		// requeue, and stop this consumer.
		if !s.noAck {
			ch.orphans = append(ch.orphans, unackedRef{q: d.Queue, seq: d.Seq})
		}
		return false
	}
	ch.nextTag++
	if d.Redelivered {
		ch.counts.redeliver++
	}
	tag := ch.nextTag
	if s.noAck {
		ch.counts.deliverNoAck++
	} else {
		ch.counts.deliver++
		c.watchTimeouts()
		ch.unacked = append(ch.unacked, unackedRef{tag: tag, q: d.Queue, seq: d.Seq, at: c.wd.Now()})
	}
	c.s.cfg.Tracer.Deliver(d, tracing.AMQP091)
	c.w.Mu.Lock()
	c.deliver = wire.BasicDeliver{ConsumerTag: s.tag, DeliveryTag: tag, Redelivered: d.Redelivered,
		Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey}
	ok := c.appendContentLocked(ch.id, &c.deliver, d.Msg, d.Batch)
	if !ok && d.Consumer != nil {
		c.w.Paused = append(c.w.Paused, d.Consumer)
	}
	c.w.Mu.Unlock()
	return ok
}

// Cancelled implements exchange.Sink: the queue went away.
func (s *sink) Cancelled(*exchange.Consumer) {
	s.gone.Store(true)
	c := s.ch.c
	if !c.capCancel {
		return
	}
	c.w.Mu.Lock()
	if !c.w.Closed {
		var err error
		var b []byte
		if b, err = wire.AppendMethodFrame(c.w.Buf, s.ch.id, &wire.BasicCancel{ConsumerTag: s.tag, NoWait: true}); err == nil {
			c.w.Buf = b
		}
		c.queued()
	}
	c.w.Mu.Unlock()
}

// recheckConsumers cancels the consumers whose queue the connection's user
// may no longer read, after its credentials changed (update-secret), as
// RabbitMQ does; clients with consumer_cancel_notify get basic.cancel.
// Reader goroutine only.
func (ch *channel) recheckConsumers() {
	for tag, s := range ch.consumers {
		if s.cons == nil {
			continue
		}
		q := s.cons.Queue().Name()
		if q == ch.replyTo {
			continue // direct reply-to: no permission applies
		}
		if ch.check(auth.Read, "queue", q) != nil {
			delete(ch.consumers, tag)
			s.cons.Cancel()
			s.Cancelled(s.cons)
		}
	}
}
