package frame

import (
	"bytes"
	"os"
	"reflect"
	"testing"
	"time"
)

// Frames as v0.1.0 wrote them (testdata/v0.1.0, made by that version's
// Append): a node of that version talks to this one during a rolling
// upgrade, so they must decode, and the same frames must encode to the same
// bytes.

func goldenPublishMessage() Message {
	m := fullMessage()
	m.Props.Headers["decimal-big-scale"] = Decimal{Scale: 200, Value: 7}
	m.Props.Headers["named"] = named{"a": "b"}
	m.Props.Headers["struct-decimal"] = decimal{Scale: 3, Value: -1}
	m.Props.Headers["int"] = int(-5)
	m.Props.Headers["uint"] = uint(5)
	m.Props.Headers["empty-bytes"] = []byte{}
	m.Props.Headers["time-zone"] = time.Date(2024, 1, 2, 3, 4, 5, 999, time.FixedZone("x", 3600))
	m.Props.Headers["named-slice"] = []named{{"k": "v"}}
	return m
}

func goldenFrames() map[string]Frame {
	return map[string]Frame{
		"publish.bin": &Publish{ID: 1 << 40, Hop: 2, Meta: 99, VHost: "/", Queue: "q", Msg: goldenPublishMessage()},
		"deliver.bin": &Deliver{Consumer: 3, Delivery: 4, Redelivered: true, Msg: fullMessage()},
		"consume.bin": &Consume{Consumer: 1, VHost: "v", Queue: "s", Prefetch: 10, PerConsumer: true,
			Args: map[string]any{"x-stream-offset": "first", "x-priority": int32(-3), "t": time.Unix(5, 6).UTC()}},
		"settle.bin": &Settle{Consumer: 1, Op: Reject, Deliveries: []uint64{9, 3, 1 << 50}},
	}
}

func TestGoldenV010(t *testing.T) {
	for name, f := range goldenFrames() {
		old, err := os.ReadFile("testdata/v0.1.0/" + name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Append(nil, f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(b, old) {
			t.Errorf("%s: encoding differs from v0.1.0's\n got % x\nwant % x", name, b, old)
		}
		got, err := Decode(old[HeaderSize:])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p, ok := got.(*Publish); ok {
			// As decoded: named types plain, int and uint widened, times UTC.
			h := goldenPublishMessage().Props.Headers
			h["named"] = map[string]any{"a": "b"}
			h["struct-decimal"] = Decimal{Scale: 3, Value: -1}
			h["int"] = int64(-5)
			h["uint"] = uint64(5)
			h["time-zone"] = time.Date(2024, 1, 2, 2, 4, 5, 999, time.UTC)
			h["named-slice"] = []any{map[string]any{"k": "v"}}
			if !reflect.DeepEqual(p.Msg.Props.Headers, h) {
				for k := range h {
					if !reflect.DeepEqual(p.Msg.Props.Headers[k], h[k]) {
						t.Errorf("%s: %s: got %#v, want %#v", name, k, p.Msg.Props.Headers[k], h[k])
					}
				}
			}
			continue
		}
		if !reflect.DeepEqual(got, f) {
			t.Errorf("%s: decoded\n got %#v\nwant %#v", name, got, f)
		}
	}
}
