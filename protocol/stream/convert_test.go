package stream

import (
	"bytes"

	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
	"github.com/trident-broker/trident/store"
)

// genStr is empty, short, or past 255 bytes (AMQP 1.0's 32-bit length).
func genStr(r *rand.Rand) string {
	switch r.Intn(4) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("é", 100+r.Intn(100))
	}
	return fmt.Sprintf("s%d", r.Intn(1000))
}

// genValue is a header value of every kind the core keeps.
func genValue(r *rand.Rand, depth int) any {
	kinds := 20
	if depth > 1 {
		kinds = 17
	}
	switch r.Intn(kinds) {
	case 0:
		return nil
	case 1:
		return r.Intn(2) == 0
	case 2:
		return int8(r.Intn(256) - 128)
	case 3:
		return uint8(r.Intn(256))
	case 4:
		return int16(r.Intn(1<<16) - 1<<15)
	case 5:
		return uint16(r.Intn(1 << 16))
	case 6:
		return int32(r.Uint32())
	case 7:
		return r.Uint32()
	case 8:
		return int64(r.Uint64())
	case 9:
		return r.Uint64()
	case 10:
		return float32(r.NormFloat64())
	case 11:
		return []float64{r.NormFloat64(), math.Inf(1), -0.0}[r.Intn(3)]
	case 12:
		return genStr(r)
	case 13:
		return []byte(genStr(r))
	case 14:
		return time.Unix(r.Int63n(1<<34)-1<<33, 0)
	case 15:
		return int(r.Int63())
	case 16:
		return exchange.Decimal{Scale: uint8(r.Intn(256)), Value: int32(r.Uint32())}
	case 17:
		return []any{genValue(r, depth+1), genValue(r, depth+1)}
	case 18:
		return map[string]any{"k": genValue(r, depth+1)}
	}
	return []any{}
}

var genKeys = []string{"", "a", "b", "x-stream-offset", "x-amqp-subject", "x-amqp-to", "x-amqp-group-id",
	"x-", "x-foo", "x-opt-z", "zz", "é"}

// genMessage is a core message with every property absent, empty or set,
// and headers absent, empty, or of every kind (the keys the stream
// protocol maps to its properties among them, strings or not).
func genMessage(r *rand.Rand) *exchange.Message {
	m := &exchange.Message{RoutingKey: "s", Body: []byte(genStr(r))}
	p := &m.Props
	p.ContentType, p.ContentEncoding = genStr(r), genStr(r)
	switch r.Intn(3) {
	case 1:
		p.Headers = exchange.Table{}
	case 2:
		p.Headers = exchange.Table{}
		for range r.Intn(6) {
			k := genKeys[r.Intn(len(genKeys))]
			if r.Intn(4) == 0 {
				k = genStr(r)
			}
			if strings.HasPrefix(k, "x-amqp") && r.Intn(2) == 0 {
				p.Headers[k] = genStr(r)
			} else {
				p.Headers[k] = genValue(r, 0)
			}
		}
	}
	p.DeliveryMode, p.Priority = uint8(r.Intn(3)), uint8(r.Intn(12))
	p.CorrelationID, p.ReplyTo, p.MessageID = genStr(r), genStr(r), genStr(r)
	p.Expiration = []string{"", "60000", "0", "-5", "x", "99999999999999999999", "+7"}[r.Intn(7)]
	if r.Intn(2) == 0 {
		p.Timestamp = time.Unix(r.Int63n(1<<34)-1<<33, 0)
	}
	p.Type, p.UserID, p.AppID = genStr(r), genStr(r), genStr(r)
	return m
}

// storedRecords publishes n generated messages to stream "s" of a broker
// over st and returns their records as a lone raw reader gets them, and
// the messages a consumer without StoredRuns gets (decoded by the core).
func storedRecords(t testing.TB, st exchange.Store, seed int64, n int) ([][]byte, []*exchange.Message) {
	t.Helper()
	_, recs, msgs := storedOn(t, st, seed, n)
	return recs, msgs
}

// storedOn is storedRecords, with the server.
func storedOn(t testing.TB, st exchange.Store, seed int64, n int) (*testServer, [][]byte, []*exchange.Message) {
	t.Helper()
	s := newTestServerOn(t, st)
	vh, _ := s.b.VHost("/")
	if _, err := vh.DeclareQueue("s", exchange.QueueOpts{Durable: true, Args: exchange.Table{"x-queue-type": "stream"}}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(seed))
	for range n {
		if _, err := vh.Publish(genMessage(r), exchange.PublishOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(o exchange.ConsumeOpts) *collect {
		sink, cons := consumeAll(t, vh, o, n)
		cons.Cancel()
		return sink
	}
	var recs [][]byte
	runs := read(exchange.ConsumeOpts{StoredRuns: true})
	if len(runs.ds) != 0 {
		t.Fatalf("%d deliveries of messages to a reader of runs", len(runs.ds))
	}
	for _, r := range runs.runs {
		for _, rec := range r.Recs {
			if rec.Off != uint64(len(recs)) {
				t.Fatalf("record at offset %d, want %d", rec.Off, len(recs))
			}
			recs = append(recs, rec.Data)
		}
	}
	var msgs []*exchange.Message
	for _, d := range read(exchange.ConsumeOpts{}).ds {
		msgs = append(msgs, d.Msg)
	}
	return s, recs, msgs
}

// TestAppendStoredMatchesCore: a stored record encoded in place into the
// stream protocol's AMQP 1.0 message is, byte for byte, what the message
// the core decodes from it encodes to (what a subscription sent before),
// for messages with every property and kind of header absent, empty and
// set. The old path's message comes from a consumer with the
// x-stream-offset header, which the encoding leaves out.
func TestAppendStoredMatchesCore(t *testing.T) {
	recs, msgs := storedRecords(t, store.NewMemory(), 1, 2000)
	for i, rec := range recs {
		v, err := exchange.ViewStoredMessage(rec)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got, want := appendStored(nil, &v, new([]byte)), appendFromCore(nil, msgs[i])
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d (%+v):\nin place %x\ndecoded  %x", i, msgs[i].Props, got, want)
		}
		if _, err := wire.DecodeMessage(got); err != nil {
			t.Fatalf("message %d does not decode: %v", i, err)
		}
	}
}

// TestSubscribersShareEncodings: three subscriptions read the generated
// messages from first together (the core hands them the records with what
// they share, and the first to write one caches its encoding there); each
// gets every message as the decode-and-encode path writes it.
func TestSubscribersShareEncodings(t *testing.T) {
	const n = 600
	s, _, msgs := storedOn(t, store.NewMemory(), 3, n)
	c := dial(t, s)
	c.open()
	for id := range uint8(3) {
		if _, code := c.call(wire.KeySubscribe, id, str("s"), wire.OffsetFirst, uint16(0)); code != wire.OK {
			t.Fatalf("subscribe: %v", code)
		}
	}
	for id := range uint8(3) {
		c.send(frame(wire.KeyCredit, 1, id, uint16(1000)))
	}
	got := make([]int, 3)
	for got[0] < n || got[1] < n || got[2] < n {
		p, _ := c.expect(wire.KeyDeliver)
		ch, err := wire.ParseDeliver(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ch.Messages {
			off := int(ch.First) + i
			if want := appendFromCore(nil, msgs[off]); !bytes.Equal(m, want) {
				t.Fatalf("subscription %d, offset %d:\ngot  %x\nwant %x", ch.Sub, off, m, want)
			}
		}
		got[ch.Sub] += len(ch.Messages)
	}
}

// FuzzAppendStored: for any record the view reads, the bytes encoded in
// place are those of the message the core decodes from it.
func FuzzAppendStored(f *testing.F) {
	recs, _ := storedRecords(f, store.NewMemory(), 2, 200)
	for _, rec := range recs {
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		v, err := exchange.ViewStoredMessage(rec)
		m, derr := exchange.DecodeStoredMessage(rec)
		if err != nil {
			return // refused (corrupt, or a key twice): the core decodes those
		}
		if derr != nil {
			t.Fatalf("the view read what does not decode: %v", derr)
		}
		if got, want := appendStored(nil, &v, new([]byte)), appendFromCore(nil, m); !bytes.Equal(got, want) {
			t.Fatalf("in place %x\ndecoded  %x", got, want)
		}
	})
}

// TestHeldRecordsStayIntact: the records a subscription holds while its
// client gives no credit alias what the log read (the read cache's chunks
// or the store's copies); thousands of publishes later, with the store's
// write buffers reused many times over and the read cache turned over,
// the client reads every held message as published. Over Badger.
func TestHeldRecordsStayIntact(t *testing.T) {
	st, err := store.OpenBadger(t.TempDir(), store.BadgerOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerOn(t, st)
	c := dial(t, s)
	c.open()
	c.createWithPublisher("")
	body := func(i int) string { return fmt.Sprintf("%06d-%s", i, strings.Repeat("b", i%300)) }
	var id uint64
	pub := func(from, to int) {
		for i := from; i < to; i += 200 {
			fields := []any{uint8(1), uint32(min(200, to-i))}
			for k := i; k < min(i+200, to); k++ {
				id++
				fields = append(fields, id, blob(amqpBody(body(k))))
			}
			c.send(frame(wire.KeyPublish, 1, fields...))
			c.confirms(1, min(200, to-i))
		}
	}
	const held = 2000
	pub(0, held)
	// Credit 0: what the core delivers waits in the subscription.
	if _, code := c.call(wire.KeySubscribe, uint8(1), str("s"), wire.OffsetFirst, uint16(0)); code != wire.OK {
		t.Fatalf("subscribe: %v", code)
	}
	vh, _ := s.b.VHost("/")
	q, _ := vh.Queue("s", nil)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if qs := q.Status(); qs.Unacked >= held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the subscription holds %d of %d", q.Status().Unacked, held)
		}
	}
	pub(held, 30000)
	// A reader of the new messages turns the read cache over meanwhile.
	sink := &collect{}
	cons, err := vh.Consume("s", exchange.ConsumeOpts{Tag: "other", Prefetch: 30000, Sink: sink, Owner: t,
		Args: exchange.Table{"x-stream-offset": int64(held)}, StoredRuns: true})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); sink.len() < 30000-held; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the other reader got %d", sink.len())
		}
	}
	cons.Cancel()
	c.send(frame(wire.KeyCredit, 1, uint8(1), uint16(1000)))
	for got := 0; got < held; {
		p, _ := c.expect(wire.KeyDeliver)
		ch, err := wire.ParseDeliver(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ch.Messages {
			off := int(ch.First) + i
			wm, err := wire.DecodeMessage(m)
			if err != nil || string(wm.Body) != body(off) {
				t.Fatalf("offset %d: body %.20q… (%v), want %.20q…", off, wm.Body, err, body(off))
			}
			if off == held-1 {
				return
			}
		}
		got += len(ch.Messages)
	}
}

// BenchmarkEncodeStored and BenchmarkEncodeDecoded: one stream message
// with a few properties and headers into its AMQP 1.0 bytes, in place from
// its record and (the path before) decoded into a core message, then
// encoded. Per message; allocs/op are the hard figure.
func BenchmarkEncodeStored(b *testing.B) {
	rec := benchRecord(b)
	buf := make([]byte, 0, 4096)
	var scratch []byte
	b.ReportAllocs()
	for b.Loop() {
		v, err := exchange.ViewStoredMessage(rec)
		if err != nil {
			b.Fatal(err)
		}
		buf = appendStored(buf[:0], &v, &scratch)
	}
}

func BenchmarkEncodeDecoded(b *testing.B) {
	rec := benchRecord(b)
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		m, err := exchange.DecodeStoredMessage(rec)
		if err != nil {
			b.Fatal(err)
		}
		buf = appendFromCore(buf[:0], m)
	}
}

func benchRecord(b *testing.B) []byte {
	return benchRecordOf(b, &exchange.Message{RoutingKey: "s", Body: make([]byte, 16), Props: exchange.Properties{DeliveryMode: 2,
		MessageID: "id-1", ContentType: "application/json", Timestamp: time.Unix(1700000000, 0),
		Headers: exchange.Table{"app": "x", "n": int64(7), "x-amqp-subject": "subj"}}})
}

// benchRecordOf is the stored record of m in a stream.
func benchRecordOf(b *testing.B, m *exchange.Message) []byte {
	s := newTestServer(b)
	vh, _ := s.b.VHost("/")
	if _, err := vh.DeclareQueue("s", exchange.QueueOpts{Durable: true, Args: exchange.Table{"x-queue-type": "stream"}}); err != nil {
		b.Fatal(err)
	}
	if _, err := vh.Publish(m, exchange.PublishOpts{}); err != nil {
		b.Fatal(err)
	}
	sink, cons := consumeAll(b, vh, exchange.ConsumeOpts{Prefetch: 1, StoredRuns: true}, 1)
	defer cons.Cancel()
	return sink.runs[0].Recs[0].Data
}

// BenchmarkEncodeStoredPlain: the record of a 16-byte message published
// over the stream protocol with nothing but its body (the stream
// benchmark's), into its AMQP 1.0 bytes in place: what a lone reader pays
// per message.
func BenchmarkEncodeStoredPlain(b *testing.B) {
	m, err := toCore(wire.AppendMessage(nil, &wire.Message{Body: make([]byte, 16)}), "s")
	if err != nil {
		b.Fatal(err)
	}
	rec := benchRecordOf(b, m)
	buf := make([]byte, 0, 4096)
	var scratch []byte
	var v exchange.StoredMessage
	b.ReportAllocs()
	for b.Loop() {
		if err := exchange.ViewStoredMessageTo(&v, rec); err != nil {
			b.Fatal(err)
		}
		buf = appendStored(buf[:0], &v, &scratch)
	}
}
