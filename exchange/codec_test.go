package exchange

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"time"
)

type namedTable map[string]any

// allValues has one value of every type a Table may hold, as the decoder
// returns it.
func allValues() Table {
	return Table{
		"void":    nil,
		"true":    true,
		"false":   false,
		"int8":    int8(-8),
		"uint8":   uint8(200),
		"int16":   int16(-30000),
		"uint16":  uint16(60000),
		"int32":   int32(math.MinInt32),
		"uint32":  uint32(math.MaxUint32),
		"int64":   int64(math.MinInt64),
		"uint64":  uint64(math.MaxUint64),
		"float32": float32(1.5),
		"float64": math.Inf(-1),
		"nan-ish": float64(-0.25),
		"string":  "héllo\x00world",
		"empty":   "",
		"bytes":   []byte{0, 1, 2, 255},
		"time":    time.Unix(1700000000, 0).UTC(),
		"decimal": Decimal{Scale: 2, Value: -12345},
		"array":   []any{int32(1), "two", []any{nil, true}, Table{"in": "array"}},
		"table":   Table{"nested": Table{"deep": int64(1)}, "list": []any{}},
	}
}

func TestTableRoundTrip(t *testing.T) {
	in := allValues()
	b := encodeRecord(in)
	out, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		for k := range in {
			if !reflect.DeepEqual(in[k], out[k]) {
				t.Errorf("%s: %#v -> %#v", k, in[k], out[k])
			}
		}
	}
	// Encoding is deterministic (sorted keys): the same bytes again.
	if b2 := encodeRecord(out); !bytes.Equal(b, b2) {
		t.Fatal("re-encoding differs")
	}
}

func TestTableRoundTripWidening(t *testing.T) {
	// int and uint become int64 and uint64; named maps become tables;
	// times lose sub-second precision and become UTC.
	in := Table{"int": int(-5), "uint": uint(5), "named": namedTable{"a": "b"},
		"time": time.Date(2024, 1, 2, 3, 4, 5, 999, time.FixedZone("x", 3600))}
	out, err := decodeRecord(encodeRecord(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Table{"int": int64(-5), "uint": uint64(5), "named": Table{"a": "b"},
		"time": time.Date(2024, 1, 2, 2, 4, 5, 0, time.UTC)}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("got %#v\nwant %#v", out, want)
	}
	delete(in, "time")
	delete(out, "time")
	if !tablesEqual(in, out) {
		t.Fatal("tablesEqual should treat widened numbers and named maps as equal")
	}
}

func sampleMessages() []*Message {
	full := &Message{Exchange: "amq.topic", RoutingKey: "a.b.c", Body: []byte("hello"), expiresAt: 1234567890123}
	full.Props = Properties{
		ContentType: "application/json", ContentEncoding: "gzip", Headers: allValues(),
		DeliveryMode: 2, Priority: 7, CorrelationID: "corr", ReplyTo: "amq.rabbitmq.reply-to.x",
		Expiration: "60000", MessageID: "mid", Timestamp: time.Unix(1600000000, 0).UTC(),
		Type: "t", UserID: "guest", AppID: "app",
	}
	empty := &Message{}
	emptyHeaders := &Message{Body: []byte{}, Props: Properties{Headers: Table{}}}
	big := &Message{RoutingKey: "k", Body: bytes.Repeat([]byte{0xAB}, 70000)}
	return []*Message{full, empty, emptyHeaders, big}
}

func TestMessageRoundTrip(t *testing.T) {
	for i, m := range sampleMessages() {
		data := encodeMessage(m, 42+int64(i), nil)
		got, at, err := decodeMessage(data)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if at != 42+int64(i) || got.ts != at || got.expiresAt != m.expiresAt {
			t.Fatalf("message %d: times %d %d %d", i, at, got.ts, got.expiresAt)
		}
		if got.Exchange != m.Exchange || got.RoutingKey != m.RoutingKey || !bytes.Equal(got.Body, m.Body) {
			t.Fatalf("message %d: %q %q %d bytes", i, got.Exchange, got.RoutingKey, len(got.Body))
		}
		wp, gp := m.Props, got.Props
		if (wp.Headers == nil) != (gp.Headers == nil) {
			t.Fatalf("message %d: headers nil-ness %v %v", i, wp.Headers, gp.Headers)
		}
		if len(wp.Headers) > 0 && !reflect.DeepEqual(wp.Headers, gp.Headers) {
			t.Fatalf("message %d: headers %#v", i, gp.Headers)
		}
		wp.Headers, gp.Headers = nil, nil
		if !reflect.DeepEqual(wp, gp) {
			t.Fatalf("message %d: props\n got %+v\nwant %+v", i, gp, wp)
		}
		// Appending to a buffer keeps its prefix.
		buf := encodeMessage(m, 42+int64(i), []byte("prefix"))
		if !bytes.HasPrefix(buf, []byte("prefix")) || !bytes.Equal(buf[6:], data) {
			t.Fatalf("message %d: encode into buffer", i)
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	data := encodeMessage(sampleMessages()[0], 1, nil)
	for n := 0; n < len(data); n++ {
		if _, _, err := decodeMessage(data[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	bad := append([]byte{2}, data[1:]...)
	if _, _, err := decodeMessage(bad); err == nil {
		t.Fatal("unknown version accepted")
	}
	rec := encodeRecord(allValues())
	for n := 0; n < len(rec); n++ {
		if _, err := decodeRecord(rec[:n]); err == nil && n > 0 {
			t.Fatalf("record truncated to %d bytes: no error", n)
		}
	}
	// Deep nesting is refused, not a stack overflow.
	var deep []byte
	deep = append(deep, 1) // one key
	for i := 0; i < 1000; i++ {
		deep = append(deep, 1, 'k', 'F', 1)
	}
	if _, err := decodeRecord(deep); err == nil {
		t.Fatal("over-deep record accepted")
	}
	// A huge declared length does not allocate it.
	if _, err := decodeRecord([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Fatal("huge count accepted")
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for i, m := range sampleMessages() {
		data := encodeMessage(m, int64(i), nil)
		if len(data) > 4096 {
			data = data[:4096]
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, err := decodeMessage(data)
		if err != nil {
			return
		}
		// What decodes re-encodes to a fixed point (bytes compare NaN
		// and non-canonical varints sanely, values would not).
		enc1 := encodeMessage(m, m.ts, nil)
		again, _, err := decodeMessage(enc1)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(encodeMessage(again, again.ts, nil), enc1) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(allValues()))
	f.Add(encodeRecord(Table{"id": uint64(7), "durable": true, "args": Table{"x-max-length": int64(10)}}))
	f.Add(encodeRecord(Table{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, err := decodeRecord(data)
		if err != nil {
			return
		}
		enc1 := encodeRecord(tb)
		again, err := decodeRecord(enc1)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(encodeRecord(again), enc1) {
			t.Fatal("re-encoding differs")
		}
	})
}
