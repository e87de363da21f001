package frame

import (
	"fmt"

	"github.com/trident-broker/trident/exchange/headers"
)

// The payload codec: the frame's own fields on top of the headers
// package's primitives and tables, in its Link format.

type enc struct{ headers.Encoder }

func newEnc(b []byte) enc { return enc{headers.Encoder{B: b, Format: headers.Link}} }

// deltas writes ascending-or-not ids as a count and zigzag deltas.
func (e *enc) deltas(ids []uint64) {
	e.Uvarint(uint64(len(ids)))
	var prev uint64
	for _, id := range ids {
		e.Varint(int64(id - prev))
		prev = id
	}
}

func (e *enc) message(m *Message) {
	e.Str(m.Exchange)
	e.Str(m.RoutingKey)
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
}

// err is the encoder's first failure, as this package reports it.
func (e *enc) err() error {
	if e.Err == nil {
		return nil
	}
	return fmt.Errorf("frame: %w", e.Err)
}

// dec reads a payload. The first failure sets Err and empties B, so that
// every later read fails too and the caller checks once.
type dec struct{ headers.Decoder }

func newDec(b []byte) dec { return dec{headers.Decoder{B: b, Format: headers.Link}} }

func (d *dec) deltas() []uint64 {
	n := d.Count()
	if n == 0 {
		return nil
	}
	ids := make([]uint64, 0, n)
	var prev uint64
	for i := 0; i < n && d.Err == nil; i++ {
		prev += uint64(d.Varint())
		ids = append(ids, prev)
	}
	return ids
}

func (d *dec) message(m *Message) {
	m.Exchange = d.Str()
	m.RoutingKey = d.Str()
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
	m.Body = d.Bytes()
}
