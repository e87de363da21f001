package exchange

import (
	"errors"
	"fmt"

	"github.com/trident-broker/trident/exchange/headers"
)

// The core's own record encoding for what it hands to the Store: tables in
// the headers package's Stored format, and a message record built on it. No
// protocol codec is involved.

var errCorrupt = errors.New("exchange: corrupt record")

// Decimal is a decimal table value (AMQP 'D'), as the core stores it.
type Decimal = headers.Decimal

func corrupt(d *headers.Decoder) error {
	if d.Err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", errCorrupt, d.Err)
}

// encodeMessage encodes m (with its enqueue time, for TTL) for the store.
func encodeMessage(m *Message, enqueuedAt int64, buf []byte) []byte {
	e := headers.Encoder{B: buf, Format: headers.Stored}
	e.B = append(e.B, 1) // version
	e.Str(m.Exchange)
	e.Str(m.RoutingKey)
	e.Varint(enqueuedAt)
	e.Varint(m.expiresAt)
	p := &m.Props
	e.Str(p.ContentType)
	e.Str(p.ContentEncoding)
	e.Bool(p.Headers != nil)
	if p.Headers != nil {
		e.Table(p.Headers)
	}
	e.B = append(e.B, p.DeliveryMode, p.Priority)
	e.Str(p.CorrelationID)
	e.Str(p.ReplyTo)
	e.Str(p.Expiration)
	e.Str(p.MessageID)
	e.Bool(!p.Timestamp.IsZero())
	if !p.Timestamp.IsZero() {
		e.Time(p.Timestamp)
	}
	e.Str(p.Type)
	e.Str(p.UserID)
	e.Str(p.AppID)
	e.Bytes(m.Body)
	return e.B
}

func decodeMessage(data []byte) (m *Message, enqueuedAt int64, err error) {
	d := headers.Decoder{B: data, Format: headers.Stored}
	if d.Byte() != 1 {
		return nil, 0, errCorrupt
	}
	m = &Message{}
	m.Exchange = d.Str()
	m.RoutingKey = d.Str()
	enqueuedAt = d.Varint()
	m.expiresAt = d.Varint()
	p := &m.Props
	p.ContentType = d.Str()
	p.ContentEncoding = d.Str()
	if d.Bool() {
		p.Headers = d.Table()
	}
	p.DeliveryMode = d.Byte()
	p.Priority = d.Byte()
	p.CorrelationID = d.Str()
	p.ReplyTo = d.Str()
	p.Expiration = d.Str()
	p.MessageID = d.Str()
	if d.Bool() {
		p.Timestamp = d.Time()
	}
	p.Type = d.Str()
	p.UserID = d.Str()
	p.AppID = d.Str()
	m.Body = append([]byte(nil), d.Raw(d.Uvarint())...)
	m.ts = enqueuedAt
	if err := corrupt(&d); err != nil {
		return nil, 0, err
	}
	return m, enqueuedAt, nil
}

// encodeRecord and decodeRecord store a metadata record as a table.
func encodeRecord(t Table) []byte {
	e := headers.Encoder{Format: headers.Stored}
	e.Table(t)
	return e.B
}

func decodeRecord(b []byte) (Table, error) {
	d := headers.Decoder{B: b, Format: headers.Stored}
	t := d.Table()
	return t, corrupt(&d)
}
