package wire

import (
	"encoding/binary"
	"time"
)

// decoder reads AMQP primitive types from a byte slice. The first failure is
// sticky: later reads return zero values and finish reports the error.
// Nothing is allocated except the strings, byte slices and tables decoded.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = syntaxError(format, args...)
	}
	d.b = nil
}

// need reports whether n more bytes are available, failing otherwise.
func (d *decoder) need(n int, what string) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.fail("truncated %s: need %d bytes, have %d", what, n, len(d.b))
		return false
	}
	return true
}

func (d *decoder) octet() uint8 {
	if !d.need(1, "octet") {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) short() uint16 {
	if !d.need(2, "short") {
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) long() uint32 {
	if !d.need(4, "long") {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) longlong() uint64 {
	if !d.need(8, "longlong") {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) timestamp() time.Time {
	if !d.need(8, "timestamp") {
		return time.Time{}
	}
	return unixTime(d.longlong())
}

// shortstrBytes returns the next short string aliasing the input.
func (d *decoder) shortstrBytes() []byte {
	if !d.need(1, "short string") {
		return nil
	}
	n := int(d.b[0])
	if len(d.b)-1 < n {
		d.fail("truncated short string: length %d, have %d bytes", n, len(d.b)-1)
		return nil
	}
	v := d.b[1 : 1+n]
	d.b = d.b[1+n:]
	return v
}

func (d *decoder) shortstr() string {
	return string(d.shortstrBytes())
}

// shortstrReuse decodes a short string, returning old itself when it has
// the same bytes (no allocation).
func (d *decoder) shortstrReuse(old string) string {
	b := d.shortstrBytes()
	if string(b) == old {
		return old
	}
	return string(b)
}

// longstrBytes returns the next long string aliasing the input. A length
// larger than the remaining input is an error, never an allocation.
func (d *decoder) longstrBytes() []byte {
	if !d.need(4, "long string") {
		return nil
	}
	n := binary.BigEndian.Uint32(d.b)
	if uint64(len(d.b)-4) < uint64(n) {
		d.fail("truncated long string: length %d, have %d bytes", n, len(d.b)-4)
		return nil
	}
	v := d.b[4 : 4+int(n)]
	d.b = d.b[4+int(n):]
	return v
}

func (d *decoder) longstr() string {
	return string(d.longstrBytes())
}

func (d *decoder) table() Table {
	return d.tableDepth(0)
}

func (d *decoder) skipShort()    { d.short() }
func (d *decoder) skipShortstr() { d.shortstrBytes() }
func (d *decoder) skipLongstr()  { d.longstrBytes() }

// finish reports the sticky error, or a syntax error if input is left over.
func (d *decoder) finish() error {
	if d.err != nil {
		return d.err
	}
	return finish(d.b)
}

func finish(rest []byte) error {
	if len(rest) != 0 {
		return syntaxError("%d unexpected trailing bytes", len(rest))
	}
	return nil
}

// encoder appends AMQP primitive types to a byte slice. The first failure
// (a string too long for its type, a table value of an unsupported type)
// is sticky.
type encoder struct {
	b   []byte
	err error
}

func (e *encoder) octet(v uint8) { e.b = append(e.b, v) }

func (e *encoder) short(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }

func (e *encoder) long(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }

func (e *encoder) longlong(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

func (e *encoder) timestamp(t time.Time) { e.longlong(uint64(t.Unix())) }

func (e *encoder) shortstr(s string) {
	if len(s) > 255 {
		if e.err == nil {
			e.err = ErrShortStringTooLong
		}
		return
	}
	e.b = append(e.b, uint8(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) longstr(s string) {
	if uint64(len(s)) > 1<<32-1 {
		if e.err == nil {
			e.err = ErrLongStringTooLong
		}
		return
	}
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) table(t Table) {
	if e.err != nil {
		return
	}
	e.b, e.err = appendTable(e.b, t, 0)
}

// unixTime converts an AMQP timestamp (seconds since the epoch) to UTC.
func unixTime(sec uint64) time.Time {
	return time.Unix(int64(sec), 0).UTC()
}
