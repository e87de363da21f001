package wire

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
)

// TestMessageFromGoClient decodes what rabbitmq-stream-go-client encodes.
func TestMessageFromGoClient(t *testing.T) {
	created := time.UnixMilli(1700000000123).UTC()
	m := &amqp.Message{
		Header:      &amqp.MessageHeader{Durable: true, Priority: 3},
		Annotations: amqp.Annotations{"x-key": "v"},
		Properties: &amqp.MessageProperties{MessageID: "id-1", CorrelationID: "c-1", ReplyTo: "r",
			ContentType: "text/plain", Subject: "subj", CreationTime: created, GroupSequence: 4},
		ApplicationProperties: map[string]any{"s": "x", "n": int64(-5), "b": true, "f": 1.5},
		Data:                  [][]byte{[]byte("hello "), []byte("world")},
	}
	enc, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMessage(enc)
	if err != nil {
		t.Fatalf("DecodeMessage: %v", err)
	}
	if string(got.Body) != "hello world" || !got.Durable || got.Priority != 3 || got.MessageID != "id-1" ||
		got.CorrelationID != "c-1" || got.ReplyTo != "r" || got.ContentType != "text/plain" || got.Subject != "subj" ||
		got.CreationTime != created.UnixMilli() || got.GroupSequence != 4 {
		t.Fatalf("decoded %+v", got)
	}
	props := map[string]any{}
	for _, p := range got.AppProps {
		props[p.Key] = p.Value
	}
	if !reflect.DeepEqual(props, map[string]any{"s": "x", "n": int64(-5), "b": true, "f": 1.5}) {
		t.Fatalf("application properties %v", props)
	}
	if len(got.Annotations) != 1 || got.Annotations[0] != (Prop{"x-key", "v"}) {
		t.Fatalf("annotations %v", got.Annotations)
	}
}

// TestMessageToGoClient: what AppendMessage writes, the Go client reads.
func TestMessageToGoClient(t *testing.T) {
	in := Message{Durable: true, MessageID: "m", CorrelationID: "c", ContentType: "application/json",
		CreationTime: 1700000000123, Annotations: []Prop{{"x-a", int64(1)}},
		AppProps: []Prop{{"k", "v"}, {"i", int32(7)}, {"t", time.UnixMilli(5).UTC()}, {"bin", []byte{1, 2}}},
		Body:     bytes.Repeat([]byte("b"), 300)}
	enc := AppendMessage(nil, &in)
	var m amqp.Message
	if err := m.UnmarshalBinary(enc); err != nil {
		t.Fatalf("go client cannot read it: %v", err)
	}
	if !bytes.Equal(m.GetData(), in.Body) || m.Properties.MessageID != "m" || m.Properties.CorrelationID != "c" ||
		m.Properties.ContentType != "application/json" || m.Properties.CreationTime.UnixMilli() != 1700000000123 ||
		m.Header == nil || !m.Header.Durable {
		t.Fatalf("go client read %+v %+v", m.Properties, m.Header)
	}
	if m.ApplicationProperties["k"] != "v" || m.ApplicationProperties["i"] != int32(7) {
		t.Fatalf("application properties %v", m.ApplicationProperties)
	}
	// And it decodes back to what went in.
	back, err := DecodeMessage(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, in) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", back, in)
	}
	// A bare body: one data section, nothing else.
	if got := AppendMessage(nil, &Message{Body: []byte("x")}); !bytes.Equal(got, h("00 53 75 a0 01 78")) {
		t.Fatalf("bare body encoded as %x", got)
	}
}

func TestMessageBad(t *testing.T) {
	for _, in := range [][]byte{
		h("01"),                   // not a described section
		h("00 53 75 a0 05 78"),    // data past the end
		h("00 53 99 40"),          // unknown section
		h("00 53 74 c1 05 04 a1"), // map past the end
		h("00 53 77 " + string(bytes.Repeat([]byte("00 53 00 "), 40)) + "40"), // nested descriptors
	} {
		if _, err := DecodeMessage(in); err == nil {
			t.Errorf("%x decoded", in)
		}
	}
}

// FuzzDecodeMessage: no panic; a message that decodes re-encodes to one
// that decodes to the same.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(AppendMessage(nil, &Message{Body: []byte("x")}))
	f.Add(AppendMessage(nil, &Message{Durable: true, MessageID: "m", AppProps: []Prop{{"k", "v"}, {"n", int64(1)}}, Body: []byte("y")}))
	m := &amqp.Message{Properties: &amqp.MessageProperties{MessageID: uint64(9)}, ApplicationProperties: map[string]any{"a": []any{1, "x"}},
		Data: [][]byte{[]byte("z")}}
	if enc, err := m.MarshalBinary(); err == nil {
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMessage(in)
		if err != nil {
			return
		}
		enc := AppendMessage(nil, &m)
		again, err := DecodeMessage(enc)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !bytes.Equal(again.Body, m.Body) || again.MessageID != m.MessageID || len(again.AppProps) != len(m.AppProps) {
			t.Fatalf("round trip changed the message: %+v vs %+v", again, m)
		}
	})
}
