package headers

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

// skipCases are tables good and bad in both formats: TestDecodeStrict's,
// every value out of its range, nesting too deep, every truncation.
func skipCases() [][2][]byte { // format byte, table
	var out [][2][]byte
	add := func(f Format, b []byte) { out = append(out, [2][]byte{{byte(f)}, b}) }
	for _, f := range []Format{Stored, Link} {
		b, _ := encode(f, every(f))
		for n := 0; n <= len(b); n++ {
			add(f, b[:n])
		}
	}
	for _, b := range [][]byte{
		{1, 1, 'k', 't', 2},
		{1, 1, 'k', 's', 0x80, 0x80, 0x04},
		{1, 1, 'k', 'u', 0x80, 0x80, 0x04},
		{1, 1, 'k', 'I', 0x80, 0x80, 0x80, 0x80, 0x10},
		{1, 1, 'k', 'i', 0x80, 0x80, 0x80, 0x80, 0x10},
		{1, 1, 'k', 'D', 0x80, 0x04, 0},
		{1, 1, 'k', 'D', 0, 0x80, 0x80, 0x80, 0x80, 0x10},
		{1, 1, 'k', 'Z'},
		{0xff, 0xff, 0xff, 0xff, 0x0f},
		{1, 5, 'k'},
		{2, 1, 'b', 'V', 1, 'a', 'V'}, // keys out of order: decodes
		{2, 1, 'a', 'V', 1, 'a', 'V'}, // a key twice: decodes
	} {
		add(Stored, b)
	}
	add(Link, []byte{1, 1, 'k', 'T', 0, 0x80, 0x94, 0xeb, 0xdc, 0x03})
	var deep []byte
	for range MaxDepth + 1 {
		deep = append(deep, 1, 1, 'k', 'F')
	}
	add(Stored, append(deep, 0))
	return out
}

func checkSkip(t *testing.T, f Format, b []byte) {
	t.Helper()
	d1 := Decoder{B: b, Format: f}
	tab := d1.Table()
	d2 := Decoder{B: b, Format: f}
	asc := d2.SkipTable()
	if (d1.Err == nil) != (d2.Err == nil) || len(d1.B) != len(d2.B) {
		t.Fatalf("% x: Table %v, %d left; SkipTable %v, %d left", b, d1.Err, len(d1.B), d2.Err, len(d2.B))
	}
	if d1.Err != nil {
		return
	}
	n := 0
	var prev string
	sorted := true
	for e := NewEntries(b, f); e.Next(); n++ {
		k := string(e.Key())
		if n > 0 && prev >= k {
			sorted = false
		}
		prev = k
		v := e.Value()
		got, want := v.Decode(), tab[k]
		if !reflect.DeepEqual(got, want) && fmt.Sprint(got) != fmt.Sprint(want) && !dup(b, f, k) {
			t.Fatalf("key %q: walk %#v, Table %#v", k, got, want)
		}
		checkAccessors(t, v, got)
	}
	if sorted != asc || (sorted && n != len(tab)) {
		t.Fatalf("% x: walked %d entries (ascending %v) of %d, SkipTable ascending %v", b, n, sorted, len(tab), asc)
	}
}

// checkAccessors: Raw's Int, Uint and Str give the decoded value.
func checkAccessors(t *testing.T, v Raw, got any) {
	t.Helper()
	var ok bool
	switch x := got.(type) {
	case bool:
		ok = v.Uint() == map[bool]uint64{false: 0, true: 1}[x]
	case int8:
		ok = v.Int() == int64(x)
	case int16:
		ok = v.Int() == int64(x)
	case int32:
		ok = v.Int() == int64(x)
	case int64:
		ok = v.Int() == x
	case uint8:
		ok = v.Uint() == uint64(x)
	case uint16:
		ok = v.Uint() == uint64(x)
	case uint32:
		ok = v.Uint() == uint64(x)
	case uint64:
		ok = v.Uint() == x
	case string:
		ok = string(v.Str()) == x
	case []byte:
		ok = string(v.Str()) == string(x)
	case float32:
		ok = math.Float32bits(x) == uint32(v.B[0])<<24|uint32(v.B[1])<<16|uint32(v.B[2])<<8|uint32(v.B[3])
	default:
		ok = true
	}
	if !ok {
		t.Fatalf("accessors of %c % x disagree with %#v", v.Tag, v.B, got)
	}
}

// TestSkipTableAsTable: SkipTable fails where Table fails and reads the
// same bytes; an entry walk sees the keys and values Table decodes, and
// SkipTable says whether they ascend.
func TestSkipTableAsTable(t *testing.T) {
	for _, c := range skipCases() {
		checkSkip(t, Format(c[0][0]), c[1])
	}
}

// FuzzSkipTable: the same for any bytes; the first byte picks the format.
func FuzzSkipTable(f *testing.F) {
	for _, c := range skipCases() {
		f.Add(append(c[0], c[1]...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		checkSkip(t, Format(in[0]&1), in[1:])
	})
}

// dup reports whether table b holds key k more than once (Table keeps
// the last).
func dup(b []byte, f Format, k string) bool {
	n := 0
	for e := NewEntries(b, f); e.Next(); {
		if string(e.Key()) == k {
			n++
		}
	}
	return n > 1
}
