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
	if w := m.writer; w != nil {
		// Version 2: a stream record with its producer's name,
		// publishing id and filter value (streamlog/writers.go), then version
		// 1's fields.
		e.B = append(e.B, 2)
		e.Str(w.Ref)
		e.Uvarint(w.Seq)
		e.Str(w.Filter)
	} else {
		e.B = append(e.B, 1) // version
	}
	e.Str(m.Exchange)
	e.Str(m.RoutingKey)
	e.Varint(enqueuedAt)
	e.Varint(m.expiresAt)
	e.Properties((*headers.Properties)(&m.Props))
	e.Bytes(m.Body)
	return e.B
}

func decodeMessage(data []byte) (m *Message, enqueuedAt int64, err error) {
	d := headers.Decoder{B: data, Format: headers.Stored}
	switch d.Byte() {
	case 1:
	case 2: // a stream record's producer, not the message's (decodeWriter)
		d.Raw(d.Uvarint())
		d.Uvarint()
		d.Raw(d.Uvarint())
	default:
		return nil, 0, errCorrupt
	}
	m = &Message{}
	m.Exchange = d.Str()
	m.RoutingKey = d.Str()
	enqueuedAt = d.Varint()
	m.expiresAt = d.Varint()
	d.Properties((*headers.Properties)(&m.Props))
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
