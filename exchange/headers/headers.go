// Package headers is the one codec of header tables that Trident writes in
// its own format: message headers, queue and consumer arguments and the
// core's metadata records, as the core hands them to its store and Raft
// logs (exchange) and as the forwarding link carries them between nodes
// (cluster/forward/frame). It also defines the value types every table in
// the process holds, Table and Decimal, which the AMQP codec
// (protocol/amqp/wire) uses as its own, so that a table decoded from the
// store or the link is one the AMQP front end can encode.
//
// It is a leaf: the standard library only. It is pure: bytes in, values out;
// no lock, no I/O.
//
// # Encoding
//
// A table is a count of entries (unsigned varint), then per entry, in
// ascending key order (one encoding per table: records compare by their
// bytes), its key (varint length and bytes) and its value: a tag byte and
// the value's bytes. Integers are varints (signed ones zigzag), floats
// big-endian IEEE 754, strings and byte strings a length and the bytes:
//
//	V nil      t bool (0|1)  b int8     B uint8    s int16    u uint16
//	I int32    i uint32      l int64    L uint64   f float32  d float64
//	S string   x []byte      A []any    F table    T time     D Decimal
//
// int is written as int64 and uint as uint64; tables of a named map type as
// F, slices as A, and a struct of a uint8 and an int32 (a front end's
// decimal) as D. Two formats, fixed since v0.1.0 by what was written to disk
// and to the link, differ in two tags (Format). Decoding checks every
// length and count against the bytes left before allocating, every integer
// against its type's range, and nesting against MaxDepth.
package headers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"time"
)

// Table is a field table. Decoding yields map[string]any for tables; the
// AMQP codec names its tables Table.
type Table map[string]any

// Decimal is a decimal value: Value / 10^Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// Properties is the layout of a message's properties, field for field
// exchange.Properties (and the forwarding link's mirror of it), which
// convert to it: Encoder.Properties and Decoder.Properties are the one
// codec of them.
type Properties struct {
	ContentType     string
	ContentEncoding string
	Headers         map[string]any
	DeliveryMode    uint8
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string
	MessageID       string
	Timestamp       time.Time
	Type            string
	UserID          string
	AppID           string
}

// Format is one of the two encodings v0.1.0 wrote; both are kept
// byte for byte, since data on disk, in Raft logs and from a node of the
// older version must decode.
type Format uint8

const (
	// Stored is what the core writes to its store and Raft logs: T is
	// whole seconds since the epoch (varint), D's scale a uvarint.
	Stored Format = iota
	// Link is what the forwarding link carries: T is seconds (varint) and
	// nanoseconds (uvarint below 1e9), D's scale one byte.
	Link
)

// MaxDepth bounds nesting: a table or array inside another is one level
// deeper; a value at MaxDepth does not decode, and the encoder writes the
// table or array that would hold it as nil.
const MaxDepth = 32

// ErrUnsupported is wrapped by Encoder.Err: a value of a type the codec
// cannot carry, or nested deeper than MaxDepth. It is written as nil ('V').
var ErrUnsupported = errors.New("headers: unsupported table value")

// Encoder appends to B. A value it cannot carry is written as nil and sets
// Err (the first such); callers that must carry every value check Err.
type Encoder struct {
	B      []byte
	Format Format
	Err    error
}

// Uvarint appends v as an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { e.B = binary.AppendUvarint(e.B, v) }

// Varint appends v as a zigzag varint.
func (e *Encoder) Varint(v int64) { e.B = binary.AppendVarint(e.B, v) }

// Str appends s as its length and bytes.
func (e *Encoder) Str(s string) { e.Uvarint(uint64(len(s))); e.B = append(e.B, s...) }

// Bytes appends p as its length and bytes.
func (e *Encoder) Bytes(p []byte) { e.Uvarint(uint64(len(p))); e.B = append(e.B, p...) }

// Bool appends 1 or 0.
func (e *Encoder) Bool(v bool) {
	if v {
		e.B = append(e.B, 1)
	} else {
		e.B = append(e.B, 0)
	}
}

// Time appends t in the encoder's format (without a tag).
func (e *Encoder) Time(t time.Time) {
	e.Varint(t.Unix())
	if e.Format == Link {
		e.Uvarint(uint64(t.Nanosecond()))
	}
}

// Properties appends p: its strings, a flag and the table for Headers (if
// not nil), DeliveryMode and Priority as bytes, a flag and the time for
// Timestamp (if not zero).
//
// It is on every persistent message's path: the strings are appended to a
// local slice (kept in registers) rather than through e.B.
func (e *Encoder) Properties(p *Properties) {
	b := appendStr(e.B, p.ContentType)
	b = appendStr(b, p.ContentEncoding)
	if p.Headers != nil {
		e.B = append(b, 1)
		e.Table(p.Headers)
		b = e.B
	} else {
		b = append(b, 0)
	}
	b = append(b, p.DeliveryMode, p.Priority)
	b = appendStr(b, p.CorrelationID)
	b = appendStr(b, p.ReplyTo)
	b = appendStr(b, p.Expiration)
	b = appendStr(b, p.MessageID)
	if !p.Timestamp.IsZero() {
		e.B = append(b, 1)
		e.Time(p.Timestamp)
		b = e.B
	} else {
		b = append(b, 0)
	}
	b = appendStr(b, p.Type)
	b = appendStr(b, p.UserID)
	e.B = appendStr(b, p.AppID)
}

func appendStr(b []byte, s string) []byte {
	if len(s) < 0x80 { // one byte of length: most properties are short or empty
		return append(append(b, byte(len(s))), s...)
	}
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// Table appends t: its count and its entries by ascending key.
func (e *Encoder) Table(t map[string]any) { e.table(t, 0) }

// Value appends one tagged value.
func (e *Encoder) Value(v any) { e.value(v, 1) }

func (e *Encoder) fail(err error) {
	if e.Err == nil {
		e.Err = err
	}
}

func (e *Encoder) table(t map[string]any, depth int) {
	e.Uvarint(uint64(len(t)))
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.Str(k)
		e.value(t[k], depth+1)
	}
}

func (e *Encoder) decimal(scale uint8, v int32) {
	e.B = append(e.B, 'D')
	if e.Format == Link {
		e.B = append(e.B, scale)
	} else {
		e.Uvarint(uint64(scale))
	}
	e.Varint(int64(v))
}

// full says whether a table or array at depth with n items would put them
// at MaxDepth; it is then written as nil and sets Err, so that what is
// written always decodes.
func (e *Encoder) full(depth, n int) bool {
	if n == 0 || depth+1 < MaxDepth {
		return false
	}
	e.fail(fmt.Errorf("%w: nested deeper than %d", ErrUnsupported, MaxDepth))
	e.B = append(e.B, 'V')
	return true
}

func (e *Encoder) value(v any, depth int) {
	switch x := v.(type) {
	case nil:
		e.B = append(e.B, 'V')
	case bool:
		e.B = append(e.B, 't')
		e.Bool(x)
	case int8:
		e.B = append(e.B, 'b', byte(x))
	case uint8:
		e.B = append(e.B, 'B', x)
	case int16:
		e.B = append(e.B, 's')
		e.Varint(int64(x))
	case uint16:
		e.B = append(e.B, 'u')
		e.Uvarint(uint64(x))
	case int32:
		e.B = append(e.B, 'I')
		e.Varint(int64(x))
	case uint32:
		e.B = append(e.B, 'i')
		e.Uvarint(uint64(x))
	case int64:
		e.B = append(e.B, 'l')
		e.Varint(x)
	case int:
		e.B = append(e.B, 'l')
		e.Varint(int64(x))
	case uint64:
		e.B = append(e.B, 'L')
		e.Uvarint(x)
	case uint:
		e.B = append(e.B, 'L')
		e.Uvarint(uint64(x))
	case float32:
		e.B = binary.BigEndian.AppendUint32(append(e.B, 'f'), math.Float32bits(x))
	case float64:
		e.B = binary.BigEndian.AppendUint64(append(e.B, 'd'), math.Float64bits(x))
	case string:
		e.B = append(e.B, 'S')
		e.Str(x)
	case []byte:
		e.B = append(e.B, 'x')
		e.Bytes(x)
	case time.Time:
		e.B = append(e.B, 'T')
		e.Time(x)
	case Decimal:
		e.decimal(x.Scale, x.Value)
	case []any:
		if e.full(depth, len(x)) {
			return
		}
		e.B = append(e.B, 'A')
		e.Uvarint(uint64(len(x)))
		for _, it := range x {
			e.value(it, depth+1)
		}
	case map[string]any:
		if e.full(depth, len(x)) {
			return
		}
		e.B = append(e.B, 'F')
		e.table(x, depth)
	case Table:
		if e.full(depth, len(x)) {
			return
		}
		e.B = append(e.B, 'F')
		e.table(x, depth)
	default:
		e.reflected(v, depth)
	}
}

var tableType = reflect.TypeOf(map[string]any(nil))

// reflected encodes the named types a front end may use: tables (a map type
// on map[string]any), slices, decimals (struct{uint8; int32}).
func (e *Encoder) reflected(v any, depth int) {
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.Map && rv.Type().ConvertibleTo(tableType):
		if e.full(depth, rv.Len()) {
			return
		}
		e.B = append(e.B, 'F')
		e.table(rv.Convert(tableType).Interface().(map[string]any), depth)
	case rv.Kind() == reflect.Slice:
		if e.full(depth, rv.Len()) {
			return
		}
		e.B = append(e.B, 'A')
		e.Uvarint(uint64(rv.Len()))
		for i := 0; i < rv.Len(); i++ {
			e.value(rv.Index(i).Interface(), depth+1)
		}
	case rv.Kind() == reflect.Struct && rv.NumField() == 2 &&
		rv.Field(0).Kind() == reflect.Uint8 && rv.Field(1).Kind() == reflect.Int32:
		e.decimal(uint8(rv.Field(0).Uint()), int32(rv.Field(1).Int()))
	default:
		e.fail(fmt.Errorf("%w: %T", ErrUnsupported, v))
		e.B = append(e.B, 'V')
	}
}

// Decoder reads from B. The first failure sets Err and empties B, so that
// every later read fails too and the caller checks once, at the end.
type Decoder struct {
	B      []byte
	Format Format
	Err    error
}

// Fail records a failure (the first one is kept) and empties B.
func (d *Decoder) Fail(format string, args ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf(format, args...)
	}
	d.B = nil
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.B = d.B[n:]
	return v
}

// UvarintBelow reads an unsigned varint that must be below bound.
func (d *Decoder) UvarintBelow(bound uint64) uint64 {
	v := d.Uvarint()
	if v >= bound {
		d.Fail("value %d out of range", v)
		return 0
	}
	return v
}

// Varint reads a zigzag varint.
func (d *Decoder) Varint() int64 {
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if len(d.B) < 1 {
		d.Fail("short input")
		return 0
	}
	c := d.B[0]
	d.B = d.B[1:]
	return c
}

// Bool reads a byte that must be 0 or 1.
func (d *Decoder) Bool() bool {
	switch d.Byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.Fail("bad boolean")
	return false
}

// Raw takes n bytes, never more than are left; they alias B.
func (d *Decoder) Raw(n uint64) []byte {
	if n > uint64(len(d.B)) {
		d.Fail("length %d past the end", n)
		return nil
	}
	p := d.B[:n:n]
	d.B = d.B[n:]
	return p
}

// Str reads a length and that many bytes as a string.
func (d *Decoder) Str() string { return string(d.Raw(d.Uvarint())) }

// Bytes reads a length and that many bytes, aliasing B; nil if empty.
func (d *Decoder) Bytes() []byte {
	p := d.Raw(d.Uvarint())
	if len(p) == 0 {
		return nil
	}
	return p
}

// Count reads a number of items that each take at least one byte: it is
// never more than the bytes left.
func (d *Decoder) Count() int {
	n := d.Uvarint()
	if n > uint64(len(d.B)) {
		d.Fail("count %d past the end", n)
		return 0
	}
	return int(n)
}

// Time reads a time in the decoder's format, in UTC.
func (d *Decoder) Time() time.Time {
	s := d.Varint()
	var ns uint64
	if d.Format == Link {
		ns = d.UvarintBelow(1e9)
	}
	return time.Unix(s, int64(ns)).UTC()
}

// Table reads a table.
func (d *Decoder) Table() map[string]any { return d.table(0) }

// Properties reads what Encoder.Properties wrote into p.
func (d *Decoder) Properties(p *Properties) {
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
}

func (d *Decoder) table(depth int) map[string]any {
	if depth >= MaxDepth {
		d.Fail("tables nested deeper than %d", MaxDepth)
		return nil
	}
	n := d.Count()
	t := make(map[string]any, min(n, 64))
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.Str()
		t[k] = d.value(depth + 1)
	}
	return t
}

func (d *Decoder) value(depth int) any {
	if depth >= MaxDepth {
		d.Fail("values nested deeper than %d", MaxDepth)
		return nil
	}
	switch c := d.Byte(); c {
	case 'V':
		return nil
	case 't':
		return d.Bool()
	case 'b':
		return int8(d.Byte())
	case 'B':
		return d.Byte()
	case 's':
		v := d.Varint()
		if v < math.MinInt16 || v > math.MaxInt16 {
			d.Fail("int16 %d", v)
		}
		return int16(v)
	case 'u':
		return uint16(d.UvarintBelow(1 << 16))
	case 'I':
		v := d.Varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			d.Fail("int32 %d", v)
		}
		return int32(v)
	case 'i':
		return uint32(d.UvarintBelow(1 << 32))
	case 'l':
		return d.Varint()
	case 'L':
		return d.Uvarint()
	case 'f':
		p := d.Raw(4)
		if p == nil {
			return nil
		}
		return math.Float32frombits(binary.BigEndian.Uint32(p))
	case 'd':
		p := d.Raw(8)
		if p == nil {
			return nil
		}
		return math.Float64frombits(binary.BigEndian.Uint64(p))
	case 'S':
		return d.Str()
	case 'x':
		return append([]byte{}, d.Raw(d.Uvarint())...)
	case 'T':
		return d.Time()
	case 'D':
		var s uint8
		if d.Format == Link {
			s = d.Byte()
		} else {
			s = uint8(d.UvarintBelow(1 << 8))
		}
		v := d.Varint()
		if v < math.MinInt32 || v > math.MaxInt32 {
			d.Fail("decimal %d", v)
		}
		return Decimal{Scale: s, Value: int32(v)}
	case 'A':
		n := d.Count()
		a := make([]any, 0, min(n, 64))
		for i := 0; i < n && d.Err == nil; i++ {
			a = append(a, d.value(depth+1))
		}
		return a
	case 'F':
		return d.table(depth)
	default:
		d.Fail("unknown value tag %q", c)
		return nil
	}
}
