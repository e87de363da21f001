package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func wantCode(t *testing.T, err error, code uint16) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *wire.Error", err, err)
	}
	if e.Code != code || !e.ConnectionScope {
		t.Fatalf("error %v: code %d connection=%v, want %d at connection scope", e, e.Code, e.ConnectionScope, code)
	}
}

func TestGoldenMethods(t *testing.T) {
	for _, tc := range goldenMethods {
		t.Run(tc.name, func(t *testing.T) {
			m, err := DecodeMethod(tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			if !same(m, tc.method) {
				t.Fatalf("decoded %#v, want %#v", m, tc.method)
			}
			if m.Name() != tc.name {
				t.Errorf("Name() = %q", m.Name())
			}
			b, err := AppendMethod(nil, tc.method)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, tc.payload) {
				t.Fatalf("encoded\n%s\nwant\n%s", mustHex(t, b), mustHex(t, tc.payload))
			}
			// Every truncation is a syntax error, and so is a trailing byte.
			for i := 4; i < len(tc.payload); i++ {
				if _, err := DecodeMethod(tc.payload[:i]); err == nil {
					t.Fatalf("prefix of %d bytes decoded", i)
				} else {
					wantCode(t, err, SyntaxError)
				}
			}
			_, err = DecodeMethod(append(bytes.Clone(tc.payload), 0))
			wantCode(t, err, SyntaxError)
			var e *Error
			errors.As(err, &e)
			if e.ClassID != m.ClassID() || e.MethodID != m.MethodID() {
				t.Errorf("error names method %d.%d", e.ClassID, e.MethodID)
			}
		})
	}
}

func TestGoldenHeaders(t *testing.T) {
	for _, tc := range goldenHeaders {
		t.Run(tc.name, func(t *testing.T) {
			class, size, p, err := DecodeContentHeader(tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			if class != tc.classID || size != tc.bodySize || !same(p, tc.props) {
				t.Fatalf("decoded %d %d %#v, want %d %d %#v", class, size, p, tc.classID, tc.bodySize, tc.props)
			}
			b, err := AppendContentHeader(nil, class, size, &p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, tc.payload) {
				t.Fatalf("encoded\n%s\nwant\n%s", mustHex(t, b), mustHex(t, tc.payload))
			}
			for i := range len(tc.payload) {
				_, _, _, err := DecodeContentHeader(tc.payload[:i])
				wantCode(t, err, SyntaxError)
			}
		})
	}
}

func TestPropertiesDerivedFlags(t *testing.T) {
	p := goldenHeaders[0].props
	p.Flags = 0
	b, err := AppendContentHeader(nil, ClassBasic, 5, &p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, goldenHeaders[0].payload) {
		t.Fatalf("encoded\n%s\nwant\n%s", mustHex(t, b), mustHex(t, goldenHeaders[0].payload))
	}
	var all Properties
	fill(&all, true)
	all.Flags = 0
	b, err = AppendContentHeader(nil, ClassBasic, 1, &all)
	if err != nil {
		t.Fatal(err)
	}
	_, _, got, err := DecodeContentHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	all.Flags = flagsKnown
	if !same(got, all) {
		t.Fatalf("got %#v\nwant %#v", got, all)
	}
	// A continuation flag is refused.
	bad := bytes.Clone(goldenHeaders[1].payload)
	bad[13] |= 1
	_, _, _, err = DecodeContentHeader(bad)
	wantCode(t, err, SyntaxError)
	// Nil properties.
	b, _ = AppendContentHeader(nil, ClassBasic, 256, nil)
	if !bytes.Equal(b, goldenHeaders[1].payload) {
		t.Fatalf("nil properties encoded %x", b)
	}
}

func TestGoldenFrames(t *testing.T) {
	all := bytes.Join(goldenFrames, nil)
	readers := map[string]io.Reader{
		"whole":   bytes.NewReader(all),
		"onebyte": iotest.OneByteReader(bytes.NewReader(all)),
		"half":    iotest.HalfReader(bytes.NewReader(all)),
	}
	for name, r := range readers {
		t.Run(name, func(t *testing.T) {
			br := bufio.NewReaderSize(r, 16)
			var buf []byte
			for i, want := range goldenFrames {
				f, err := ReadFrame(br, 4096, buf)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if got := AppendFrame(nil, f.Type, f.Channel, f.Payload); !bytes.Equal(got, want) {
					t.Fatalf("frame %d re-encoded %x, want %x", i, got, want)
				}
				buf = f.Payload[:0]
			}
			if _, err := ReadFrame(br, 4096, buf); err != io.EOF {
				t.Fatalf("at end: %v, want io.EOF", err)
			}
		})
	}
	// ParseFrame agrees.
	rest := all
	for i, want := range goldenFrames {
		f, n, err := ParseFrame(rest, 4096)
		if err != nil || n != len(want) || !bytes.Equal(AppendFrame(nil, f.Type, f.Channel, f.Payload), want) {
			t.Fatalf("ParseFrame %d: %v %d", i, err, n)
		}
		rest = rest[n:]
	}
}

func TestReadFrameErrors(t *testing.T) {
	frame := goldenFrames[0]
	read := func(b []byte, max uint32) error {
		_, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)), max, nil)
		return err
	}
	// Oversize: refused from the header alone.
	wantCode(t, read(frame[:7], uint32(len(frame)-1)), FrameError)
	if err := read(frame, uint32(len(frame))); err != nil {
		t.Fatalf("frame of exactly frame-max: %v", err)
	}
	huge := cat(FrameBody, 0, 1, 0xff, 0xff, 0xff, 0xff)
	wantCode(t, read(huge, 1<<20), FrameError)
	// Bad frame end.
	bad := bytes.Clone(frame)
	bad[len(bad)-1] = 0
	wantCode(t, read(bad, 0), FrameError)
	_, _, err := ParseFrame(bad, 0)
	wantCode(t, err, FrameError)
	// Truncation.
	for i := 1; i < len(frame); i++ {
		if err := read(frame[:i], 0); err != io.ErrUnexpectedEOF {
			t.Fatalf("prefix %d: %v", i, err)
		}
		if _, _, err := ParseFrame(frame[:i], 0); err != io.ErrUnexpectedEOF {
			t.Fatalf("ParseFrame prefix %d: %v", i, err)
		}
	}
	if err := read(nil, 0); err != io.EOF {
		t.Fatalf("empty: %v", err)
	}
	// Buffer reuse.
	buf := make([]byte, 0, 64)
	f, err := ReadFrame(bufio.NewReader(bytes.NewReader(frame)), 0, buf)
	if err != nil || &f.Payload[0] != &buf[:1][0] {
		t.Fatalf("buffer not reused: %v", err)
	}
}

func TestCheckProtocolHeader(t *testing.T) {
	if err := CheckProtocolHeader([]byte(ProtocolHeader)); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"AMQP\x00\x00\x09\x00", "AMQP\x01\x01\x00\x09", "GET / HTTP/1.1", "AMQP\x03\x01\x00\x00"} {
		if err := CheckProtocolHeader([]byte(h)); err != ErrBadProtocolHeader {
			t.Errorf("%q: %v", h, err)
		}
	}
	if err := CheckProtocolHeader([]byte("AMQP")); err != io.ErrUnexpectedEOF {
		t.Errorf("short: %v", err)
	}
}

// TestMethodRoundTrip encodes every generated method with all fields set,
// and with each bool set alone (to check bit packing), and decodes it back.
func TestMethodRoundTrip(t *testing.T) {
	names := map[string]bool{}
	ids := map[[2]uint16]bool{}
	for _, zero := range allMethods() {
		typ := reflect.TypeOf(zero).Elem()
		t.Run(zero.Name(), func(t *testing.T) {
			if names[zero.Name()] || ids[[2]uint16{zero.ClassID(), zero.MethodID()}] {
				t.Fatal("duplicate method name or id")
			}
			names[zero.Name()] = true
			ids[[2]uint16{zero.ClassID(), zero.MethodID()}] = true
			if newMethod(zero.ClassID(), zero.MethodID()) == nil {
				t.Fatal("not dispatched")
			}
			variants := []Method{zero}
			full := reflect.New(typ).Interface().(Method)
			fill(full, true)
			variants = append(variants, full)
			for i := range typ.NumField() {
				if typ.Field(i).Type.Kind() == reflect.Bool {
					v := reflect.New(typ)
					fill(v.Interface(), false)
					v.Elem().Field(i).SetBool(true)
					variants = append(variants, v.Interface().(Method))
				}
			}
			for _, m := range variants {
				b, err := AppendMethod(nil, m)
				if err != nil {
					t.Fatal(err)
				}
				got, err := DecodeMethod(b)
				if err != nil {
					t.Fatalf("decoding %x: %v", b, err)
				}
				if reflect.TypeOf(got) != reflect.TypeOf(m) || !same(got, m) {
					t.Fatalf("round trip of %#v gave %#v", m, got)
				}
			}
		})
	}
	for _, name := range []string{
		"confirm.select", "confirm.select-ok", "basic.nack", "connection.blocked",
		"connection.unblocked", "exchange.bind", "exchange.unbind-ok", "connection.update-secret",
	} {
		if !names[name] {
			t.Errorf("RabbitMQ extension %s missing", name)
		}
	}
}

func TestMethodProperties(t *testing.T) {
	if !(&BasicPublish{}).HasContent() || !(&BasicDeliver{}).HasContent() || (&BasicAck{}).HasContent() {
		t.Error("HasContent")
	}
	if !(&QueueDeclare{}).Sync() || (&BasicPublish{}).Sync() {
		t.Error("Sync")
	}
	if id := (&ExchangeUnbindOK{}).MethodID(); id != 51 {
		t.Errorf("exchange.unbind-ok is %d, RabbitMQ uses 51", id)
	}
	_, err := DecodeMethod(cat(0, 60, 0, 99))
	wantCode(t, err, CommandInvalid)
	_, err = DecodeMethod(cat(0, 60, 0))
	wantCode(t, err, SyntaxError)
	if _, err := AppendMethod(nil, &BasicPublish{RoutingKey: strings.Repeat("k", 256)}); !errors.Is(err, ErrShortStringTooLong) {
		t.Errorf("long routing key: %v", err)
	}
	if !IsHardError(FrameError) || IsHardError(NotFound) || ReplyName(NotFound) != "NOT_FOUND" {
		t.Error("reply code tables")
	}
	e := NewChannelError(NotFound, "no queue '%s' in vhost '%s'", "q", "/")
	if e.Text != "NOT_FOUND - no queue 'q' in vhost '/'" || e.ConnectionScope {
		t.Errorf("NewChannelError: %+v", e)
	}
}

func TestGoldenTables(t *testing.T) {
	for i, enc := range goldenTables {
		tab, err := DecodeTable(enc)
		if err != nil {
			t.Fatalf("table %d: %v", i, err)
		}
		b, err := AppendTable(nil, tab)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, enc) {
			t.Fatalf("table %d re-encoded\n%s\nwant\n%s", i, mustHex(t, b), mustHex(t, enc))
		}
	}
}

func TestTableRoundTrip(t *testing.T) {
	ts := time.Unix(1700000000, 0).UTC()
	decoded := Table{
		"bool": true, "false": false, "int8": int8(-8), "uint8": uint8(200),
		"int16": int16(-1600), "uint16": uint16(60000), "int32": int32(-320000),
		"uint32": uint32(4000000000), "int64": int64(-1 << 60),
		"float32": float32(1.5), "float64": math.Pi, "nan": math.NaN(),
		"decimal": Decimal{Scale: 2, Value: -12345}, "string": "héllo",
		"empty": "", "bytes": []byte{0, 1, 0xff}, "array": []any{int32(1), "two", nil, []any(nil)},
		"time": ts, "table": Table{"inner": Table{"deep": true}}, "void": nil,
		"emptytable": Table(nil), "emptyarray": []any(nil),
	}
	b, err := AppendTable(nil, decoded)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTable(b)
	if err != nil {
		t.Fatal(err)
	}
	if !same(got, decoded) {
		t.Fatalf("got %#v\nwant %#v", got, decoded)
	}
	// Types accepted only by the encoder.
	for _, tc := range []struct {
		in, out any
	}{
		{int(-5), int64(-5)},
		{uint(5), int64(5)},
		{uint64(math.MaxInt64), int64(math.MaxInt64)},
		{map[string]any{"a": 1}, Table{"a": int64(1)}},
		{[]Table{{"a": "b"}, nil}, []any{Table{"a": "b"}, Table(nil)}},
		{time.Date(2024, 1, 2, 3, 4, 5, 999, time.FixedZone("x", 3600)), time.Date(2024, 1, 2, 2, 4, 5, 0, time.UTC)},
	} {
		b, err := AppendTable(nil, Table{"v": tc.in})
		if err != nil {
			t.Fatalf("%T: %v", tc.in, err)
		}
		got, err := DecodeTable(b)
		if err != nil || !same(got["v"], tc.out) {
			t.Fatalf("%#v decoded as %#v (%v), want %#v", tc.in, got["v"], err, tc.out)
		}
	}
	for _, bad := range []any{uint64(math.MaxUint64), struct{}{}, []string{"a"}, &Decimal{}} {
		if _, err := AppendTable(nil, Table{"v": bad}); !errors.Is(err, ErrUnsupportedType) {
			t.Errorf("%T: %v", bad, err)
		}
	}
	if _, err := AppendTable(nil, Table{strings.Repeat("k", 256): 1}); !errors.Is(err, ErrShortStringTooLong) {
		t.Errorf("long key: %v", err)
	}
}

func TestTableBounds(t *testing.T) {
	// Nesting: MaxTableDepth-1 levels below the top table decode, one more fails.
	nest := func(levels int) Table {
		tab := Table{"leaf": true}
		for range levels {
			tab = Table{"t": tab}
		}
		return tab
	}
	b, err := AppendTable(nil, nest(MaxTableDepth-1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeTable(b); err != nil {
		t.Fatal(err)
	}
	if _, err := AppendTable(nil, nest(MaxTableDepth)); !errors.Is(err, ErrTableTooDeep) {
		t.Fatalf("encoding too deep: %v", err)
	}
	// Hand-built too-deep input: each level is {"": F ...}.
	var deep []byte
	deep = cat(0, 0, 0, 0)
	for range MaxTableDepth {
		deep = append(cat(0, 0, 0, len(deep)+2, 0, 'F'), deep...)
	}
	_, err = DecodeTable(deep)
	wantCode(t, err, SyntaxError)
	// Self-referencing table: refused, not a stack overflow.
	loop := Table{}
	loop["self"] = loop
	if _, err := AppendTable(nil, loop); !errors.Is(err, ErrTableTooDeep) {
		t.Fatalf("cyclic table: %v", err)
	}
	// Length prefixes larger than the input.
	for _, in := range [][]byte{
		cat(0xff, 0xff, 0xff, 0xff),
		cat(0, 0, 0, 9, 1, "k", 'S', 0xff, 0xff, 0xff, 0xf0, 0, 0),
		cat(0, 0, 0, 7, 1, "k", 'A', 0x7f, 0, 0, 0),
		cat(0, 0, 0, 3, 9, "k", 'V'),
		cat(0, 0, 0, 3, 1, "k", 'Q'),
	} {
		_, err := DecodeTable(in)
		wantCode(t, err, SyntaxError)
	}
}

func TestWriteContent(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 1000) // 10000 bytes
	props := &Properties{ContentType: "text/plain", DeliveryMode: 2}
	deliver := &BasicDeliver{ConsumerTag: "c", DeliveryTag: 7, Exchange: "x", RoutingKey: "k"}
	for _, tc := range []struct {
		name     string
		bufSize  int
		frameMax uint32
		body     []byte
		frames   int // body frames
	}{
		{"small", 4096, 4096, body[:16], 1},
		{"empty", 4096, 4096, nil, 0},
		{"split in buffer", 65536, 4096, body, 3},
		{"split through", 64, 4096, body, 3},
		{"exact", 4096, 4096, body[:4088], 1},
		{"exact+1", 4096, 4096, body[:4089], 2},
		{"no limit", 4096, 0, body, 1},
		{"below minimum", 4096, 100, body[:5000], 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := bufio.NewWriterSize(&out, tc.bufSize)
			if err := WriteMethod(w, 0, &ConnectionTuneOK{ChannelMax: 1, FrameMax: 4096}); err != nil {
				t.Fatal(err)
			}
			if err := WriteContent(w, 3, deliver, props, tc.body, tc.frameMax); err != nil {
				t.Fatal(err)
			}
			if err := WriteHeartbeat(w); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(&out)
			max := max(tc.frameMax, FrameMinSize)
			if tc.frameMax == 0 {
				max = 0
			}
			next := func(typ uint8, channel uint16) Frame {
				t.Helper()
				f, err := ReadFrame(r, max, nil)
				if err != nil {
					t.Fatal(err)
				}
				if f.Type != typ || f.Channel != channel {
					t.Fatalf("frame type %d channel %d, want %d %d", f.Type, f.Channel, typ, channel)
				}
				return f
			}
			m, err := DecodeMethod(next(FrameMethod, 0).Payload)
			if err != nil || !same(m, &ConnectionTuneOK{ChannelMax: 1, FrameMax: 4096}) {
				t.Fatalf("tune-ok: %#v %v", m, err)
			}
			if m, err = DecodeMethod(next(FrameMethod, 3).Payload); err != nil || !same(m, deliver) {
				t.Fatalf("deliver: %#v %v", m, err)
			}
			class, size, p, err := DecodeContentHeader(next(FrameHeader, 3).Payload)
			if err != nil || class != ClassBasic || size != uint64(len(tc.body)) || p.ContentType != "text/plain" || p.DeliveryMode != 2 {
				t.Fatalf("header: %d %d %+v %v", class, size, p, err)
			}
			var got []byte
			for range tc.frames {
				got = append(got, next(FrameBody, 3).Payload...)
			}
			if !bytes.Equal(got, tc.body) {
				t.Fatalf("body of %d bytes, want %d", len(got), len(tc.body))
			}
			next(FrameHeartbeat, 0)
			if _, err := ReadFrame(r, 0, nil); err != io.EOF {
				t.Fatalf("trailing data: %v", err)
			}
		})
	}
}

func TestWriteFrame(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	for _, f := range goldenFrames {
		fr, _, err := ParseFrame(f, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteFrame(w, fr); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	if !bytes.Equal(out.Bytes(), bytes.Join(goldenFrames, nil)) {
		t.Fatal("WriteFrame output differs")
	}
}

func TestWriteErrors(t *testing.T) {
	boom := errors.New("boom")
	w := bufio.NewWriterSize(errWriter{boom}, 64)
	body := make([]byte, 10000)
	if err := WriteContent(w, 1, &BasicDeliver{}, nil, body, 4096); !errors.Is(err, boom) {
		t.Fatalf("WriteContent: %v", err)
	}
	w = bufio.NewWriter(io.Discard)
	if err := WriteMethod(w, 1, &BasicPublish{Exchange: strings.Repeat("x", 300)}); !errors.Is(err, ErrShortStringTooLong) {
		t.Fatalf("WriteMethod: %v", err)
	}
	if got := AppendHeartbeat(nil); !bytes.Equal(got, goldenFrames[3]) {
		t.Fatalf("heartbeat %x", got)
	}
	e := NewConnectionError(FrameError, "bad")
	if e.Error() != "wire: connection error 501: FRAME_ERROR - bad" {
		t.Fatalf("Error() = %q", e.Error())
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

// TestFrameBuffered: a frame counts as buffered only once every byte of
// it, frame-end included, is in the reader.
func TestFrameBuffered(t *testing.T) {
	f := AppendFrame(nil, FrameBody, 1, []byte("hello"))
	for i := 0; i <= len(f); i++ {
		r := bufio.NewReader(bytes.NewReader(f[:i]))
		_, _ = r.Peek(i) // fill
		if got, want := FrameBuffered(r), i == len(f); got != want {
			t.Fatalf("%d of %d bytes: FrameBuffered %v", i, len(f), got)
		}
	}
}
