package exchange

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// TestPublishRun: a run is appended in order and answered once, when all
// of it is durable; the caller's messages and bodies are free to reuse
// once it returns; a named producer's resends in a run are not appended
// again but answered with it; counters count the run's messages; a queue
// that is not a stream, or none, is not taken (ok false, done not called).
func TestPublishRun(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	declareQ(t, v, "classic", QueueOpts{Durable: true})

	var mu sync.Mutex
	var answers []error
	done := func(err error) {
		mu.Lock()
		answers = append(answers, err)
		mu.Unlock()
	}
	answered := func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), answers...)
	}

	ms := make([]Message, 5)
	ptrs := make([]*Message, 5)
	bodies := make([][]byte, 5)
	for i := range ms {
		bodies[i] = []byte(fmt.Sprintf("m%03d", i))
		ms[i] = Message{RoutingKey: "s", Body: bodies[i]}
		ms[i].SetStreamWriter("p", uint64(i+1))
		ptrs[i] = &ms[i]
	}
	n, ok := v.PublishRun("s", ptrs, nil, nil, done)
	if !ok || n != 5 {
		t.Fatalf("PublishRun: %d, %v; want 5, true", n, ok)
	}
	for i := range bodies {
		copy(bodies[i], "XXXX") // the caller reuses them
		ms[i] = Message{}
	}
	waitFor(t, "the run's answer", func() bool { return len(answered()) == 1 })
	if a := answered(); a[0] != nil {
		t.Fatalf("answer %v", a[0])
	}
	if d := q.st.log.Durable(); d != 5 {
		t.Fatalf("durable %d when the run was answered, want 5", d)
	}

	// A resend of ids 4 and 5 with a new 6: 6 alone is appended.
	ptrs = ptrs[:3]
	for i, id := range []uint64{4, 5, 6} {
		ms[i] = Message{RoutingKey: "s", Body: []byte(fmt.Sprintf("r%d", id))}
		ms[i].SetStreamWriter("p", id)
		ptrs[i] = &ms[i]
	}
	if n, ok := v.PublishRun("s", ptrs, nil, nil, done); !ok || n != 3 {
		t.Fatalf("resend: %d, %v; want 3, true", n, ok)
	}
	waitFor(t, "the resend's answer", func() bool { return len(answered()) == 2 })
	if a := answered(); a[1] != nil {
		t.Fatalf("resend's answer %v", a[1])
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 6 })

	_, s := consume(t, v, "s", ConsumeOpts{Prefetch: 100, Args: Table{"x-stream-offset": "first"}})
	waitFor(t, "deliveries", func() bool { return s.len() == 6 })
	if got := fmt.Sprint(s.bodies()); got != "[m000 m001 m002 m003 m004 r6]" {
		t.Fatalf("stream holds %s", got)
	}
	if c := q.counters.publish.Load(); c != 6 {
		t.Fatalf("queue's publish count %d, want 6", c)
	}

	for _, name := range []string{"classic", "none"} {
		if n, ok := v.PublishRun(name, ptrs, nil, nil, done); ok || n != 0 {
			t.Fatalf("PublishRun(%q): %d, %v; want 0, false", name, n, ok)
		}
	}
	if a := answered(); len(a) != 2 {
		t.Fatalf("%d answers, want 2: a run not taken is not answered", len(a))
	}
}

// TestPublishRunKeepsAMQP10: a run given as AMQP 1.0 encodings is kept as
// records of version 4 (StoredAMQP10 gives the bytes back) with their
// producers (a resend is a duplicate) and enqueue times (a reader from a
// timestamp starts there); a consumer of decoded messages and the
// management API's browse get what the node's codec decodes; without a
// codec the run is not taken.
func TestPublishRunKeepsAMQP10(t *testing.T) {
	// A stand-in codec: the body is the encoding, a header says so.
	codec := func(data []byte, m *Message) error {
		if len(data) == 0 {
			return errCorrupt
		}
		m.Body = append([]byte(nil), data...)
		m.Props.Headers = Table{"codec": true}
		return nil
	}
	b, err := New(newFakeStore(), nil, WithAMQP10Codec(codec))
	if err != nil {
		t.Fatal(err)
	}
	v := mustVHost(t, b, "/")
	q := newStreamQ(t, v, "s", nil)
	answered := make(chan error, 4)
	run := func(from, to uint64, tag string) {
		var ms []*Message
		var raw [][]byte
		for id := from; id <= to; id++ {
			m := &Message{RoutingKey: "s"}
			m.SetStreamWriter("p", id)
			ms = append(ms, m)
			raw = append(raw, []byte(fmt.Sprintf("%s%d", tag, id)))
		}
		if n, ok := v.PublishRun("s", ms, raw, nil, func(err error) { answered <- err }); !ok || n != len(ms) {
			t.Fatalf("PublishRun: %d, %v", n, ok)
		}
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
	}
	run(1, 3, "a")
	time.Sleep(5 * time.Millisecond)
	mid := time.Now()
	time.Sleep(5 * time.Millisecond)
	run(3, 4, "b") // 3 is a resend
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 4 })

	_, s := consume(t, v, "s", ConsumeOpts{Prefetch: 10, NoOffsetHeader: true, Args: Table{"x-stream-offset": "first"}})
	waitFor(t, "deliveries", func() bool { return s.len() == 4 })
	if got := fmt.Sprint(s.bodies()); got != "[a1 a2 a3 b4]" {
		t.Fatalf("decoded bodies %s", got)
	}
	if d := s.deliveries()[0]; d.Msg.Props.Headers["codec"] != true || d.Msg.RoutingKey != "s" {
		t.Fatalf("decoded %q %v", d.Msg.RoutingKey, d.Msg.Props.Headers)
	}
	_, late := consume(t, v, "s", ConsumeOpts{Prefetch: 10, NoOffsetHeader: true, Args: Table{"x-stream-offset": mid}})
	waitFor(t, "deliveries from a timestamp", func() bool { return late.len() == 1 })
	if got := fmt.Sprint(late.bodies()); got != "[b4]" {
		t.Fatalf("from %v: %s", mid, got)
	}
	page, err := q.Browse(BrowseOpts{Count: 10, Scan: 10})
	if err != nil || len(page.Messages) != 4 || string(page.Messages[3].Msg.Body) != "b4" {
		t.Fatalf("browse: %+v %v", page, err)
	}
	recs, _, err := q.st.log.Read(0, 10, 1<<20)
	if err != nil || len(recs) != 4 {
		t.Fatalf("read %d records: %v", len(recs), err)
	}
	if raw, ok := StoredAMQP10(recs[2].Data); !ok || string(raw) != "a3" {
		t.Fatalf("record 2: %q %v", raw, ok)
	}

	// Without a codec nothing is kept as AMQP 1.0.
	v2, _ := newTestVHost(t)
	newStreamQ(t, v2, "s", nil)
	if v2.StreamAMQP10Enabled() {
		t.Fatal("AMQP 1.0 records enabled without a codec")
	}
	if _, ok := v2.PublishRun("s", []*Message{{RoutingKey: "s"}}, [][]byte{[]byte("x")}, nil, func(error) {}); ok {
		t.Fatal("a run of AMQP 1.0 encodings taken without a codec")
	}
}

// FuzzAMQP10Record: any bytes read as a record of version 4 either are
// refused or give back fields that encode to a record read as the same
// (a producer's id without its reference is not kept); the node's
// decode of one never panics, whatever its codec is handed.
func FuzzAMQP10Record(f *testing.F) {
	m := &Message{Exchange: "x", RoutingKey: "s"}
	m.SetStreamWriter("p", 9)
	f.Add(appendAMQP10Record(nil, m, 1700000000, []byte{0, 0x53, 0x75, 0xa0, 1, 'b'}))
	f.Add(appendAMQP10Record(nil, &Message{}, 0, nil))
	f.Add([]byte{amqp10Version})
	b := &Broker{amqp10: func(data []byte, m *Message) error { m.Body = append([]byte(nil), data...); return nil }}
	f.Fuzz(func(t *testing.T, rec []byte) {
		_, _, _ = b.decodeRecord(rec)
		x, key, ts, raw, ok := amqp10Record(rec)
		if !ok {
			return
		}
		w, wok := streamlog.DecodeWriter(rec)
		if !wok {
			t.Fatalf("a record of version 4 whose producer does not decode: %x", rec)
		}
		again := &Message{Exchange: string(x), RoutingKey: string(key)}
		again.SetStreamWriter(w.Ref, w.Seq)
		again.SetStreamFilter(w.Filter)
		out := appendAMQP10Record(nil, again, ts, raw)
		x2, key2, ts2, raw2, ok := amqp10Record(out)
		w2, _ := streamlog.DecodeWriter(out)
		if w.Ref == "" {
			w.Seq = 0 // no producer: its id is not kept
		}
		if !ok || !bytes.Equal(x2, x) || !bytes.Equal(key2, key) || ts2 != ts || !bytes.Equal(raw2, raw) || w2 != w {
			t.Fatalf("read %x\nencodes to %x", rec, out)
		}
	})
}
