package stream

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/headers"
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
	m := new(exchange.Message)
	if err := toCoreInto(m, data, stream, true); err != nil {
		return nil, err
	}
	return m, nil
}

// DecodeAMQP10 is the core's decoder of the messages a stream keeps as the
// stream protocol published them (exchange.WithAMQP10Codec): the
// conversion a publish makes, for a reader of another protocol.
func DecodeAMQP10(data []byte, m *exchange.Message) error {
	return toCoreInto(m, data, "", true)
}

// toCoreInto converts a published message into m (a zero Message); its
// body is a copy of data's if own, else it points into data (a run's
// message, encoded before data is read again: exchange.PublishRun).
func toCoreInto(m *exchange.Message, data []byte, stream string, own bool) error {
	wm, err := wire.DecodeMessage(data)
	if err != nil {
		return err
	}
	m.RoutingKey, m.Body = stream, wm.Body
	if own {
		m.Body = append([]byte(nil), wm.Body...)
	}
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
		if wm.Subject != "" {
			p.Headers[hdrSubject] = wm.Subject
		}
		if wm.To != "" {
			p.Headers[hdrTo] = wm.To
		}
		if wm.GroupID != "" {
			p.Headers[hdrGroupID] = wm.GroupID
		}
	}
	return nil
}

// appendFromCore appends the AMQP 1.0 encoding of a core message: the
// annotations and application properties by ascending key, as
// appendStored writes them.
func appendFromCore(b []byte, m *exchange.Message) []byte {
	wm := fromCore(m)
	return wire.AppendMessage(b, &wm)
}

func fromCore(m *exchange.Message) wire.Message {
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
	byKey := func(a, b wire.Prop) int { return strings.Compare(a.Key, b.Key) }
	slices.SortFunc(wm.Annotations, byKey)
	slices.SortFunc(wm.AppProps, byKey)
	return wm
}

// appendStored appends the AMQP 1.0 encoding of a stored message read in
// place (a stream's record, exchange.ConsumeOpts.StoredRuns): the bytes
// appendFromCore writes for the message the record decodes to, without
// decoding it (no string, table or body is copied, nothing allocated but
// for the rare header values without an AMQP 1.0 type: decimals, arrays,
// tables, which are sent printed). One walk of the headers writes the
// annotations in place and the application properties, which follow the
// properties section, into scratch (the caller's, reused).
func appendStored(b []byte, m *exchange.StoredMessage, scratch *[]byte) []byte {
	b = wire.AppendHeaderSection(b, m.DeliveryMode == 2, m.Priority)
	p := wire.PropertyBytes{MessageID: m.MessageID, ReplyTo: m.ReplyTo, CorrelationID: m.CorrelationID,
		ContentType: m.ContentType, ContentEncoding: m.ContentEncoding}
	if !m.Timestamp.IsZero() {
		p.CreationTime = m.Timestamp.UnixMilli()
	}
	if len(m.Expiration) > 0 && p.CreationTime != 0 {
		if ms, err := strconv.ParseInt(string(m.Expiration), 10, 64); err == nil {
			p.AbsoluteExpiry = p.CreationTime + ms
		}
	}
	var app []byte
	if m.HasHeaders() {
		var ann, apps wire.MapSection
		b, ann = wire.BeginMapSection(b, true)
		app, apps = wire.BeginMapSection((*scratch)[:0], false)
		for e := m.Headers(); e.Next(); {
			k, v := e.Key(), e.Value()
			var to *[]byte
			switch string(k) {
			case "x-stream-offset":
				continue // the chunk says where each message is
			case hdrSubject:
				to = &p.Subject
			case hdrTo:
				to = &p.To
			case hdrGroupID:
				to = &p.GroupID
			}
			switch {
			case to != nil:
				if v.Tag == headers.TagString {
					*to = v.Str()
				}
			case bytes.HasPrefix(k, []byte("x-")):
				b = appendStoredValue(ann.Key(b, k), v)
			default:
				app = appendStoredValue(apps.Key(app, k), v)
			}
		}
		b = ann.End(b)
		app = apps.End(app)
		if cap(app) <= 64<<10 {
			*scratch = app[:0]
		}
	}
	b = wire.AppendPropertiesSection(b, &p)
	return wire.AppendDataSection(append(b, app...), m.Body)
}

// appendStoredValue appends v as wire.AppendValue appends its decoded
// value.
func appendStoredValue(b []byte, v headers.Raw) []byte {
	switch v.Tag {
	case headers.TagNil:
		return wire.AppendNull(b)
	case headers.TagBool:
		return wire.AppendBool(b, v.Uint() != 0)
	case headers.TagInt8:
		return wire.AppendByte(b, int8(v.Int()))
	case headers.TagUint8:
		return wire.AppendUbyte(b, uint8(v.Uint()))
	case headers.TagInt16:
		return wire.AppendShort(b, int16(v.Int()))
	case headers.TagUint16:
		return wire.AppendUshort(b, uint16(v.Uint()))
	case headers.TagInt32:
		return wire.AppendInt(b, int32(v.Int()))
	case headers.TagUint32:
		return wire.AppendUint(b, uint32(v.Uint()))
	case headers.TagInt64:
		return wire.AppendLong(b, v.Int())
	case headers.TagUint64:
		return wire.AppendUlong(b, v.Uint())
	case headers.TagFloat32:
		return wire.AppendFloat(b, binary.BigEndian.Uint32(v.B))
	case headers.TagFloat64:
		return wire.AppendDouble(b, binary.BigEndian.Uint64(v.B))
	case headers.TagString:
		return wire.AppendString(b, v.Str())
	case headers.TagBytes:
		return wire.AppendBinary(b, v.Str())
	case headers.TagTime:
		return wire.AppendTimestamp(b, time.Unix(v.Int(), 0).UTC().UnixMilli())
	}
	return wire.AppendValue(b, v.Decode()) // decimals, arrays, tables
}

// ownValue copies a binary value, which aliases the connection's read
// buffer.
func ownValue(v any) any {
	if b, ok := v.([]byte); ok {
		return append([]byte(nil), b...)
	}
	return v
}
