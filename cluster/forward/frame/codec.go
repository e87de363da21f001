package frame

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"sort"
	"time"
)

type enc struct {
	b   []byte
	err error
}

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) bool1(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *enc) time(t time.Time) {
	e.varint(t.Unix())
	e.uvarint(uint64(t.Nanosecond()))
}

// deltas writes ascending-or-not ids as a count and zigzag deltas.
func (e *enc) deltas(ids []uint64) {
	e.uvarint(uint64(len(ids)))
	var prev uint64
	for _, id := range ids {
		e.varint(int64(id - prev))
		prev = id
	}
}

func (e *enc) message(m *Message) {
	e.str(m.Exchange)
	e.str(m.RoutingKey)
	p := &m.Props
	e.str(p.ContentType)
	e.str(p.ContentEncoding)
	e.bool1(p.Headers != nil)
	if p.Headers != nil {
		e.table(p.Headers, 0)
	}
	e.b = append(e.b, p.DeliveryMode, p.Priority)
	e.str(p.CorrelationID)
	e.str(p.ReplyTo)
	e.str(p.Expiration)
	e.str(p.MessageID)
	e.bool1(!p.Timestamp.IsZero())
	if !p.Timestamp.IsZero() {
		e.time(p.Timestamp)
	}
	e.str(p.Type)
	e.str(p.UserID)
	e.str(p.AppID)
	e.bytes(m.Body)
}

func (e *enc) table(t map[string]any, depth int) {
	if depth >= MaxDepth {
		e.fail(fmt.Errorf("%w: tables nested deeper than %d", ErrUnsupported, MaxDepth))
		return
	}
	e.uvarint(uint64(len(t)))
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys) // one encoding per table: golden tests, fuzz round trips
	for _, k := range keys {
		e.str(k)
		e.value(t[k], depth+1)
	}
}

func (e *enc) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

func (e *enc) value(v any, depth int) {
	if depth >= MaxDepth {
		e.fail(fmt.Errorf("%w: values nested deeper than %d", ErrUnsupported, MaxDepth))
		return
	}
	switch x := v.(type) {
	case nil:
		e.b = append(e.b, 'V')
	case bool:
		e.b = append(e.b, 't')
		e.bool1(x)
	case int8:
		e.b = append(e.b, 'b', byte(x))
	case uint8:
		e.b = append(e.b, 'B', x)
	case int16:
		e.b = append(e.b, 's')
		e.varint(int64(x))
	case uint16:
		e.b = append(e.b, 'u')
		e.uvarint(uint64(x))
	case int32:
		e.b = append(e.b, 'I')
		e.varint(int64(x))
	case uint32:
		e.b = append(e.b, 'i')
		e.uvarint(uint64(x))
	case int64:
		e.b = append(e.b, 'l')
		e.varint(x)
	case int:
		e.b = append(e.b, 'l')
		e.varint(int64(x))
	case uint64:
		e.b = append(e.b, 'L')
		e.uvarint(x)
	case uint:
		e.b = append(e.b, 'L')
		e.uvarint(uint64(x))
	case float32:
		e.b = binary.BigEndian.AppendUint32(append(e.b, 'f'), math.Float32bits(x))
	case float64:
		e.b = binary.BigEndian.AppendUint64(append(e.b, 'd'), math.Float64bits(x))
	case string:
		e.b = append(e.b, 'S')
		e.str(x)
	case []byte:
		e.b = append(e.b, 'x')
		e.bytes(x)
	case time.Time:
		e.b = append(e.b, 'T')
		e.time(x)
	case Decimal:
		e.b = append(e.b, 'D', x.Scale)
		e.varint(int64(x.Value))
	case []any:
		e.b = append(e.b, 'A')
		e.uvarint(uint64(len(x)))
		for _, it := range x {
			e.value(it, depth+1)
		}
	case map[string]any:
		e.b = append(e.b, 'F')
		e.table(x, depth)
	default:
		e.reflected(v, depth)
	}
}

var tableType = reflect.TypeOf(map[string]any(nil))

// reflected encodes the named types a front end's codec uses: tables (a
// map type on map[string]any), arrays of them, decimals (struct{uint8;
// int32}).
func (e *enc) reflected(v any, depth int) {
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.Map && rv.Type().ConvertibleTo(tableType):
		e.b = append(e.b, 'F')
		e.table(rv.Convert(tableType).Interface().(map[string]any), depth)
	case rv.Kind() == reflect.Slice:
		e.b = append(e.b, 'A')
		e.uvarint(uint64(rv.Len()))
		for i := 0; i < rv.Len(); i++ {
			e.value(rv.Index(i).Interface(), depth+1)
		}
	case rv.Kind() == reflect.Struct && rv.NumField() == 2 &&
		rv.Field(0).Kind() == reflect.Uint8 && rv.Field(1).Kind() == reflect.Int32:
		e.b = append(e.b, 'D', uint8(rv.Field(0).Uint()))
		e.varint(rv.Field(1).Int())
	default:
		e.fail(fmt.Errorf("%w: %T", ErrUnsupported, v))
		e.b = append(e.b, 'V')
	}
}

// dec reads a payload. The first failure sets err and empties b, so that
// every later read fails too and the caller checks once.
type dec struct {
	b   []byte
	err string
}

func (d *dec) failf(format string, args ...any) {
	if d.err == "" {
		d.err = fmt.Sprintf(format, args...)
	}
	d.b = nil
}

// uvarint reads an unsigned varint; below, if not 0, is a bound it must
// stay under.
func (d *dec) uvarint(below uint64) uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	if below != 0 && v >= below {
		d.failf("value %d out of range", v)
		return 0
	}
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) byte1() byte {
	if len(d.b) < 1 {
		d.failf("short frame")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *dec) bool1() bool {
	switch d.byte1() {
	case 0:
		return false
	case 1:
		return true
	}
	d.failf("bad boolean")
	return false
}

// raw takes n bytes, never more than are left.
func (d *dec) raw(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.failf("length %d past the end of the frame", n)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) str() string { return string(d.raw(d.uvarint(0))) }

func (d *dec) bytes() []byte {
	p := d.raw(d.uvarint(0))
	if len(p) == 0 {
		return nil
	}
	return p
}

// count reads a number of items that each take at least one byte: it can
// never be more than the bytes left.
func (d *dec) count() int {
	n := d.uvarint(0)
	if n > uint64(len(d.b)) {
		d.failf("count %d past the end of the frame", n)
		return 0
	}
	return int(n)
}

func (d *dec) time() time.Time {
	s := d.varint()
	ns := d.uvarint(1e9)
	return time.Unix(s, int64(ns)).UTC()
}

func (d *dec) deltas() []uint64 {
	n := d.count()
	if n == 0 {
		return nil
	}
	ids := make([]uint64, 0, n)
	var prev uint64
	for i := 0; i < n && d.err == ""; i++ {
		prev += uint64(d.varint())
		ids = append(ids, prev)
	}
	return ids
}

func (d *dec) message(m *Message) {
	m.Exchange = d.str()
	m.RoutingKey = d.str()
	p := &m.Props
	p.ContentType = d.str()
	p.ContentEncoding = d.str()
	if d.bool1() {
		p.Headers = d.table(0)
	}
	p.DeliveryMode = d.byte1()
	p.Priority = d.byte1()
	p.CorrelationID = d.str()
	p.ReplyTo = d.str()
	p.Expiration = d.str()
	p.MessageID = d.str()
	if d.bool1() {
		p.Timestamp = d.time()
	}
	p.Type = d.str()
	p.UserID = d.str()
	p.AppID = d.str()
	m.Body = d.bytes()
}

func (d *dec) table(depth int) map[string]any {
	if depth >= MaxDepth {
		d.failf("tables nested deeper than %d", MaxDepth)
		return nil
	}
	n := d.count()
	t := make(map[string]any, min(n, 64))
	for i := 0; i < n && d.err == ""; i++ {
		k := d.str()
		t[k] = d.value(depth + 1)
	}
	return t
}

func (d *dec) value(depth int) any {
	if depth >= MaxDepth {
		d.failf("values nested deeper than %d", MaxDepth)
		return nil
	}
	switch c := d.byte1(); c {
	case 'V':
		return nil
	case 't':
		return d.bool1()
	case 'b':
		return int8(d.byte1())
	case 'B':
		return d.byte1()
	case 's':
		v := d.varint()
		if v < math.MinInt16 || v > math.MaxInt16 {
			d.failf("int16 %d", v)
		}
		return int16(v)
	case 'u':
		return uint16(d.uvarint(1 << 16))
	case 'I':
		v := d.varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			d.failf("int32 %d", v)
		}
		return int32(v)
	case 'i':
		return uint32(d.uvarint(1 << 32))
	case 'l':
		return d.varint()
	case 'L':
		return d.uvarint(0)
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
		return append([]byte{}, d.raw(d.uvarint(0))...)
	case 'T':
		return d.time()
	case 'D':
		s := d.byte1()
		v := d.varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			d.failf("decimal %d", v)
		}
		return Decimal{Scale: s, Value: int32(v)}
	case 'A':
		n := d.count()
		a := make([]any, 0, min(n, 64))
		for i := 0; i < n && d.err == ""; i++ {
			a = append(a, d.value(depth+1))
		}
		return a
	case 'F':
		return d.table(depth)
	default:
		if d.err == "" {
			d.failf("unknown value tag %q", c)
		}
		return nil
	}
}
