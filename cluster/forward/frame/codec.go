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
	e.Properties(&m.Props)
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
	d.Properties(&m.Props)
	m.Body = d.Bytes()
}
