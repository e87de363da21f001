package amqp

import (
	"strconv"
	"strings"
	"sync"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
)

// smallBody is the largest body that shares one allocation with its
// Message (see smallMessage).
const smallBody = 64

// smallMessage lets a small message and its body share one allocation: the
// body slices buf, which the Message keeps alive. They come from
// smallPool and go back to it when the core is done with them
// (exchange.Message.Reuse): in the steady state of a queue consumed by
// AMQP consumers a message costs no allocation.
type smallMessage struct {
	exchange.Message
	buf [smallBody]byte
}

var smallPool = sync.Pool{New: func() any { return new(smallMessage) }}

// Recycle implements exchange.Recycler.
func (sm *smallMessage) Recycle(*exchange.Message) { smallPool.Put(sm) }

// content handles a content header or body frame of a basic.publish.
func (ch *channel) content(f wire.Frame) error {
	if ch.state == chClosing {
		return nil
	}
	if !ch.pubActive {
		return connErr(wire.UnexpectedFrame, nil, "unexpected content frame on channel %d", ch.id)
	}
	if f.Type == wire.FrameHeader {
		if ch.pubHeader {
			return connErr(wire.UnexpectedFrame, &ch.pub, "expected content body, got content header")
		}
		classID, size, props, err := wire.DecodeContentHeader(f.Payload)
		if err != nil {
			return err
		}
		if classID != wire.ClassBasic {
			return connErr(wire.UnexpectedFrame, &ch.pub, "content header class %d, expected %d", classID, wire.ClassBasic)
		}
		if max := uint64(ch.c.s.cfg.MaxMessageSize); size > max {
			ch.pubActive = false
			ch.close(chanErr(wire.PreconditionFailed, &ch.pub, "message size %d is larger than configured max size %d", size, max))
			return nil
		}
		ch.pubProps = props
		ch.pubSize = size
		ch.pubHeader = true
		if size <= smallBody {
			sm := smallPool.Get().(*smallMessage)
			sm.Reuse(sm)
			ch.pubMsg, ch.pubBody = &sm.Message, sm.buf[:0:size]
		} else {
			// The body's buffer is allocated as the body arrives (growBody),
			// never from the declared size alone.
			ch.pubMsg, ch.pubBody = new(exchange.Message), nil
		}
		if size == 0 {
			return ch.publish()
		}
		return nil
	}
	if !ch.pubHeader {
		return connErr(wire.UnexpectedFrame, &ch.pub, "expected content header, got content body")
	}
	if uint64(len(ch.pubBody)+len(f.Payload)) > ch.pubSize {
		return connErr(wire.FrameError, &ch.pub, "content body larger than the declared size %d", ch.pubSize)
	}
	if len(ch.pubBody)+len(f.Payload) > cap(ch.pubBody) {
		ch.growBody(len(f.Payload))
	}
	ch.pubBody = append(ch.pubBody, f.Payload...)
	if uint64(len(ch.pubBody)) == ch.pubSize {
		return ch.publish()
	}
	return nil
}

// growBody makes room in the body being assembled for n more bytes. The
// buffer doubles, up to the declared size, so it never holds more than
// twice what has arrived: a content header that declares a large body
// reserves nothing, and a body that arrives in one frame (the common case)
// costs one allocation of its exact size. A body that needs more memory
// while a resource alarm is raised waits for the alarm to clear, as a
// publish does: the bodies being assembled are in the heap the memory
// alarm measures, and do not grow past it.
func (ch *channel) growBody(n int) {
	if len(ch.pubBody) > 0 {
		ch.c.waitAlarm() // a body that arrives in one frame does not wait twice
	}
	need := len(ch.pubBody) + n
	c := uint64(max(need, 2*cap(ch.pubBody)))
	c = min(c, ch.pubSize) // content() checked need <= pubSize
	b := make([]byte, len(ch.pubBody), c)
	copy(b, ch.pubBody)
	ch.pubBody = b
}

// publish routes the message that has just been assembled.
func (ch *channel) publish() error {
	ch.pubActive = false
	m := &ch.pub
	err := ch.publishOne(m)
	if err == nil {
		return nil
	}
	we := protoError(err, m)
	if we.ConnectionScope {
		return we
	}
	ch.close(we)
	return nil
}

func (ch *channel) publishOne(m *wire.BasicPublish) error {
	if v := ch.c.user.CredentialVersion(); v != ch.permVer {
		ch.permCache, ch.permVer = nil, v // a refreshed token: decide again
	}
	if ok, seen := ch.permCache[m.Exchange]; !seen || !ok {
		if err := ch.check(auth.Write, "exchange", m.Exchange); err != nil {
			return err
		}
		if ch.permCache == nil {
			ch.permCache = map[string]bool{}
		}
		ch.permCache[m.Exchange] = true
	}
	if err := ch.checkTopic(auth.Write, m.Exchange, m.RoutingKey); err != nil {
		return err
	}
	msg := ch.pubMsg
	msg.Exchange, msg.RoutingKey, msg.Body = m.Exchange, m.RoutingKey, ch.pubBody
	ch.pubMsg, ch.pubBody = nil, nil
	fromWireProps(&msg.Props, &ch.pubProps)
	if e := msg.Props.Expiration; e != "" {
		if why := badExpiration(e); why != "" {
			return chanErr(wire.PreconditionFailed, m, "invalid expiration '%s': %s", e, why)
		}
	}
	if u := msg.Props.UserID; u != "" && u != ch.c.user.Name() {
		return chanErr(wire.PreconditionFailed, m, "user_id property set to '%s' but authenticated user was '%s'", u, ch.c.user.Name())
	}
	if msg.Props.ReplyTo == exchange.ReplyToQueue {
		if ch.replyTo == "" {
			return chanErr(wire.PreconditionFailed, m, "fast reply consumer does not exist")
		}
		msg.Props.ReplyTo = ch.replyTo
	}
	if ch.tx {
		if _, ok := ch.vh().Exchange(m.Exchange); !ok {
			return chanErr(wire.NotFound, m, "no exchange '%s' in vhost '%s'", m.Exchange, ch.vh().Name())
		}
		ch.c.s.cfg.Tracer.Publish(msg, tracing.AMQP091).End(-1, nil) // routed at commit
		ch.txPubs = append(ch.txPubs, txPublish{msg: msg, mandatory: m.Mandatory})
		ch.stats.txMsgs.Store(int32(len(ch.txPubs)))
		return nil
	}
	o := exchange.PublishOpts{Batch: &ch.c.batch, Protocol: exchange.ProtoAMQP, Mandatory: m.Mandatory, Route: &ch.route}
	if ch.confirm {
		ch.pubSeq++
		o.Confirmer, o.Tag = ch, ch.pubSeq
	}
	sp := ch.c.s.cfg.Tracer.Publish(msg, tracing.AMQP091)
	res, err := ch.vh().Publish(msg, o)
	sp.End(res.Routed, err)
	if err != nil {
		return err
	}
	ch.stats.published.Add(1)
	if res.Pending {
		ch.stats.unconfirmed.Add(1)
	}
	if res.Routed == 0 && m.Mandatory {
		ch.sendReturn(msg)
	}
	if ch.confirm && !res.Pending {
		ch.c.sendConfirm(ch, o.Tag, res.OK)
	}
	if res.Solo {
		msg.Release() // not touched after this
	}
	return nil
}

// Confirm implements exchange.Confirmer for publisher confirms.
func (ch *channel) Confirm(tag uint64, ok bool) {
	ch.stats.unconfirmed.Add(-1)
	ch.c.sendConfirm(ch, tag, ok)
}

// badExpiration says why an expiration property is not what RabbitMQ
// accepts (a non-negative integer of milliseconds), in RabbitMQ's words,
// or returns "" if it is fine.
func badExpiration(s string) string {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i {
		return "no_integer"
	}
	if j < len(s) {
		return "{leftover_string," + strconv.Quote(s[j:]) + "}"
	}
	if s[0] == '-' {
		if n := strings.TrimLeft(s[1:j], "0"); n != "" {
			return "{value_negative,-" + n + "}"
		}
	}
	return ""
}

func (ch *channel) sendReturn(msg *exchange.Message) {
	ch.c.w.Mu.Lock()
	r := wire.BasicReturn{ReplyCode: wire.NoRoute, ReplyText: "NO_ROUTE", Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}
	ch.c.appendContentLocked(ch.id, &r, msg, nil)
	ch.c.w.Mu.Unlock()
}
