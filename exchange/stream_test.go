package exchange

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseStreamDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"7D", 7 * 24 * time.Hour, true},
		{"12h", 12 * time.Hour, true},
		{"30m", 30 * time.Minute, true},
		{"10s", 10 * time.Second, true},
		{"1Y", 365 * 24 * time.Hour, true},
		{"2M", 60 * 24 * time.Hour, true},
		{"0s", 0, true}, // parses; x-max-age refuses it as not positive
		{"10", 0, false},
		{"s", 0, false},
		{"-10m", 0, false},
		{"+10m", 0, false},
		{"10x", 0, false},
		{"1.5h", 0, false},
		{"", 0, false},
		{"99999999999s", 0, false},
	}
	for _, c := range cases {
		got, ok := parseStreamDuration(c.in)
		if ok != c.ok || got != c.want {
			t.Errorf("parseStreamDuration(%q) = %v %v, want %v %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestParseOffsetSpec(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	ts := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		in   any
		want offsetSpec
		bad  string
	}{
		{nil, offsetSpec{kind: offsetNext}, ""},
		{"first", offsetSpec{kind: offsetFirst}, ""},
		{"last", offsetSpec{kind: offsetLast}, ""},
		{"next", offsetSpec{kind: offsetNext}, ""},
		{int64(12), offsetSpec{kind: offsetAt, n: 12}, ""},
		{int16(3), offsetSpec{kind: offsetAt, n: 3}, ""},
		{uint8(0), offsetSpec{kind: offsetAt}, ""},
		{ts, offsetSpec{kind: offsetTime, t: ts.UnixNano()}, ""},
		{"10m", offsetSpec{kind: offsetTime, t: now - int64(10*time.Minute)}, ""},
		{"foo", offsetSpec{}, `{invalid_stream_offset_arg,{longstr,<<"foo">>}}`},
		{int64(-1), offsetSpec{}, "{invalid_stream_offset_arg,{long,-1}}"},
		{int32(-5), offsetSpec{}, "{invalid_stream_offset_arg,{signedint,-5}}"},
		{3.5, offsetSpec{}, "{invalid_stream_offset_arg,{double,3.5}}"},
		{true, offsetSpec{}, "{invalid_stream_offset_arg,{bool,true}}"},
		{[]byte("x"), offsetSpec{}, "{invalid_stream_offset_arg,{binary,[120]}}"},
	}
	for _, c := range cases {
		got, _, err := parseOffsetSpec(c.in, now)
		if c.bad != "" {
			var ae *argError
			if !errors.As(err, &ae) || ae.reason != c.bad {
				t.Errorf("parseOffsetSpec(%#v): %v, want %s", c.in, err, c.bad)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseOffsetSpec(%#v) = %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseStreamArgs(t *testing.T) {
	a, err := parseStreamArgs(Table{"x-queue-type": "stream", "x-max-age": "7D", "x-max-length-bytes": int64(1000),
		"x-stream-max-segment-size-bytes": int32(100), "x-initial-cluster-size": int8(3), "x-foo": 1})
	if err != nil || a.maxAge != 7*24*time.Hour || a.maxBytes != 1000 || a.segBytes != 100 || a.clusterSize != 3 {
		t.Fatalf("%+v %v", a, err)
	}
	if a, _ := parseStreamArgs(Table{}); a.segBytes != defaultSegmentBytes {
		t.Fatalf("default segment size %d", a.segBytes)
	}
	v, _ := newTestVHost(t)
	_, err = v.DeclareQueue("s", QueueOpts{Durable: true, Args: Table{"x-queue-type": "stream", "x-max-age": "7X"}})
	if err == nil || err.(*Error).Text != "invalid arg 'x-max-age' for queue 's' in vhost '/': invalid_max_age" {
		t.Fatalf("bad x-max-age: %v", err)
	}
}

// FuzzParseOffsetSpec: any string offset spec parses or is refused with
// RabbitMQ's form, never panics; an accepted interval lies in the past.
func FuzzParseOffsetSpec(f *testing.F) {
	for _, s := range []string{"first", "last", "next", "10m", "7D", "1Y", "0s", "foo", "-1s", "+1s", "99999999999999999999s", "1\x00s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		now := time.Now().UnixNano()
		o, given, err := parseOffsetSpec(s, now)
		if err != nil {
			var ae *argError
			if !errors.As(err, &ae) || !strings.HasPrefix(ae.reason, "{invalid_stream_offset_arg,{longstr,<<") {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if !given || (o.kind == offsetTime && o.t > now) {
			t.Fatalf("%q: %+v given=%v", s, o, given)
		}
		if d, ok := parseStreamDuration(s); ok && o.t != now-int64(d) {
			t.Fatalf("%q: interval %v, spec %+v", s, d, o)
		}
	})
}

// streamSink records deliveries of a stream consumer.
func newStreamQ(t *testing.T, v *VHost, name string, args Table) *Queue {
	t.Helper()
	a := Table{"x-queue-type": "stream"}
	for k, x := range args {
		a[k] = x
	}
	q := declareQ(t, v, name, QueueOpts{Durable: true, Args: a})
	if !q.IsStream() {
		t.Fatal("not a stream")
	}
	return q
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStreamLogSegmentsAndRecovery: appends roll segments at the size
// limit, reads cross them, a new broker over the same store recovers the
// log with its offsets and timestamps, and a reader is told where to go
// on past segments retention removed.
func TestStreamLogSegmentsAndRecovery(t *testing.T) {
	st := newFakeStore()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	q := newStreamQ(t, v, "s", Table{"x-stream-max-segment-size-bytes": int64(500)})
	for i := 0; i < 100; i++ {
		publish(t, v, "", "s", fmt.Sprintf("m%02d", i))
	}
	l := q.st.log
	waitFor(t, "durable", func() bool { return l.Durable() == 100 })
	msgs, _, segs, fts, lts := l.Stats()
	if msgs != 100 || segs < 5 || fts == 0 || lts < fts {
		t.Fatalf("stats: %d messages, %d segments, ts %d..%d", msgs, segs, fts, lts)
	}
	if got := len(st.MetaKeys("streamseg/")); got != segs {
		t.Fatalf("%d segment records for %d segments", got, segs)
	}
	recs, next, err := l.Read(3, 1000, 1<<20)
	if err != nil || len(recs) != 97 || next != 100 || recs[0].Off != 3 || recs[96].Off != 99 {
		t.Fatalf("read from 3: %d records, next %d, %v", len(recs), next, err)
	}
	for i, r := range recs {
		m, _, err := decodeMessage(r.Data)
		if err != nil || string(m.Body) != fmt.Sprintf("m%02d", i+3) {
			t.Fatalf("record %d: %v %v", r.Off, m, err)
		}
	}
	// Recovery over the same store.
	b2 := newTestBroker(t, st)
	v2, _ := b2.VHost("/")
	q2, err := v2.Queue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	l2 := q2.st.log
	if first, next := l2.Bounds(); first != 0 || next != 100 || l2.Durable() != 100 {
		t.Fatalf("recovered bounds %d..%d durable %d", first, next, l2.Durable())
	}
	if m2, _, s2, f2, t2 := l2.Stats(); m2 != 100 || s2 != segs || f2 != fts || t2 != lts {
		t.Fatalf("recovered stats %d %d %d %d", m2, s2, f2, t2)
	}
	if off := l2.SeekTime(lts + 1); off != 100 {
		t.Fatalf("seek past the end: %d", off)
	}
	if off := l2.SeekTime(0); off != 0 {
		t.Fatalf("seek before the start: %d", off)
	}
	// Retention by bytes drops whole segments; a reader before them goes
	// on at the new first offset.
	gone := l2.Retain(200, 0)
	if len(gone) == 0 {
		t.Fatal("nothing removed")
	}
	if err := l2.DropSegments(gone); err != nil {
		t.Fatal(err)
	}
	first, _ := l2.Bounds()
	if first != gone[len(gone)-1].Next() || first == 0 {
		t.Fatalf("first offset %d after removing up to %d", first, gone[len(gone)-1].Next())
	}
	recs, _, err = l2.Read(0, 1, 1<<20)
	if err != nil || len(recs) != 1 || recs[0].Off != first {
		t.Fatalf("read from 0 after retention: %v %v", recs, err)
	}
	if got := st.TotalMessages(); got != int(100-first) {
		t.Fatalf("%d messages in the store, want %d", got, 100-first)
	}
	// Deleting the stream removes its segments and records.
	if _, err := v2.DeleteQueue("s", false, false, nil); err != nil {
		t.Fatal(err)
	}
	if st.TotalMessages() != 0 || len(st.MetaKeys("streamseg/")) != 0 {
		t.Fatalf("after delete: %d messages, %v", st.TotalMessages(), st.MetaKeys("streamseg/"))
	}
}

// TestStreamConsumerCredit: a consumer gets its prefetch, an ack gives
// credit back; deliveries carry the offset header and settle by cursor.
func TestStreamConsumerCredit(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 10; i++ {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 10 })
	_, s1 := consume(t, v, "s", ConsumeOpts{Prefetch: 3, Args: Table{"x-stream-offset": "first"}})
	_, s2 := consume(t, v, "s", ConsumeOpts{Prefetch: 3, Args: Table{"x-stream-offset": int64(5)}})
	waitFor(t, "prefetch", func() bool { return s1.len() == 3 && s2.len() == 3 })
	time.Sleep(20 * time.Millisecond)
	if s1.len() != 3 {
		t.Fatalf("%d deliveries past prefetch 3", s1.len())
	}
	d := s1.deliveries()
	if d[0].Msg.Props.Headers["x-stream-offset"] != int64(0) || s2.deliveries()[0].Msg.Props.Headers["x-stream-offset"] != int64(5) {
		t.Fatalf("offset headers %v %v", d[0].Msg.Props.Headers, s2.deliveries()[0].Msg.Props.Headers)
	}
	q.AckMany([]uint64{d[0].Seq, d[1].Seq})
	waitFor(t, "credit back", func() bool { return s1.len() == 5 })
	if r, u, c := q.Stats(); r != 10 || u != 6 || c != 2 {
		t.Fatalf("stats %d %d %d", r, u, c)
	}
	if fmt.Sprint(s1.bodies()) != "[0 1 2 3 4]" || fmt.Sprint(s2.bodies()) != "[5 6 7]" {
		t.Fatalf("bodies %v %v", s1.bodies(), s2.bodies())
	}
	if _, err := v.Consume("s", ConsumeOpts{NoAck: true, Prefetch: 1, Sink: &sink{}}); KindOf(err) != KindNotImplemented {
		t.Fatalf("no-ack consume: %v", err)
	}
	if _, err := v.Consume("s", ConsumeOpts{Sink: &sink{}}); KindOf(err) != KindPreconditionFailed {
		t.Fatalf("consume without prefetch: %v", err)
	}
	if _, err := v.PurgeQueue("s", nil); KindOf(err) != KindNotImplemented {
		t.Fatalf("purge: %v", err)
	}
	// Deleting the stream cancels its consumers.
	if _, err := v.DeleteQueue("s", false, false, nil); err != nil {
		t.Fatal(err)
	}
	if s1.cancels() != 1 || s2.cancels() != 1 {
		t.Fatalf("cancels %d %d", s1.cancels(), s2.cancels())
	}
}

// TestStreamNoOffsetHeader: a consumer that reads offsets from its
// deliveries (the stream protocol) gets the messages as they were
// published, without an x-stream-offset header made for each, and
// StreamOffset gives every delivery's offset; a consumer without the
// option gets the header, with the same offset.
func TestStreamNoOffsetHeader(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 6; i++ {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 6 })
	_, raw := consume(t, v, "s", ConsumeOpts{Prefetch: 10, NoOffsetHeader: true, Args: Table{"x-stream-offset": int64(2)}})
	_, hdr := consume(t, v, "s", ConsumeOpts{Prefetch: 10, Args: Table{"x-stream-offset": int64(2)}})
	waitFor(t, "deliveries", func() bool { return raw.len() == 4 && hdr.len() == 4 })
	for i, d := range raw.deliveries() {
		if _, ok := d.Msg.Props.Headers["x-stream-offset"]; ok {
			t.Fatalf("delivery %d carries an x-stream-offset header: %v", i, d.Msg.Props.Headers)
		}
		if off, ok := StreamOffset(d); !ok || off != uint64(2+i) {
			t.Fatalf("delivery %d: StreamOffset %d %v, want %d", i, off, ok, 2+i)
		}
	}
	for i, d := range hdr.deliveries() {
		off, ok := StreamOffset(d)
		if d.Msg.Props.Headers["x-stream-offset"] != int64(2+i) || !ok || off != uint64(2+i) {
			t.Fatalf("delivery %d: header %v, StreamOffset %d %v", i, d.Msg.Props.Headers, off, ok)
		}
	}
	cq := declareQ(t, v, "classic", QueueOpts{})
	if _, ok := StreamOffset(Delivery{Queue: cq, Seq: 7}); ok {
		t.Fatal("StreamOffset of a classic queue's delivery")
	}
}
