package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/trident-broker/trident/exchange/headers"
)

// Table is an AMQP field table. Decoding yields these Go types, by field
// type tag (RabbitMQ's dialect of the 0-9-1 tags):
//
//	t bool        b int8     B uint8    s int16    u uint16
//	I int32       i uint32   l int64    f float32  d float64
//	D Decimal     S string   x []byte   A []any    T time.Time (UTC)
//	F Table       V nil
//
// Encoding accepts all of those and also: map[string]any (as F), int, int64
// and uint, uint64 up to math.MaxInt64 (as l), and []Table (as A). Strings
// are written as long strings (S), as RabbitMQ and amqp091-go do.
//
// Empty tables decode as nil. Duplicate keys: the last one wins.
//
// It is the core's table type (exchange/headers), so that a table the core
// decoded from its store or a forwarding link encodes here as it came.
type Table = headers.Table

// Decimal is an AMQP decimal value: Value / 10^Scale; the core's type too.
type Decimal = headers.Decimal

// MaxTableDepth bounds how deeply tables and arrays may nest, both when
// decoding and when encoding.
const MaxTableDepth = 64

// DecodeTable decodes a field table including its 4-byte length prefix and
// requires that nothing follows it.
func DecodeTable(b []byte) (Table, error) {
	d := decoder{b: b}
	t := d.table()
	return t, d.finish()
}

// AppendTable appends the encoding of t, including its 4-byte length prefix.
func AppendTable(b []byte, t Table) ([]byte, error) {
	return appendTable(b, t, 0)
}

func (d *decoder) tableDepth(depth int) Table {
	body := d.longstrBytes()
	if d.err != nil || len(body) == 0 {
		return nil
	}
	if depth >= MaxTableDepth {
		d.fail("field table nested deeper than %d", MaxTableDepth)
		return nil
	}
	// The smallest entry takes 3 bytes (empty name, 'V'), so the input
	// bounds the size hint.
	t := make(Table, min(len(body)/3, 16))
	sub := decoder{b: body}
	for len(sub.b) > 0 && sub.err == nil {
		name := sub.shortstrBytes()
		v := sub.value(depth)
		if sub.err == nil {
			t[string(name)] = v
		}
	}
	if sub.err != nil {
		d.err, d.b = sub.err, nil
		return nil
	}
	return t
}

func (d *decoder) array(depth int) []any {
	body := d.longstrBytes()
	if d.err != nil || len(body) == 0 {
		return nil
	}
	if depth >= MaxTableDepth {
		d.fail("field array nested deeper than %d", MaxTableDepth)
		return nil
	}
	a := make([]any, 0, min(len(body), 16))
	sub := decoder{b: body}
	for len(sub.b) > 0 && sub.err == nil {
		v := sub.value(depth)
		if sub.err == nil {
			a = append(a, v)
		}
	}
	if sub.err != nil {
		d.err, d.b = sub.err, nil
		return nil
	}
	return a
}

// value decodes one tagged field value.
func (d *decoder) value(depth int) any {
	tag := d.octet()
	if d.err != nil {
		return nil
	}
	switch tag {
	case 't':
		return d.octet() != 0
	case 'b':
		return int8(d.octet())
	case 'B':
		return d.octet()
	case 's':
		return int16(d.short())
	case 'u':
		return d.short()
	case 'I':
		return int32(d.long())
	case 'i':
		return d.long()
	case 'l':
		return int64(d.longlong())
	case 'f':
		return math.Float32frombits(d.long())
	case 'd':
		return math.Float64frombits(d.longlong())
	case 'D':
		scale := d.octet()
		return Decimal{Scale: scale, Value: int32(d.long())}
	case 'S':
		return d.longstr()
	case 'x':
		b := d.longstrBytes()
		if d.err != nil {
			return nil
		}
		return append([]byte{}, b...)
	case 'A':
		return d.array(depth + 1)
	case 'T':
		return d.timestamp()
	case 'F':
		return d.tableDepth(depth + 1)
	case 'V':
		return nil
	}
	d.fail("unknown field value type %q", tag)
	return nil
}

// appendTable appends t with its length prefix.
func appendTable(b []byte, t Table, depth int) ([]byte, error) {
	if depth >= MaxTableDepth {
		return b, ErrTableTooDeep
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for k, v := range t {
		if len(k) > 255 {
			return b, fmt.Errorf("wire: field table key %.40q...: %w", k, ErrShortStringTooLong)
		}
		b = append(b, uint8(len(k)))
		b = append(b, k...)
		var err error
		if b, err = appendValue(b, v, depth); err != nil {
			return b, err
		}
	}
	return patchLength(b, start)
}

func patchLength(b []byte, start int) ([]byte, error) {
	n := len(b) - start - 4
	if uint64(n) > math.MaxUint32 {
		return b, ErrLongStringTooLong
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

func appendArray(b []byte, a []any, depth int) ([]byte, error) {
	if depth >= MaxTableDepth {
		return b, ErrTableTooDeep
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for _, v := range a {
		var err error
		if b, err = appendValue(b, v, depth); err != nil {
			return b, err
		}
	}
	return patchLength(b, start)
}

func appendLongBytes(b []byte, tag byte, s []byte) ([]byte, error) {
	if uint64(len(s)) > math.MaxUint32 {
		return b, ErrLongStringTooLong
	}
	b = append(b, tag)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...), nil
}

// appendValue appends one tagged field value.
func appendValue(b []byte, v any, depth int) ([]byte, error) {
	be := binary.BigEndian
	switch v := v.(type) {
	case nil:
		return append(b, 'V'), nil
	case bool:
		if v {
			return append(b, 't', 1), nil
		}
		return append(b, 't', 0), nil
	case int8:
		return append(b, 'b', uint8(v)), nil
	case uint8:
		return append(b, 'B', v), nil
	case int16:
		return be.AppendUint16(append(b, 's'), uint16(v)), nil
	case uint16:
		return be.AppendUint16(append(b, 'u'), v), nil
	case int32:
		return be.AppendUint32(append(b, 'I'), uint32(v)), nil
	case uint32:
		return be.AppendUint32(append(b, 'i'), v), nil
	case int64:
		return be.AppendUint64(append(b, 'l'), uint64(v)), nil
	case int:
		return be.AppendUint64(append(b, 'l'), uint64(int64(v))), nil
	case uint:
		if uint64(v) > math.MaxInt64 {
			return b, fmt.Errorf("wire: uint %d does not fit a signed 64-bit field: %w", v, ErrUnsupportedType)
		}
		return be.AppendUint64(append(b, 'l'), uint64(v)), nil
	case uint64:
		if v > math.MaxInt64 {
			return b, fmt.Errorf("wire: uint64 %d does not fit a signed 64-bit field: %w", v, ErrUnsupportedType)
		}
		return be.AppendUint64(append(b, 'l'), v), nil
	case float32:
		return be.AppendUint32(append(b, 'f'), math.Float32bits(v)), nil
	case float64:
		return be.AppendUint64(append(b, 'd'), math.Float64bits(v)), nil
	case Decimal:
		return be.AppendUint32(append(b, 'D', v.Scale), uint32(v.Value)), nil
	case string:
		if uint64(len(v)) > math.MaxUint32 {
			return b, ErrLongStringTooLong
		}
		b = be.AppendUint32(append(b, 'S'), uint32(len(v)))
		return append(b, v...), nil
	case []byte:
		return appendLongBytes(b, 'x', v)
	case time.Time:
		return be.AppendUint64(append(b, 'T'), uint64(v.Unix())), nil
	case Table:
		return appendTable(append(b, 'F'), v, depth+1)
	case map[string]any:
		return appendTable(append(b, 'F'), v, depth+1)
	case []any:
		return appendArray(append(b, 'A'), v, depth+1)
	case []Table:
		b = append(b, 'A')
		if depth+1 >= MaxTableDepth {
			return b, ErrTableTooDeep
		}
		start := len(b)
		b = append(b, 0, 0, 0, 0)
		for _, t := range v {
			var err error
			if b, err = appendTable(append(b, 'F'), t, depth+2); err != nil {
				return b, err
			}
		}
		return patchLength(b, start)
	}
	return b, fmt.Errorf("wire: %T: %w", v, ErrUnsupportedType)
}
