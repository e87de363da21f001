package stream

import (
	"encoding/binary"
	"testing"

	"github.com/trident-broker/trident/protocol/stream/wire"
	"github.com/trident-broker/trident/store"
)

// BenchmarkConsumeFromFirst: one raw subscriber reads a stream of 16-byte
// messages from its first offset, 1,000 chunks of credit ahead, from the
// Badger store; ns/op and allocs/op are per message delivered (the broker
// and the reading client in one process).
func BenchmarkConsumeFromFirst(b *testing.B) { benchConsume(b, 1) }

// BenchmarkConsumeFromFirst10: ten subscribers (one connection) read the
// same stream from its first offset; per message delivered, as above.
func BenchmarkConsumeFromFirst10(b *testing.B) { benchConsume(b, 10) }

func benchConsume(b *testing.B, subs int) {
	c, body := benchPublisher(b)
	const batch = 500
	var id uint64
	total := (b.N + subs - 1) / subs // messages in the stream
	for sent := 0; sent < total; sent += batch {
		n := min(batch, total-sent)
		fields := []any{uint8(1), uint32(n)}
		for range n {
			id++
			fields = append(fields, id, body)
		}
		c.send(frame(wire.KeyPublish, 1, fields...))
		c.confirms(1, n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for id := range subs {
		c.send(frame(wire.KeySubscribe, 1, c.next(), uint8(id), str("bench"), wire.OffsetFirst, uint16(1000)))
	}
	got := 0
	for got < total*subs {
		p := c.read()
		if binary.BigEndian.Uint16(p) != wire.KeyDeliver {
			continue
		}
		// Sub id, then the chunk header: magic/version, type, entries.
		got += int(binary.BigEndian.Uint16(p[7:]))
		c.send(frame(wire.KeyCredit, 1, p[4], uint16(1)))
	}
}

// BenchmarkPublishConfirm: one raw publisher sends 16-byte messages in
// frames of 100 and waits for each frame's confirms before the next 10
// frames; per message published and confirmed, Badger store.
func BenchmarkPublishConfirm(b *testing.B) {
	c, body := benchPublisher(b)
	const perFrame, window = 100, 10
	b.ReportAllocs()
	b.ResetTimer()
	var id uint64
	inFlight := 0
	for sent := 0; sent < b.N; {
		for inFlight < window*perFrame && sent < b.N {
			n := min(perFrame, b.N-sent)
			fields := []any{uint8(1), uint32(n)}
			for range n {
				id++
				fields = append(fields, id, body)
			}
			c.send(frame(wire.KeyPublish, 1, fields...))
			sent += n
			inFlight += n
		}
		p, _ := c.expect(wire.KeyPublishConfirm)
		inFlight -= int(binary.BigEndian.Uint32(p[5:]))
	}
	for inFlight > 0 {
		p, _ := c.expect(wire.KeyPublishConfirm)
		inFlight -= int(binary.BigEndian.Uint32(p[5:]))
	}
}

// benchPublisher is a client of a server over the Badger store, with
// stream "bench" and publisher 1 on it, and a 16-byte message's body.
func benchPublisher(b *testing.B) (*client, blob) {
	st, err := store.OpenBadger(b.TempDir(), store.BadgerOptions{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	c := dial(b, newTestServerOn(b, st))
	c.open()
	if _, code := c.call(wire.KeyCreate, str("bench"), uint32(0)); code != wire.OK {
		b.Fatalf("create: %v", code)
	}
	if _, code := c.call(wire.KeyDeclarePublisher, uint8(1), str(""), str("bench")); code != wire.OK {
		b.Fatalf("declare publisher: %v", code)
	}
	return c, blob(wire.AppendMessage(nil, &wire.Message{Body: make([]byte, 16)}))
}
