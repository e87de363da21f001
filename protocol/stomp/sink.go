package stomp

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// unackedRef maps a delivery tag to the queue's handle.
type unackedRef struct {
	tag uint64
	q   *exchange.Queue
	seq uint64
	at  int64 // the connection's clock at delivery (timeout.go)
}

// subscription is one SUBSCRIBE (or a temp-queue's implicit one). It is
// the consumer's exchange.Sink.
type subscription struct {
	c        *conn
	id       string
	tag      string // consumer tag, "T_" + id
	queue    string
	ack      ackMode
	cons     *exchange.Consumer // reader goroutine
	durableQ string             // durable subscription queue, deleted by UNSUBSCRIBE durable:true
	gone     atomic.Bool

	// Precomputed header lines, escaped for the connection's version.
	subLine  []byte // "subscription:<id>\n"
	idPrefix []byte // "T_<id>@@<session>@@", escaped

	// Under c.dmu.
	unacked  []unackedRef
	watched  bool   // in c.acked (timeout.go)
	lastX    string // cache of the last destination header
	lastKey  string
	lastDest []byte
}

func (c *conn) newSubscription(id, queue string, mode ackMode) *subscription {
	s := &subscription{c: c, id: id, tag: "T_" + id, queue: queue, ack: mode}
	s.subLine = frame.AppendHeader(nil, "subscription", id, c.version)
	line := frame.AppendHeader(nil, "x", s.tag+"@@"+c.session+"@@", c.version)
	s.idPrefix = line[2 : len(line)-1]
	return s
}

// DeliverCopy implements exchange.CopyingSink: Deliver encodes the message
// into the connection's output buffer at once and keeps nothing of it
// (the destination cache keeps only its strings).
func (s *subscription) DeliverCopy(d exchange.Delivery) (ok, done bool) {
	return s.Deliver(d), true
}

// Deliver implements exchange.Sink. It runs with the queue's lock held.
func (s *subscription) Deliver(d exchange.Delivery) bool {
	c := s.c
	c.dmu.Lock()
	c.nextTag++
	c.delivered.Add(1)
	tag := c.nextTag
	if s.ack != ackAuto {
		if !s.watched {
			c.watchLocked(s)
		}
		s.unacked = append(s.unacked, unackedRef{tag: tag, q: d.Queue, seq: d.Seq, at: c.wd.Now()})
	}
	if d.Msg.Exchange != s.lastX || d.Msg.RoutingKey != s.lastKey || s.lastDest == nil {
		s.lastX, s.lastKey = d.Msg.Exchange, d.Msg.RoutingKey
		s.lastDest = frame.AppendHeader(s.lastDest[:0], "destination", formatDestination(d.Msg.Exchange, d.Msg.RoutingKey), c.version)
	}
	c.s.cfg.Tracer.Deliver(d, tracing.Protocol{Name: "stomp", Version: c.version.String()})
	c.w.Mu.Lock()
	ok := true
	if !c.w.Closed {
		c.w.Buf = s.appendMessage(c.w.Buf, tag, d)
		c.endFrameBatchLocked(d.Batch)
		if len(c.w.Buf) >= frontend.High {
			ok = false
			if d.Consumer != nil {
				c.w.Paused = append(c.w.Paused, d.Consumer)
			}
		}
	}
	c.w.Mu.Unlock()
	c.dmu.Unlock()
	return ok
}

// appendMessage encodes a MESSAGE frame (dmu held).
func (s *subscription) appendMessage(b []byte, tag uint64, d exchange.Delivery) []byte {
	v := s.c.version
	m := d.Msg
	b = frame.AppendCommand(b, frame.MESSAGE)
	b = append(b, s.subLine...)
	b = append(b, s.lastDest...)
	b = append(b, "message-id:"...)
	b = append(b, s.idPrefix...)
	b = strconv.AppendUint(b, tag, 10)
	b = append(b, '\n')
	if d.Redelivered {
		b = append(b, "redelivered:true\n"...)
	} else {
		b = append(b, "redelivered:false\n"...)
	}
	if v == frame.V12 && s.ack != ackAuto {
		b = append(b, "ack:"...)
		b = append(b, s.idPrefix...)
		b = strconv.AppendUint(b, tag, 10)
		b = append(b, '\n')
	}
	p := &m.Props
	str := func(b []byte, k, val string) []byte {
		if val == "" {
			return b
		}
		return frame.AppendHeader(b, k, val, v)
	}
	b = str(b, "content-type", p.ContentType)
	b = str(b, "content-encoding", p.ContentEncoding)
	if p.DeliveryMode == 2 {
		b = append(b, "persistent:true\n"...)
	}
	if p.Priority != 0 {
		b = frame.AppendHeaderInt(b, "priority", int64(p.Priority))
	}
	b = str(b, "correlation-id", p.CorrelationID)
	if p.ReplyTo != "" {
		rt := p.ReplyTo
		if !hasDestPrefix(rt) {
			rt = prefixReplyQueue + rt
		}
		b = frame.AppendHeader(b, "reply-to", rt, v)
	}
	b = str(b, "expiration", p.Expiration)
	b = str(b, "amqp-message-id", p.MessageID)
	if !p.Timestamp.IsZero() {
		b = frame.AppendHeaderInt(b, "timestamp", p.Timestamp.Unix())
	}
	b = str(b, "type", p.Type)
	b = str(b, "user-id", p.UserID)
	b = str(b, "app-id", p.AppID)
	for k, val := range p.Headers {
		if reservedHeader(k) {
			continue
		}
		if sv, ok := headerString(val); ok {
			b = frame.AppendHeader(b, k, sv, v)
		}
	}
	b = frame.AppendHeaderInt(b, "content-length", int64(len(m.Body)))
	return frame.AppendBody(b, m.Body)
}

// reservedHeader reports the MESSAGE headers the server sets itself, which
// an AMQP header of the same name must not shadow.
func reservedHeader(k string) bool {
	switch k {
	case "subscription", "destination", "message-id", "redelivered", "ack", "content-length",
		"content-type", "content-encoding", "persistent", "priority", "correlation-id", "reply-to",
		"expiration", "amqp-message-id", "timestamp", "type", "user-id", "app-id":
		return true
	}
	return false
}

// headerString renders an AMQP header value as a STOMP header value;
// tables and arrays are left out, as RabbitMQ does.
func headerString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, uint:
		return strconv.FormatInt(toInt64(x), 10), true
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case time.Time:
		return strconv.FormatInt(x.Unix(), 10), true
	}
	return "", false
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int8:
		return int64(n)
	case int16:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case int:
		return int64(n)
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	case uint64:
		if n > math.MaxInt64 {
			return math.MaxInt64
		}
		return int64(n)
	case uint:
		return int64(n)
	}
	return 0
}

// Cancelled implements exchange.Sink: the queue was deleted. As RabbitMQ,
// the client gets an ERROR frame naming the subscription and the
// connection stays open.
func (s *subscription) Cancelled(*exchange.Consumer) {
	s.gone.Store(true)
	s.c.writeFrame(&frame.Frame{Command: frame.ERROR, Headers: []frame.Header{
		{Key: "message", Value: "Server cancelled subscription"}, {Key: "subscription", Value: s.id},
		{Key: "content-type", Value: "text/plain"}},
		Body: []byte("The server has canceled a subscription.\nNo more messages will be delivered for '" + s.id + "'.\n")})
}

// take removes the deliveries an ACK or NACK of tag settles: tag alone, or
// (ack mode client) every earlier one of the subscription too.
func (s *subscription) take(tag uint64) ([]unackedRef, bool) {
	c := s.c
	c.dmu.Lock()
	defer c.dmu.Unlock()
	lo, hi := 0, len(s.unacked)
	for lo < hi {
		mid := (lo + hi) / 2
		if s.unacked[mid].tag < tag {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(s.unacked) || s.unacked[lo].tag != tag {
		return nil, false
	}
	// Settling from the head (a cumulative ACK, or individual ACKs in
	// order) cuts the head off without copying the rest, and hands it
	// out: capped, so that the caller's writes stay in it, and no longer
	// part of s.unacked, whose appends only ever go past its end.
	if s.ack == ackClient || lo == 0 {
		out := s.unacked[: lo+1 : lo+1]
		s.unacked = s.unacked[lo+1:]
		if len(s.unacked) == 0 {
			s.unacked = nil // start the next deliveries on a fresh array
		}
		return out, true
	}
	r := s.unacked[lo]
	s.unacked = append(s.unacked[:lo], s.unacked[lo+1:]...)
	return []unackedRef{r}, true
}

// cancel stops the consumer and requeues its unacknowledged messages.
func (s *subscription) cancel() {
	if s.cons != nil {
		s.cons.Cancel()
	}
	c := s.c
	c.dmu.Lock()
	refs := s.unacked
	s.unacked = nil
	c.unwatchLocked(s)
	c.dmu.Unlock()
	abandon(refs)
}
