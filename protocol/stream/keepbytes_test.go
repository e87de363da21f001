package stream

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
	"github.com/trident-broker/trident/store"
)

// keptMessages are AMQP 1.0 messages as a client may encode them: the
// annotations and application properties in no particular order (the
// core's encoding would sort them), properties the core keeps in headers,
// and a plain body.
func keptMessages() [][]byte {
	return [][]byte{
		wire.AppendMessage(nil, &wire.Message{Durable: true, Priority: 3, MessageID: "id-1", Subject: "subj", To: "dest",
			ContentType: "text/plain", CreationTime: 1700000000123,
			Annotations: []wire.Prop{{Key: "x-z", Value: "last"}, {Key: "x-a", Value: int64(7)}},
			AppProps:    []wire.Prop{{Key: "zeta", Value: true}, {Key: "alpha", Value: "a"}},
			Body:        []byte("rich")}),
		amqpBody("plain"),
		wire.AppendMessage(nil, &wire.Message{AppProps: []wire.Prop{{Key: "k", Value: int32(-1)}}, Body: bytes.Repeat([]byte("b"), 3000)}),
	}
}

// publishKept creates stream "s" and publishes keptMessages in one frame.
func publishKept(t *testing.T, s *testServer) [][]byte {
	t.Helper()
	c := dial(t, s)
	c.open()
	c.createWithPublisher("p")
	msgs := keptMessages()
	fields := []any{uint8(1), uint32(len(msgs))}
	for i, m := range msgs {
		fields = append(fields, uint64(i+1), blob(m))
	}
	c.send(frame(wire.KeyPublish, 1, fields...))
	c.confirms(1, len(msgs))
	return msgs
}

// subscribedMessages reads n messages of stream "s" from first through a
// subscription.
func subscribedMessages(t *testing.T, s *testServer, n int) [][]byte {
	t.Helper()
	c := dial(t, s)
	c.open()
	if _, code := c.call(wire.KeySubscribe, uint8(1), str("s"), wire.OffsetFirst, uint16(10)); code != wire.OK {
		t.Fatalf("subscribe: %v", code)
	}
	var out [][]byte
	for len(out) < n {
		p, _ := c.expect(wire.KeyDeliver)
		ch, err := wire.ParseDeliver(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ch.Messages {
			out = append(out, bytes.Clone(m))
		}
	}
	return out
}

// TestStreamKeepsPublishedBytes: a message published over the stream
// protocol is kept as the client encoded it (a record of version 4) and
// read back by a subscriber byte for byte, named producer's dedup
// included; a reader of another protocol (a core consumer without stored
// runs, as AMQP 0-9-1's) gets the message the conversion of a publish
// makes, as before.
func TestStreamKeepsPublishedBytes(t *testing.T) {
	s := newTestServer(t)
	msgs := publishKept(t, s)
	got := subscribedMessages(t, s, len(msgs))
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d read back as\n%x\npublished\n%x", i, got[i], msgs[i])
		}
	}
	vh, _ := s.b.VHost("/")
	runs, cons := consumeAll(t, vh, exchange.ConsumeOpts{StoredRuns: true}, len(msgs))
	cons.Cancel()
	for _, r := range runs.runs {
		for _, rec := range r.Recs {
			if raw, ok := exchange.StoredAMQP10(rec.Data); !ok || !bytes.Equal(raw, msgs[rec.Off]) {
				t.Fatalf("record %d is not the published bytes (version %d)", rec.Off, rec.Data[0])
			}
		}
	}
	decoded, cons := consumeAll(t, vh, exchange.ConsumeOpts{NoOffsetHeader: true}, len(msgs))
	cons.Cancel()
	for i, d := range decoded.ds {
		want, err := toCore(msgs[i], "s")
		if err != nil {
			t.Fatal(err)
		}
		if d.Msg.RoutingKey != "s" || !reflect.DeepEqual(d.Msg.Props, want.Props) || !bytes.Equal(d.Msg.Body, want.Body) {
			t.Fatalf("message %d decoded as %q %+v %q, want %+v %q", i, d.Msg.RoutingKey, d.Msg.Props, d.Msg.Body, want.Props, want.Body)
		}
	}
	if n := s.messages(t, "s"); n != int64(len(msgs)) {
		t.Fatalf("%d messages stored", n)
	}
}

// TestStreamWithoutCodecDecodes: a node built without the AMQP 1.0 codec
// (exchange.WithAMQP10Codec) cannot read such records back, so it stores
// every message converted, and its subscribers read the conversion's
// encoding (annotations sorted, the creation time in seconds: what kept
// bytes do better).
func TestStreamWithoutCodecDecodes(t *testing.T) {
	s := newTestServerWith(t, store.NewMemory())
	msgs := publishKept(t, s)
	got := subscribedMessages(t, s, len(msgs))
	for i := range msgs {
		m, err := toCore(msgs[i], "s")
		if err != nil {
			t.Fatal(err)
		}
		m.Props.Timestamp = m.Props.Timestamp.Truncate(time.Second) // the core keeps seconds (AMQP 0-9-1's)
		if want := appendFromCore(nil, m); !bytes.Equal(got[i], want) {
			t.Fatalf("message %d read back as\n%x\nwant the conversion's\n%x", i, got[i], want)
		}
	}
	if bytes.Equal(got[0], msgs[0]) {
		t.Fatal("the rich message came back as published: the conversion sorts it and keeps seconds")
	}
}
