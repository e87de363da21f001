package headers

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

type named map[string]any

type frontDecimal struct {
	Scale uint8
	Value int32
}

// every has one value of every type a table holds, as it decodes.
func every(f Format) map[string]any {
	ns := 0
	if f == Link {
		ns = 123456789
	}
	return map[string]any{
		"void": nil, "true": true, "false": false,
		"int8": int8(-8), "uint8": uint8(200), "int16": int16(math.MinInt16), "uint16": uint16(math.MaxUint16),
		"int32": int32(math.MinInt32), "uint32": uint32(math.MaxUint32),
		"int64": int64(math.MinInt64), "uint64": uint64(math.MaxUint64),
		"float32": float32(1.5), "float64": math.Inf(-1), "string": "héllo\x00", "empty": "",
		"bytes": []byte{0, 1, 255}, "empty-bytes": []byte{},
		"time":    time.Unix(1700000000, int64(ns)).UTC(),
		"decimal": Decimal{Scale: 255, Value: math.MinInt32},
		"array":   []any{int32(1), "two", []any{nil, true}, map[string]any{"in": "array"}},
		"table":   map[string]any{"nested": map[string]any{"deep": int64(1)}, "list": []any{}},
	}
}

func encode(f Format, t map[string]any) ([]byte, error) {
	e := Encoder{Format: f}
	e.Table(t)
	return e.B, e.Err
}

func decode(f Format, b []byte) (map[string]any, error) {
	d := Decoder{B: b, Format: f}
	t := d.Table()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("%d trailing bytes", len(d.B))
	}
	return t, d.Err
}

func TestRoundTrip(t *testing.T) {
	for _, f := range []Format{Stored, Link} {
		in := every(f)
		b, err := encode(f, in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := decode(f, b)
		if err != nil {
			t.Fatalf("format %d: %v", f, err)
		}
		if !reflect.DeepEqual(in, out) {
			for k := range in {
				if !reflect.DeepEqual(in[k], out[k]) {
					t.Errorf("format %d: %s: %#v -> %#v", f, k, in[k], out[k])
				}
			}
		}
		if b2, _ := encode(f, out); !bytes.Equal(b, b2) {
			t.Fatalf("format %d: re-encoding differs", f)
		}
	}
}

// The front ends' types encode as the core's: named tables and slices,
// struct decimals, Table, int and uint.
func TestWidening(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 999, time.FixedZone("x", 3600))
	in := map[string]any{"named": named{"a": "b"}, "table": Table{"c": "d"}, "slice": []named{{"k": "v"}},
		"strings": []string{"x"}, "dec": frontDecimal{Scale: 1, Value: -5}, "int": -5, "uint": uint(5), "time": at}
	for _, f := range []Format{Stored, Link} {
		b, err := encode(f, in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := decode(f, b)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"named": map[string]any{"a": "b"}, "table": map[string]any{"c": "d"},
			"slice": []any{map[string]any{"k": "v"}}, "strings": []any{"x"}, "dec": Decimal{Scale: 1, Value: -5},
			"int": int64(-5), "uint": uint64(5), "time": at.Truncate(time.Second).UTC()}
		if f == Link {
			want["time"] = at.UTC()
		}
		if !reflect.DeepEqual(out, want) {
			t.Fatalf("format %d:\n got %#v\nwant %#v", f, out, want)
		}
	}
}

// The two formats differ exactly where v0.1.0's two codecs did.
func TestFormats(t *testing.T) {
	cases := []struct {
		v            any
		stored, link []byte
	}{
		{Decimal{Scale: 200, Value: 1}, []byte{'D', 0xc8, 0x01, 2}, []byte{'D', 0xc8, 2}},
		{Decimal{Scale: 2, Value: -1}, []byte{'D', 2, 1}, []byte{'D', 2, 1}},
		{time.Unix(2, 5), []byte{'T', 4}, []byte{'T', 4, 5}},
		{"s", []byte{'S', 1, 's'}, []byte{'S', 1, 's'}},
	}
	for _, c := range cases {
		for _, f := range []Format{Stored, Link} {
			want := c.stored
			if f == Link {
				want = c.link
			}
			e := Encoder{Format: f}
			e.Value(c.v)
			if !bytes.Equal(e.B, want) {
				t.Errorf("format %d: %#v encodes to % x, want % x", f, c.v, e.B, want)
			}
		}
	}
}

func TestUnsupported(t *testing.T) {
	e := Encoder{}
	e.Table(map[string]any{"a": struct{}{}, "b": "kept"})
	if !errors.Is(e.Err, ErrUnsupported) {
		t.Fatalf("err %v", e.Err)
	}
	out, err := decode(Stored, e.B)
	if err != nil || !reflect.DeepEqual(out, map[string]any{"a": nil, "b": "kept"}) {
		t.Fatalf("unsupported value not written as nil: %#v %v", out, err)
	}
	// Nesting at MaxDepth is refused when encoding, and what is written
	// still decodes; nesting beyond what the encoder writes does not decode.
	deep := map[string]any{}
	cur := deep
	for i := 0; i < MaxDepth+2; i++ {
		next := map[string]any{}
		cur["k"] = next
		cur = next
	}
	e = Encoder{}
	e.Table(deep)
	if !errors.Is(e.Err, ErrUnsupported) {
		t.Fatalf("too deep: err %v", e.Err)
	}
	if _, err := decode(Stored, e.B); err != nil {
		t.Fatalf("too deep: what was written does not decode: %v", err)
	}
	raw := []byte{1}
	for i := 0; i < 1000; i++ {
		raw = append(raw, 1, 'k', 'F', 1)
	}
	if _, err := decode(Stored, raw); err == nil {
		t.Fatal("over-deep table decoded")
	}
}

func TestDecodeStrict(t *testing.T) {
	bad := [][]byte{
		{1, 1, 'k', 't', 2},                // boolean neither 0 nor 1
		{1, 1, 'k', 's', 0x80, 0x80, 0x04}, // int16 out of range
		{1, 1, 'k', 'u', 0x80, 0x80, 0x04}, // uint16 out of range
		{1, 1, 'k', 'D', 0x80, 0x04, 0},    // stored decimal scale above 255
		{1, 1, 'k', 'Z'},                   // unknown tag
		{0xff, 0xff, 0xff, 0xff, 0x0f},     // count past the end: not allocated
		{1, 5, 'k'},                        // key past the end
	}
	for _, b := range bad {
		if _, err := decode(Stored, b); err == nil {
			t.Errorf("% x decoded", b)
		}
	}
	if _, err := decode(Link, []byte{1, 1, 'k', 'T', 0, 0x80, 0x94, 0xeb, 0xdc, 0x03}); err == nil {
		t.Error("nanoseconds of 1e9 decoded")
	}
	b, _ := encode(Stored, every(Stored))
	for n := 0; n < len(b); n++ {
		if _, err := decode(Stored, b[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
}

// FuzzDecode: any bytes decode to a table or an error, never a panic nor
// more allocation than they justify; a table that decodes encodes again to
// a fixed point. The first byte picks the format.
func FuzzDecode(f *testing.F) {
	for _, fm := range []Format{Stored, Link} {
		b, _ := encode(fm, every(fm))
		f.Add(append([]byte{byte(fm)}, b...))
	}
	f.Add([]byte{0})
	f.Add([]byte{1, 1, 1, 'k', 'D', 200, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		fm := Format(in[0] & 1)
		tb, err := decode(fm, in[1:])
		if err != nil {
			return
		}
		b1, err := encode(fm, tb)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := decode(fm, b1)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if b2, _ := encode(fm, again); !bytes.Equal(b1, b2) {
			t.Fatal("re-encoding differs")
		}
	})
}
