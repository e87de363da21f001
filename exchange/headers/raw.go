package headers

import "encoding/binary"

// Reading a table in place: a reader that only passes a table's values on
// (a stream's record transcoded into another protocol's message) walks its
// entries without building a map or copying a string. What it walks is
// checked exactly as Table checks it: SkipTable fails where Table fails
// and consumes the same bytes.

// The value tags (see the package comment).
const (
	TagNil     = 'V'
	TagBool    = 't'
	TagInt8    = 'b'
	TagUint8   = 'B'
	TagInt16   = 's'
	TagUint16  = 'u'
	TagInt32   = 'I'
	TagUint32  = 'i'
	TagInt64   = 'l'
	TagUint64  = 'L'
	TagFloat32 = 'f'
	TagFloat64 = 'd'
	TagString  = 'S'
	TagBytes   = 'x'
	TagTime    = 'T'
	TagDecimal = 'D'
	TagArray   = 'A'
	TagTable   = 'F'
)

// SkipTable reads past a table as Table would read it, checking it the
// same way, without decoding it; ascending reports whether its keys
// ascend strictly (as Encoder.Table writes them, each once).
func (d *Decoder) SkipTable() (ascending bool) {
	n := d.Count()
	ascending = true
	var prev []byte
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.Raw(d.Uvarint())
		if i > 0 && string(prev) >= string(k) {
			ascending = false
		}
		prev = k
		d.skipValue(1)
	}
	return ascending && d.Err == nil
}

func (d *Decoder) skipTable(depth int) {
	if depth >= MaxDepth {
		d.Fail("tables nested deeper than %d", MaxDepth)
		return
	}
	n := d.Count()
	for i := 0; i < n && d.Err == nil; i++ {
		d.Raw(d.Uvarint())
		d.skipValue(depth + 1)
	}
}

// skipValue is value without the value.
func (d *Decoder) skipValue(depth int) {
	if depth >= MaxDepth {
		d.Fail("values nested deeper than %d", MaxDepth)
		return
	}
	switch c := d.Byte(); c {
	case TagNil:
	case TagBool:
		d.Bool()
	case TagInt8, TagUint8:
		d.Byte()
	case TagInt16:
		if v := d.Varint(); v < -1<<15 || v > 1<<15-1 {
			d.Fail("int16 %d", v)
		}
	case TagUint16:
		d.UvarintBelow(1 << 16)
	case TagInt32:
		if v := d.Varint(); v < -1<<31 || v > 1<<31-1 {
			d.Fail("int32 %d", v)
		}
	case TagUint32:
		d.UvarintBelow(1 << 32)
	case TagInt64:
		d.Varint()
	case TagUint64:
		d.Uvarint()
	case TagFloat32:
		d.Raw(4)
	case TagFloat64:
		d.Raw(8)
	case TagString, TagBytes:
		d.Raw(d.Uvarint())
	case TagTime:
		d.Varint()
		if d.Format == Link {
			d.UvarintBelow(1e9)
		}
	case TagDecimal:
		if d.Format == Link {
			d.Byte()
		} else {
			d.UvarintBelow(1 << 8)
		}
		if v := d.Varint(); v < -1<<31 || v > 1<<31-1 {
			d.Fail("decimal %d", v)
		}
	case TagArray:
		n := d.Count()
		for i := 0; i < n && d.Err == nil; i++ {
			d.skipValue(depth + 1)
		}
	case TagTable:
		d.skipTable(depth)
	default:
		d.Fail("unknown value tag %q", c)
	}
}

// Entries walks the entries of an encoded table in their order: Key and
// Value alias the table's bytes. The table must have been checked
// (SkipTable) for the walk to see all of it; a walk of bad bytes stops.
type Entries struct {
	d   Decoder
	n   int
	key []byte
	val Raw
}

// NewEntries starts a walk of the table t (as Encoder.Table wrote it).
func NewEntries(t []byte, f Format) Entries {
	e := Entries{d: Decoder{B: t, Format: f}}
	e.n = e.d.Count()
	return e
}

// Next moves to the next entry, false after the last one (or bad bytes).
func (e *Entries) Next() bool {
	if e.n == 0 || e.d.Err != nil {
		return false
	}
	e.n--
	e.key = e.d.Raw(e.d.Uvarint())
	start := e.d.B
	e.d.skipValue(1)
	if e.d.Err != nil || len(start) == 0 {
		return false
	}
	v := start[:len(start)-len(e.d.B)]
	e.val = Raw{Tag: v[0], B: v[1:], format: e.d.Format}
	return true
}

// Key is the entry's key.
func (e *Entries) Key() []byte { return e.key }

// Value is the entry's value, undecoded.
func (e *Entries) Value() Raw { return e.val }

// Raw is one encoded value: its tag and the bytes after it.
type Raw struct {
	Tag    byte
	B      []byte
	format Format
}

// Decode decodes the value as a table's entry's value decodes.
func (r Raw) Decode() any {
	d := Decoder{B: append([]byte{r.Tag}, r.B...), Format: r.format}
	return d.value(1)
}

// Int is a signed integer's value (TagInt8, TagInt16, TagInt32,
// TagInt64) or a time's seconds (TagTime).
func (r Raw) Int() int64 {
	if r.Tag == TagInt8 {
		return int64(int8(r.B[0]))
	}
	v, _ := binary.Varint(r.B)
	return v
}

// Uint is an unsigned integer's value (TagUint8, TagUint16, TagUint32,
// TagUint64) or a boolean's (TagBool: 0 or 1).
func (r Raw) Uint() uint64 {
	if r.Tag == TagUint8 || r.Tag == TagBool {
		return uint64(r.B[0])
	}
	v, _ := binary.Uvarint(r.B)
	return v
}

// Str is a string's or a byte string's bytes (TagString, TagBytes).
func (r Raw) Str() []byte {
	n, k := binary.Uvarint(r.B)
	return r.B[k : k+int(n)]
}
