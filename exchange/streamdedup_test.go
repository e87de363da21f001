package exchange

import (
	"errors"
	"github.com/trident-broker/trident/exchange/streamlog"
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
	w, ok := streamlog.DecodeWriter(data)
	if !ok || w != (streamlog.Writer{Ref: "producer-1", Seq: 42, Filter: "eu"}) {
		t.Fatalf("decodeWriter: %+v %v", w, ok)
	}
	got, ts, err := decodeMessage(data)
	if err != nil || ts != 7 || string(got.Body) != "hello" || got.Props.Headers["a"] != "b" || got.writer != nil {
		t.Fatalf("decodeMessage: %+v %d %v", got, ts, err)
	}
	m.SetStreamWriter("", 0)
	if w, ok := streamlog.DecodeWriter(encodeMessage(m, 7, nil)); !ok || w != (streamlog.Writer{Filter: "eu"}) || m.writer.Named() {
		t.Fatalf("a filter value alone: %+v %v", w, ok)
	}
	m.SetStreamFilter("")
	if _, ok := streamlog.DecodeWriter(encodeMessage(m, 7, nil)); ok || m.writer != nil {
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
	if !takeForwardedWriter(in) || in.writer == nil || in.writer.Ref != "p" || in.writer.Seq != 9 {
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

// A standalone stream's segment records carry the producers: after a
// restart a producer is known though retention removed every message of
// it, and the start reads only the records after the last snapshot.
func TestStreamDedupSnapshotSurvivesRetention(t *testing.T) {
	st := newFakeStore()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	q := newStreamQ(t, v, "s", Table{"x-stream-max-segment-size-bytes": int64(500)})
	named := func(v *VHost, id uint64) PublishResult {
		m := &Message{RoutingKey: "s", Body: []byte("named")}
		m.SetStreamWriter("p", id)
		res, err := v.Publish(m, PublishOpts{Queue: "s"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := uint64(1); i <= 50; i++ {
		named(v, i)
	}
	named(v, 20) // a duplicate
	// A snapshot holds what was durable at its roll: the rolls of the
	// next segments come after these are.
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 50 })
	for i := 0; i < 50; i++ {
		publish(t, v, "", "s", "unnamed")
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 100 })

	b2 := newTestBroker(t, st)
	v2 := mustVHost(t, b2, "/")
	q2, err := v2.Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	l2 := q2.st.log
	// The snapshot the start took: the last segment record's.
	segKeys := st.MetaKeys("streamseg/")
	snap, err := st.metaRecord(segKeys[len(segKeys)-1])
	ws, _ := snap["writers"].(Table)
	if wnext, _ := snap["wnext"].(uint64); err != nil || ws == nil || wnext < 50 || ws["p"] != uint64(50) {
		t.Fatalf("the last segment record's snapshot: %+v %v", snap, err)
	}
	gone := l2.Retain(200, 0)
	if err := l2.DropSegments(gone); err != nil {
		t.Fatal(err)
	}
	if first, _ := l2.Bounds(); first <= 50 {
		t.Fatalf("retention kept offset %d", first)
	}

	b3 := newTestBroker(t, st)
	q3, err := mustVHost(t, b3, "/").Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if seq, err := q3.StreamPublisherSequence("p"); err != nil || seq != 50 {
		t.Fatalf("after retention and a restart: %d, %v", seq, err)
	}
	v3 := mustVHost(t, b3, "/")
	named(v3, 50)
	named(v3, 51)
	waitFor(t, "durable", func() bool { return q3.st.log.Durable() == 101 })
	if seq, _ := q3.StreamPublisherSequence("p"); seq != 51 {
		t.Fatalf("sequence %d, want 51", seq)
	}
}

// In a cluster, a stream answers no publisher sequence (and the front end
// sets no producer) until stream_writers is enabled: a node of an older
// release could not read the records.
func TestStreamWritersFeatureFlag(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "s", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream"}})
	q, err := v.Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !v.StreamWritersEnabled() {
		t.Fatal("a node alone: stream writers disabled")
	}
	if _, err := q.StreamPublisherSequence("p"); err != nil {
		t.Fatalf("a node alone: %v", err)
	}
	c := &gatedCluster{fakeCluster: fakeCluster{name: "a"}}
	v.b.SetCluster(c)
	if v.StreamWritersEnabled() {
		t.Fatal("a cluster without the flag: stream writers enabled")
	}
	if _, err := q.StreamPublisherSequence("p"); !errors.Is(err, ErrStreamWritersDisabled) {
		t.Fatalf("a cluster without the flag: %v, want ErrStreamWritersDisabled", err)
	}
	c.on = true
	if !v.StreamWritersEnabled() {
		t.Fatal("the flag enabled: stream writers disabled")
	}
}
