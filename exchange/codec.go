package exchange

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"sort"
	"time"
)

// The core's own record encoding for what it hands to the Store: a small
// tagged binary format for tables, and a message record built on it. It is
// private to the core; no protocol codec is involved.

var errCorrupt = errors.New("exchange: corrupt record")

const maxDecodeDepth = 32

type enc struct{ b []byte }

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }

func (e *enc) table(t Table) {
	e.uvarint(uint64(len(t)))
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.str(k)
		e.value(t[k])
	}
}

func (e *enc) value(v any) {
	switch x := v.(type) {
	case nil:
		e.b = append(e.b, 'V')
	case bool:
		if x {
			e.b = append(e.b, 't', 1)
		} else {
			e.b = append(e.b, 't', 0)
		}
	case int8:
		e.b = append(e.b, 'b', byte(x))
	case uint8:
		e.b = append(e.b, 'B', x)
	case int16:
		e.b = append(e.b, 's')
		e.b = binary.AppendVarint(e.b, int64(x))
	case uint16:
		e.b = append(e.b, 'u')
		e.uvarint(uint64(x))
	case int32:
		e.b = append(e.b, 'I')
		e.b = binary.AppendVarint(e.b, int64(x))
	case uint32:
		e.b = append(e.b, 'i')
		e.uvarint(uint64(x))
	case int:
		e.b = append(e.b, 'l')
		e.b = binary.AppendVarint(e.b, int64(x))
	case int64:
		e.b = append(e.b, 'l')
		e.b = binary.AppendVarint(e.b, x)
	case uint:
		e.b = append(e.b, 'L')
		e.uvarint(uint64(x))
	case uint64:
		e.b = append(e.b, 'L')
		e.uvarint(x)
	case float32:
		e.b = append(e.b, 'f')
		e.b = binary.BigEndian.AppendUint32(e.b, math.Float32bits(x))
	case float64:
		e.b = append(e.b, 'd')
		e.b = binary.BigEndian.AppendUint64(e.b, math.Float64bits(x))
	case string:
		e.b = append(e.b, 'S')
		e.str(x)
	case []byte:
		e.b = append(e.b, 'x')
		e.bytes(x)
	case time.Time:
		e.b = append(e.b, 'T')
		e.b = binary.AppendVarint(e.b, x.Unix())
	case []any:
		e.b = append(e.b, 'A')
		e.uvarint(uint64(len(x)))
		for _, it := range x {
			e.value(it)
		}
	default:
		if t, ok := asTable(v); ok {
			e.b = append(e.b, 'F')
			e.table(t)
			return
		}
		// Decimal and other struct values: keep what we can, as a string.
		// A decimal from a front end's codec: {Scale uint8; Value int32}.
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Struct && rv.NumField() == 2 &&
			rv.Field(0).Kind() == reflect.Uint8 && rv.Field(1).Kind() == reflect.Int32 {
			e.b = append(e.b, 'D')
			e.uvarint(rv.Field(0).Uint())
			e.b = binary.AppendVarint(e.b, rv.Field(1).Int())
			return
		}
		e.b = append(e.b, 'V')
	}
}

// Decimal is a decimal table value (AMQP 'D'), as the core stores it.
type Decimal struct {
	Scale uint8
	Value int32
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() { d.err = errCorrupt; d.b = nil }

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) raw(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) str() string { return string(d.raw(d.uvarint())) }
func (d *dec) byte1() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *dec) table(depth int) Table {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) || depth > maxDecodeDepth {
		d.fail()
		return nil
	}
	t := make(Table, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.str()
		t[k] = d.value(depth + 1)
	}
	return t
}

func (d *dec) value(depth int) any {
	if depth > maxDecodeDepth {
		d.fail()
		return nil
	}
	switch d.byte1() {
	case 'V':
		return nil
	case 't':
		return d.byte1() != 0
	case 'b':
		return int8(d.byte1())
	case 'B':
		return d.byte1()
	case 's':
		return int16(d.varint())
	case 'u':
		return uint16(d.uvarint())
	case 'I':
		return int32(d.varint())
	case 'i':
		return uint32(d.uvarint())
	case 'l':
		return d.varint()
	case 'L':
		return d.uvarint()
	case 'f':
		p := d.raw(4)
		if p == nil {
			return nil
		}
		return math.Float32frombits(binary.BigEndian.Uint32(p))
	case 'd':
		p := d.raw(8)
		if p == nil {
			return nil
		}
		return math.Float64frombits(binary.BigEndian.Uint64(p))
	case 'S':
		return d.str()
	case 'x':
		return append([]byte(nil), d.raw(d.uvarint())...)
	case 'T':
		return time.Unix(d.varint(), 0).UTC()
	case 'A':
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			d.fail()
			return nil
		}
		l := make([]any, 0, n)
		for i := uint64(0); i < n && d.err == nil; i++ {
			l = append(l, d.value(depth+1))
		}
		return l
	case 'F':
		return d.table(depth + 1)
	case 'D':
		s := d.uvarint()
		v := d.varint()
		return Decimal{Scale: uint8(s), Value: int32(v)}
	}
	d.fail()
	return nil
}

// encodeMessage encodes m (with its enqueue time, for TTL) for the store.
func encodeMessage(m *Message, enqueuedAt int64, buf []byte) []byte {
	e := enc{b: buf}
	e.b = append(e.b, 1) // version
	e.str(m.Exchange)
	e.str(m.RoutingKey)
	e.b = binary.AppendVarint(e.b, enqueuedAt)
	e.b = binary.AppendVarint(e.b, m.expiresAt)
	p := &m.Props
	e.str(p.ContentType)
	e.str(p.ContentEncoding)
	if p.Headers == nil {
		e.b = append(e.b, 0)
	} else {
		e.b = append(e.b, 1)
		e.table(p.Headers)
	}
	e.b = append(e.b, p.DeliveryMode, p.Priority)
	e.str(p.CorrelationID)
	e.str(p.ReplyTo)
	e.str(p.Expiration)
	e.str(p.MessageID)
	if p.Timestamp.IsZero() {
		e.b = append(e.b, 0)
	} else {
		e.b = append(e.b, 1)
		e.b = binary.AppendVarint(e.b, p.Timestamp.Unix())
	}
	e.str(p.Type)
	e.str(p.UserID)
	e.str(p.AppID)
	e.bytes(m.Body)
	return e.b
}

func decodeMessage(data []byte) (m *Message, enqueuedAt int64, err error) {
	d := dec{b: data}
	if d.byte1() != 1 {
		return nil, 0, errCorrupt
	}
	m = &Message{}
	m.Exchange = d.str()
	m.RoutingKey = d.str()
	enqueuedAt = d.varint()
	m.expiresAt = d.varint()
	p := &m.Props
	p.ContentType = d.str()
	p.ContentEncoding = d.str()
	if d.byte1() == 1 {
		p.Headers = d.table(0)
	}
	p.DeliveryMode = d.byte1()
	p.Priority = d.byte1()
	p.CorrelationID = d.str()
	p.ReplyTo = d.str()
	p.Expiration = d.str()
	p.MessageID = d.str()
	if d.byte1() == 1 {
		p.Timestamp = time.Unix(d.varint(), 0).UTC()
	}
	p.Type = d.str()
	p.UserID = d.str()
	p.AppID = d.str()
	m.Body = append([]byte(nil), d.raw(d.uvarint())...)
	m.ts = enqueuedAt
	if d.err != nil {
		return nil, 0, d.err
	}
	return m, enqueuedAt, nil
}

// encodeRecord and decodeRecord store a metadata record as a table.
func encodeRecord(t Table) []byte {
	e := enc{}
	e.table(t)
	return e.b
}

func decodeRecord(b []byte) (Table, error) {
	d := dec{b: b}
	t := d.table(0)
	return t, d.err
}
