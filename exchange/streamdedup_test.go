package exchange

import (
	"errors"
	"sync"
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

// gateLog is a clustered stream's group that commits only when told: an
// append reaches the leader's store and its done callback at release.
type gateLog struct {
	st *fakeStore
	mu sync.Mutex
	q  []gated
}

type gated struct {
	seq  uint64
	data []byte
	done func(error)
}

func (g *gateLog) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	g.mu.Lock()
	g.q = append(g.q, gated{seq, append([]byte(nil), data...), done})
	g.mu.Unlock()
}

func (g *gateLog) DeleteMessage(qid, seq uint64) {}

// release commits the queued appends (err nil) or fails them.
func (g *gateLog) release(err error) {
	g.mu.Lock()
	q := g.q
	g.q = nil
	g.mu.Unlock()
	for _, a := range q {
		if err == nil {
			g.st.AppendMessage(9, a.seq, a.data, nil)
		}
		a.done(err)
	}
}

// publish is what stream.enqueue does with a named producer's message on
// the log's owner: it reports whether the message was appended; done is
// its confirm.
func dedupPublish(t *testing.T, l *streamLog, ref string, seq uint64, done func(error)) bool {
	t.Helper()
	m := &Message{RoutingKey: "s", Body: []byte("x")}
	m.SetStreamWriter(ref, seq)
	l.mu.Lock()
	if l.duplicateLocked(m.writer) {
		l.afterTailLocked(done)
		l.mu.Unlock()
		l.fireWaiters(nil)
		return false
	}
	if _, err := l.appendLocked(encodeMessage(m, 1, nil), 1, 1<<30, m.writer, done); err != nil {
		t.Fatal(err)
	}
	l.noteWriterLocked(m.writer)
	l.mu.Unlock()
	return true
}

// A duplicate is confirmed only once its first copy is durable (and
// fails with it); a leader that stops leading forgets what its group did
// not commit and rebuilds from its store.
func TestStreamDedupConfirmsAfterFirstCopy(t *testing.T) {
	st := newFakeStore()
	g := &gateLog{st: st}
	l := &streamLog{st: st, newID: func() uint64 { panic("no segment ids") }, prefix: "streamseg/t\x00s\x00"}
	l.enterReplicated(9, 1<<30)
	l.ml = g

	var first, dup error = errors.New("not called"), errors.New("not called")
	if !dedupPublish(t, l, "p", 1, func(err error) { first = err }) {
		t.Fatal("first copy not appended")
	}
	if dedupPublish(t, l, "p", 1, func(err error) { dup = err }) {
		t.Fatal("a resend appended again")
	}
	if dup == nil {
		t.Fatal("the duplicate was confirmed before its first copy was durable")
	}
	g.release(nil)
	if first != nil || dup != nil {
		t.Fatalf("after the commit: first %v, duplicate %v", first, dup)
	}

	// A resend of an id whose first copy fails fails with it.
	dedupPublish(t, l, "p", 2, func(error) {})
	dup = errors.New("not called")
	dedupPublish(t, l, "p", 2, func(err error) { dup = err })
	g.release(errLost)
	if !errors.Is(dup, errLost) {
		t.Fatalf("duplicate of a failed append: %v", dup)
	}

	// The node stops leading: id 2 never reached its store, id 1 did.
	l.mu.Lock()
	l.ml = nil
	l.forgetWritersLocked()
	l.mu.Unlock()
	if seq, err := l.writerSeq("p"); err != nil || seq != 1 {
		t.Fatalf("a follower's sequence: %d %v", seq, err)
	}
	// It leads again: 2 is not a duplicate, 1 is.
	l.mu.Lock()
	l.ml = g
	l.mu.Unlock()
	if !dedupPublish(t, l, "p", 2, func(error) {}) || dedupPublish(t, l, "p", 1, func(error) {}) {
		t.Fatal("after a change of leader the table is not the store's")
	}
	g.release(nil)
	if seq, err := l.writerSeq("p"); err != nil || seq != 2 {
		t.Fatalf("sequence: %d %v", seq, err)
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
	waitFor(t, "durable", func() bool { return q.st.log.durable.Load() == 50 })
	for i := 0; i < 50; i++ {
		publish(t, v, "", "s", "unnamed")
	}
	waitFor(t, "durable", func() bool { return q.st.log.durable.Load() == 100 })

	b2 := newTestBroker(t, st)
	v2 := mustVHost(t, b2, "/")
	q2, err := v2.Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	l2 := q2.st.log
	if l2.snap == nil || l2.snap.next < 50 || l2.snap.seqs["p"] != 50 {
		t.Fatalf("the last segment record's snapshot: %+v", l2.snap)
	}
	gone := l2.retain(200, 0)
	if err := l2.dropSegments(gone); err != nil {
		t.Fatal(err)
	}
	if first, _ := l2.bounds(); first <= 50 {
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
	waitFor(t, "durable", func() bool { return q3.st.log.durable.Load() == 101 })
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
