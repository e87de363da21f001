package frame

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

var ts = time.Date(2024, 5, 6, 7, 8, 9, 123, time.UTC)

// named is a table type of a front end's codec (as protocol/amqp/wire.Table).
type named map[string]any

// decimal is a front end's decimal (as wire.Decimal).
type decimal struct {
	Scale uint8
	Value int32
}

func fullMessage() Message {
	return Message{Exchange: "orders", RoutingKey: "eu.paris", Body: []byte("body"), Props: Properties{
		ContentType: "text/plain", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 3,
		CorrelationID: "corr", ReplyTo: "rt", Expiration: "60000", MessageID: "mid",
		Timestamp: ts, Type: "ty", UserID: "someone", AppID: "app",
		Headers: map[string]any{
			"bool": true, "i8": int8(-8), "u8": uint8(8), "i16": int16(-16), "u16": uint16(16),
			"i32": int32(-32), "u32": uint32(32), "i64": int64(-64), "u64": uint64(1 << 63),
			"f32": float32(1.5), "f64": 2.25, "str": "s", "bytes": []byte{0, 1, 2},
			"time": ts, "dec": Decimal{Scale: 2, Value: 12345}, "nil": nil,
			"nested": map[string]any{"a": "b", "deeper": map[string]any{"n": int32(1)}},
			"array":  []any{"x", int32(1), []any{true}, map[string]any{"k": "v"}},
		},
	}}
}

// golden are frames and their exact encodings.
var golden = []struct {
	name string
	f    Frame
	hex  []byte
}{
	{"hello", &Hello{Version: 1}, append(append([]byte{0, 0, 0, 13, byte(THello)}, Magic...), 1)},
	{"welcome", &Welcome{Version: 1, Credit: 300}, []byte{0, 0, 0, 4, byte(TWelcome), 1, 0xac, 0x02}},
	{"refuse", &Refuse{Version: 2, Reason: "no"}, []byte{0, 0, 0, 5, byte(TRefuse), 2, 2, 'n', 'o'}},
	{"confirm", &Confirm{ID: 5, OK: true}, []byte{0, 0, 0, 4, byte(TConfirm), 5, 1, 0}},
	{"credit", &Credit{Hop: 2, N: 7}, []byte{0, 0, 0, 3, byte(TCredit), 2, 7}},
	{"settle", &Settle{Consumer: 1, Op: Requeue, Deliveries: []uint64{3, 4, 2}},
		[]byte{0, 0, 0, 7, byte(TSettle), 1, byte(Requeue), 3, 6, 2, 3}},
	{"ping", &Ping{}, []byte{0, 0, 0, 1, byte(TPing)}},
	{"publish empty", &Publish{ID: 1, Hop: 0, VHost: "/", Queue: "q"},
		[]byte{0, 0, 0, 24, byte(TPublish), 1, 0, 0, 1, '/', 1, 'q', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
}

// roundTrip are frames that must decode to what they were.
func roundTrip() []Frame {
	return []Frame{
		&Hello{Version: 1}, &Welcome{Version: 1, Credit: 10000}, &Refuse{Version: 9, Reason: "unknown version"},
		&Publish{ID: 1 << 40, Hop: 2, Meta: 42, VHost: "/", Queue: "q", Msg: fullMessage()},
		&Confirm{ID: 3, Reason: "no queue"}, &Credit{Hop: 1, N: 1 << 31},
		&Consume{Consumer: 7, VHost: "v", Queue: "s", Prefetch: 100, PerConsumer: true, Args: map[string]any{"x-stream-offset": "first"}},
		&Consume{Consumer: 8, VHost: "v", Queue: "q"},
		&Qos{Consumer: 7, Prefetch: 5}, &Cancel{Consumer: 7}, &Cancelled{Consumer: 7, Reason: "queue deleted"}, &Cancelled{Consumer: 8, Refused: true, Reason: "no queue"},
		&Deliver{Consumer: 7, Delivery: 99, Redelivered: true, Msg: fullMessage()},
		&Settle{Consumer: 0, Op: Reject, Deliveries: []uint64{1, 1 << 60, 2}},
		&Get{Req: 1, VHost: "/", Queue: "q", NoAck: true},
		&GetOK{Req: 1, Delivery: 4, Remaining: 12, Msg: Message{Body: []byte("b")}},
		&Purge{Req: 2, VHost: "/", Queue: "q"}, &Count{Req: 3, VHost: "/", Queue: "q"},
		&Result{Req: 3, A: 10, B: 1}, &Result{Req: 4, Err: "no queue 'x'"}, &Ping{}, &Pong{},
	}
}

func decodeAll(t testing.TB, b []byte) Frame {
	t.Helper()
	n, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(b)-HeaderSize {
		t.Fatalf("length %d, frame has %d", n, len(b)-HeaderSize)
	}
	f, err := Decode(b[HeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGolden(t *testing.T) {
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			b, err := Append(nil, g.f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, g.hex) {
				t.Fatalf("encoded\n got % x\nwant % x", b, g.hex)
			}
			if f := decodeAll(t, b); !reflect.DeepEqual(f, g.f) {
				t.Fatalf("decoded %#v, want %#v", f, g.f)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, f := range roundTrip() {
		t.Run(f.Type().String(), func(t *testing.T) {
			b, err := Append([]byte("prefix"), f)
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeAll(t, b[len("prefix"):]); !reflect.DeepEqual(got, f) {
				t.Fatalf("round trip\n got %#v\nwant %#v", got, f)
			}
		})
	}
}

// TestFrontEndTypes: a front end's named table and decimal types, int and
// uint, arrays of tables, go out as the codec's own.
func TestFrontEndTypes(t *testing.T) {
	p := &Publish{VHost: "/", Queue: "q", Msg: Message{Props: Properties{Headers: map[string]any{
		"t": named{"d": decimal{Scale: 1, Value: -5}}, "int": 42, "uint": uint(7),
		"tables": []named{{"a": "b"}},
	}}}}
	b, err := Append(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	got := decodeAll(t, b).(*Publish).Msg.Props.Headers
	want := map[string]any{"t": map[string]any{"d": Decimal{Scale: 1, Value: -5}}, "int": int64(42),
		"uint": uint64(7), "tables": []any{map[string]any{"a": "b"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
}

func TestEncodeErrors(t *testing.T) {
	deep := map[string]any{}
	for i, cur := 0, deep; i < MaxDepth+2; i++ {
		next := map[string]any{}
		cur["n"] = next
		cur = next
	}
	for name, h := range map[string]map[string]any{
		"channel": {"c": make(chan int)}, "func": {"f": func() {}}, "deep": deep,
	} {
		b, err := Append([]byte("x"), &Publish{Msg: Message{Props: Properties{Headers: h}}})
		if !errors.Is(err, ErrUnsupported) || string(b) != "x" {
			t.Errorf("%s: %v, %q", name, err, b)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for name, c := range map[string]struct {
		b    []byte
		want error
	}{
		"empty":          {nil, ErrMalformed},
		"unknown type":   {[]byte{200}, ErrUnknownType},
		"zero type":      {[]byte{0}, ErrUnknownType},
		"bad magic":      {append([]byte{byte(THello)}, "trident-xxx\x01"...), ErrMalformed},
		"short":          {[]byte{byte(TConfirm), 1}, ErrMalformed},
		"trailing":       {[]byte{byte(TPing), 0}, ErrMalformed},
		"huge string":    {[]byte{byte(TRefuse), 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrMalformed},
		"huge count":     {[]byte{byte(TSettle), 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrMalformed},
		"bad op":         {[]byte{byte(TSettle), 1, 9, 0}, ErrMalformed},
		"bad hop":        {[]byte{byte(TCredit), Hops, 1}, ErrMalformed},
		"bad bool":       {[]byte{byte(TConfirm), 1, 2, 0}, ErrMalformed},
		"credit too big": {[]byte{byte(TCredit), 0, 0x80, 0x80, 0x80, 0x80, 0x10}, ErrMalformed},
	} {
		if _, err := Decode(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	for _, h := range [][]byte{{0, 0, 0, 0}, {0xff, 0xff, 0xff, 0xff}, {0, 0}} {
		if _, err := ParseHeader(h); err == nil {
			t.Errorf("header % x accepted", h)
		}
	}
}

// FuzzDecode: any bytes decode to a frame or an error, never a panic; a
// frame that decodes encodes again to something that decodes to it; a
// stream of frames split at random points reads back whole.
func FuzzDecode(f *testing.F) {
	for _, g := range golden {
		f.Add(g.hex[HeaderSize:])
	}
	for _, fr := range roundTrip() {
		b, _ := Append(nil, fr)
		f.Add(b[HeaderSize:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Decode(b)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		out, err := Append(nil, fr)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", fr, err)
		}
		again, err := Decode(out[HeaderSize:])
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(again), normalize(fr)) {
			t.Fatalf("round trip\n got %#v\nwant %#v", again, fr)
		}
		// Two of it, fed in pieces split at random points: next says
		// errShort until a whole frame is there, then gives it.
		r := rand.New(rand.NewPCG(uint64(len(b)), 1))
		stream := append(append([]byte{}, out...), out...)
		var buf []byte
		frames := 0
		for rest := stream; len(rest) > 0; {
			k := 1 + r.IntN(len(rest))
			buf = append(buf, rest[:k]...)
			rest = rest[k:]
			for {
				got, n, err := next(buf)
				if errors.Is(err, errShort) {
					break
				}
				if err != nil {
					t.Fatalf("split stream: %v", err)
				}
				if !reflect.DeepEqual(normalize(got), normalize(fr)) {
					t.Fatalf("split stream gave %#v", got)
				}
				buf = buf[n:]
				frames++
			}
		}
		if frames != 2 || len(buf) != 0 {
			t.Fatalf("split stream: %d frames, %d bytes left", frames, len(buf))
		}
	})
}

// normalize makes NaN floats comparable (DeepEqual says NaN != NaN).
func normalize(f Frame) Frame {
	b, _ := Append(nil, f)
	return &Refuse{Reason: string(b)}
}

var errShort = errors.New("incomplete frame")

// next decodes the frame at the front of b and returns it with the number
// of bytes it took; errShort if b does not hold a whole frame yet (as a
// reader of a byte stream does).
func next(b []byte) (Frame, int, error) {
	if len(b) < HeaderSize {
		return nil, 0, errShort
	}
	n, err := ParseHeader(b)
	if err != nil {
		return nil, 0, err
	}
	if len(b)-HeaderSize < n {
		return nil, 0, errShort
	}
	f, err := Decode(b[HeaderSize : HeaderSize+n])
	if err != nil {
		return nil, 0, err
	}
	return f, HeaderSize + n, nil
}
