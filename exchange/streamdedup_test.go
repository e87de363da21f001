package exchange

import (
	"testing"

	"github.com/trident-broker/trident/exchange/headers"
)

// A stream record carries its named producer (version 2) and decodes as
// the same message; the producer is not part of the decoded message.
func TestStreamWriterRecord(t *testing.T) {
	m := &Message{RoutingKey: "s", Body: []byte("hello"), Props: Properties{Headers: Table{"a": "b"}}}
	m.SetStreamWriter("producer-1", 42)
	m.SetStreamFilter("eu")
	data := encodeMessage(m, 7, nil)
	w, ok := decodeWriter(data)
	if !ok || w != (streamWriter{ref: "producer-1", seq: 42, filter: "eu"}) {
		t.Fatalf("decodeWriter: %+v %v", w, ok)
	}
	got, ts, err := decodeMessage(data)
	if err != nil || ts != 7 || string(got.Body) != "hello" || got.Props.Headers["a"] != "b" || got.writer != nil {
		t.Fatalf("decodeMessage: %+v %d %v", got, ts, err)
	}
	m.SetStreamWriter("", 0)
	if w, ok := decodeWriter(encodeMessage(m, 7, nil)); !ok || w != (streamWriter{filter: "eu"}) || m.writer.named() {
		t.Fatalf("a filter value alone: %+v %v", w, ok)
	}
	m.SetStreamFilter("")
	if _, ok := decodeWriter(encodeMessage(m, 7, nil)); ok || m.writer != nil {
		t.Fatal("a message without a producer or filter decodes one")
	}
}

// The producer crosses to the leader in writerHeader; a client cannot
// name a producer through that header: a follower drops it from its own
// clients' messages, a leader reads it only on a forwarded one.
func TestStreamWriterForwarding(t *testing.T) {
	forged := &Message{Props: Properties{Headers: Table{writerHeader: Table{"ref": "victim", "seq": int64(1 << 40)}, "k": "v"}}}
	out := forwardable(forged)
	if _, ok := out.Props.Headers[writerHeader]; ok || out.Props.Headers["k"] != "v" {
		t.Fatalf("a client's header forwarded: %v", out.Props.Headers)
	}
	if _, ok := forged.Props.Headers[writerHeader]; !ok {
		t.Fatal("the client's message itself was changed")
	}
	if takeForwardedWriter(forged) || forged.writer != nil {
		t.Fatal("a local client's header named a producer")
	}

	m := &Message{Props: Properties{Headers: Table{"k": "v"}}}
	m.SetStreamWriter("p", 9)
	out = forwardable(m)
	// As the inter-node codec brings it to the leader.
	in := &Message{Hops: 1, Props: Properties{Headers: Table{"k": "v", writerHeader: headers.Table(out.Props.Headers[writerHeader].(Table))}}}
	if !takeForwardedWriter(in) || in.writer == nil || in.writer.ref != "p" || in.writer.seq != 9 {
		t.Fatalf("forwarded producer: %+v", in.writer)
	}
	if _, ok := in.Props.Headers[writerHeader]; ok || in.Props.Headers["k"] != "v" {
		t.Fatalf("header left on the stored message: %v", in.Props.Headers)
	}
	// A held copy handed back to this node keeps its producer, not the header.
	if !takeForwardedWriter(out) || out.writer == nil || len(out.Props.Headers) != 1 {
		t.Fatalf("handed back: %+v %v", out.writer, out.Props.Headers)
	}
}
