package stream

import (
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// Messages cross between the stream protocol's AMQP 1.0 format and the
// core's (AMQP 0-9-1 shaped) message as RabbitMQ maps them, so that an
// AMQP 0-9-1 or STOMP consumer of a stream reads what a stream client
// published and the other way round:
//
//	properties message-id, correlation-id,    ↔ the same properties
//	reply-to, content-type, content-encoding
//	properties creation-time                  ↔ timestamp
//	properties subject, to, group-id…         → headers x-amqp-subject…
//	header durable, priority                  ↔ delivery mode, priority
//	message annotations (x-…)                 ↔ headers x-…
//	application properties                    ↔ headers
//	data sections (or a string/binary value)  ↔ body
//
// Every message stored through the stream protocol is persistent.

// Headers that carry AMQP 1.0 properties the core has no field for.
const (
	hdrSubject = "x-amqp-subject"
	hdrTo      = "x-amqp-to"
	hdrGroupID = "x-amqp-group-id"
)

// toCore converts a published message, copying what it keeps of data.
func toCore(data []byte, stream string) (*exchange.Message, error) {
	wm, err := wire.DecodeMessage(data)
	if err != nil {
		return nil, err
	}
	m := &exchange.Message{RoutingKey: stream, Body: append([]byte(nil), wm.Body...)}
	p := &m.Props
	p.DeliveryMode = 2
	p.Priority = wm.Priority
	p.MessageID, p.CorrelationID, p.ReplyTo = wm.MessageID, wm.CorrelationID, wm.ReplyTo
	p.ContentType, p.ContentEncoding = wm.ContentType, wm.ContentEncoding
	if wm.CreationTime != 0 {
		p.Timestamp = time.UnixMilli(wm.CreationTime).UTC()
	}
	n := len(wm.Annotations) + len(wm.AppProps)
	if n > 0 || wm.Subject != "" || wm.To != "" || wm.GroupID != "" {
		p.Headers = make(exchange.Table, n+3)
		for _, a := range wm.AppProps {
			p.Headers[a.Key] = ownValue(a.Value)
		}
		for _, a := range wm.Annotations {
			p.Headers[a.Key] = ownValue(a.Value)
		}
		for k, v := range map[string]string{hdrSubject: wm.Subject, hdrTo: wm.To, hdrGroupID: wm.GroupID} {
			if v != "" {
				p.Headers[k] = v
			}
		}
	}
	return m, nil
}

// appendFromCore appends the AMQP 1.0 encoding of a stored message.
func appendFromCore(b []byte, m *exchange.Message) []byte {
	p := &m.Props
	wm := wire.Message{Durable: p.DeliveryMode == 2, Priority: p.Priority, MessageID: p.MessageID,
		CorrelationID: p.CorrelationID, ReplyTo: p.ReplyTo, ContentType: p.ContentType,
		ContentEncoding: p.ContentEncoding, Body: m.Body}
	if !p.Timestamp.IsZero() {
		wm.CreationTime = p.Timestamp.UnixMilli()
	}
	if p.Expiration != "" {
		if ms, err := strconv.ParseInt(p.Expiration, 10, 64); err == nil && wm.CreationTime != 0 {
			wm.AbsoluteExpiry = wm.CreationTime + ms
		}
	}
	for k, v := range p.Headers {
		switch {
		case k == "x-stream-offset":
			// The chunk says where each message is.
		case k == hdrSubject:
			wm.Subject, _ = v.(string)
		case k == hdrTo:
			wm.To, _ = v.(string)
		case k == hdrGroupID:
			wm.GroupID, _ = v.(string)
		case strings.HasPrefix(k, "x-"):
			wm.Annotations = append(wm.Annotations, wire.Prop{Key: k, Value: v})
		default:
			wm.AppProps = append(wm.AppProps, wire.Prop{Key: k, Value: v})
		}
	}
	return wire.AppendMessage(b, &wm)
}

// ownValue copies a binary value, which aliases the connection's read
// buffer.
func ownValue(v any) any {
	if b, ok := v.([]byte); ok {
		return append([]byte(nil), b...)
	}
	return v
}
