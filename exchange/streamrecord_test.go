package exchange

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// genStr is empty, short, or past 127 bytes (a two-byte length).
func genStr(r *rand.Rand) string {
	switch r.Intn(4) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("é", 70+r.Intn(100))
	}
	return fmt.Sprintf("s%d", r.Intn(1000))
}

// genValue is a header value of any kind the core stores.
func genValue(r *rand.Rand, depth int) any {
	kinds := 21
	if depth > 2 {
		kinds = 18 // no more nesting
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
		return []float64{r.NormFloat64(), math.NaN(), math.Inf(-1), 0}[r.Intn(4)]
	case 12:
		return genStr(r)
	case 13:
		return []byte(genStr(r))
	case 14:
		return time.Unix(r.Int63n(1<<34)-1<<33, 0)
	case 15:
		return int(r.Int63())
	case 16:
		return uint(r.Uint64())
	case 17:
		return Decimal{Scale: uint8(r.Intn(256)), Value: int32(r.Uint32())}
	case 18:
		a := make([]any, r.Intn(3))
		for i := range a {
			a[i] = genValue(r, depth+1)
		}
		return a
	case 19:
		return genTable(r, depth+1)
	}
	return []any{}
}

// headerKeys are the keys the stream protocol maps specially, and others.
var headerKeys = []string{"", "a", "b", "x-stream-offset", "x-amqp-subject", "x-amqp-to",
	"x-amqp-group-id", "x-", "x-foo", "x-opt-z", "zz", "é"}

func genTable(r *rand.Rand, depth int) Table {
	t := Table{}
	for range r.Intn(5) {
		k := headerKeys[r.Intn(len(headerKeys))]
		if r.Intn(3) == 0 {
			k = genStr(r)
		}
		if strings.HasPrefix(k, "x-amqp") && r.Intn(2) == 0 {
			t[k] = genStr(r) // mostly the string they should be
		} else {
			t[k] = genValue(r, depth)
		}
	}
	return t
}

// genMessage is a message with every property absent, empty or set, and
// headers absent, empty or of every kind of value.
func genMessage(r *rand.Rand) *Message {
	m := &Message{Exchange: genStr(r), RoutingKey: genStr(r), Body: []byte(genStr(r))}
	p := &m.Props
	p.ContentType, p.ContentEncoding = genStr(r), genStr(r)
	switch r.Intn(3) {
	case 1:
		p.Headers = Table{}
	case 2:
		p.Headers = genTable(r, 0)
	}
	p.DeliveryMode, p.Priority = uint8(r.Intn(3)), uint8(r.Intn(12))
	p.CorrelationID, p.ReplyTo, p.MessageID = genStr(r), genStr(r), genStr(r)
	p.Expiration = []string{"", "1000", "-5", "x", "99999999999999999999", "+7"}[r.Intn(6)]
	if r.Intn(2) == 0 {
		p.Timestamp = time.Unix(r.Int63n(1<<34)-1<<33, 0)
	}
	p.Type, p.UserID, p.AppID = genStr(r), genStr(r), genStr(r)
	m.expiresAt = r.Int63()
	if r.Intn(3) == 0 {
		m.writer = &streamlog.Writer{Ref: genStr(r), Seq: r.Uint64(), Filter: genStr(r)}
	}
	return m
}

// checkView compares the view of rec with what decodeMessage makes of it.
func checkView(t *testing.T, rec []byte) {
	t.Helper()
	m, ts, derr := decodeMessage(rec)
	var v StoredMessage
	sorted, verr := viewMessage(&v, rec)
	if (derr == nil) != (verr == nil) {
		t.Fatalf("decode: %v, view: %v (record %x)", derr, verr, rec)
	}
	if derr != nil {
		return
	}
	p := &m.Props
	for _, f := range []struct {
		name string
		got  []byte
		want string
	}{
		{"exchange", v.Exchange, m.Exchange}, {"routing key", v.RoutingKey, m.RoutingKey},
		{"content type", v.ContentType, p.ContentType}, {"content encoding", v.ContentEncoding, p.ContentEncoding},
		{"correlation id", v.CorrelationID, p.CorrelationID}, {"reply to", v.ReplyTo, p.ReplyTo},
		{"expiration", v.Expiration, p.Expiration}, {"message id", v.MessageID, p.MessageID},
		{"type", v.Type, p.Type}, {"user id", v.UserID, p.UserID}, {"app id", v.AppID, p.AppID},
		{"body", v.Body, string(m.Body)},
	} {
		if string(f.got) != f.want {
			t.Fatalf("%s: view %q, decoded %q", f.name, f.got, f.want)
		}
	}
	if v.DeliveryMode != p.DeliveryMode || v.Priority != p.Priority || !v.Timestamp.Equal(p.Timestamp) ||
		v.Timestamp.IsZero() != p.Timestamp.IsZero() || v.EnqueuedAt != ts || v.ExpiresAt != m.expiresAt {
		t.Fatalf("view %+v, decoded %+v", v, m)
	}
	if v.HasHeaders() != (p.Headers != nil) {
		t.Fatalf("view has headers %v, decoded %v", v.HasHeaders(), p.Headers)
	}
	got := Table{}
	var keys []string
	for e := v.Headers(); e.Next(); {
		keys = append(keys, string(e.Key()))
		got[string(e.Key())] = e.Value().Decode()
	}
	if !sorted {
		return // a key twice: the map keeps one of them
	}
	if len(keys) != len(p.Headers) || (len(keys) > 0 && !reflect.DeepEqual(got, p.Headers) && !hasNaN(p.Headers)) {
		t.Fatalf("view's headers %v, decoded %v", got, p.Headers)
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Fatalf("keys %q not ascending", keys)
		}
	}
}

func hasNaN(t Table) bool { return strings.Contains(fmt.Sprint(t), "NaN") }

// TestViewStoredMessage: the in-place view of a stored record has the
// fields decodeMessage gives, for messages with every property and kind
// of header absent, empty and set, in both record versions.
func TestViewStoredMessage(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for range 3000 {
		checkView(t, encodeMessage(genMessage(r), r.Int63(), nil))
	}
	// Records no encoder writes: corrupt, cut short, a key twice.
	rec := encodeMessage(&Message{Props: Properties{Headers: Table{"a": "1", "b": "2"}}}, 1, nil)
	for i := range rec {
		checkView(t, rec[:i])
	}
	twice := bytes.Replace(rec, []byte("\x01bS\x012"), []byte("\x01aS\x012"), 1)
	if sorted, err := viewMessage(new(StoredMessage), twice); err != nil || sorted {
		t.Fatalf("a key twice: sorted %v, err %v", sorted, err)
	}
	if _, err := ViewStoredMessage(twice); err == nil {
		t.Fatal("ViewStoredMessage took a record with a key twice")
	}
	if _, err := ViewStoredMessage(rec[:len(rec)-1]); err == nil {
		t.Fatal("ViewStoredMessage took a cut record")
	}
}

// FuzzViewStoredMessage: for any bytes, the view refuses what
// decodeMessage refuses and otherwise reads the same fields.
func FuzzViewStoredMessage(f *testing.F) {
	r := rand.New(rand.NewSource(2))
	for range 50 {
		f.Add(encodeMessage(genMessage(r), r.Int63(), nil))
	}
	f.Add([]byte{})
	f.Add([]byte{3})
	f.Fuzz(func(t *testing.T, rec []byte) { checkView(t, rec) })
}

// runSink is a sink that takes runs of stored records (RunSink).
type runSink struct {
	sink
	runs []RecordRun
	nrec int
}

func (s *runSink) DeliverRun(r RecordRun) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, r)
	s.nrec += len(r.Recs)
	return !s.pause
}

func (s *runSink) records() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nrec
}

func (s *runSink) taken() []RecordRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecordRun(nil), s.runs...)
}

func consumeRuns(t *testing.T, v *VHost, prefetch int, from any) (*Consumer, *runSink) {
	t.Helper()
	s := &runSink{}
	c, _ := consume(t, v, "s", ConsumeOpts{Prefetch: prefetch, Sink: s, StoredRuns: true,
		Args: Table{"x-stream-offset": from}})
	return c, s
}

// TestStreamStoredRuns: a consumer that asks for stored runs gets what the
// cursor read as runs of the records the log holds, unchecked (a corrupt
// record and one with a key twice come as they are: the front end reads
// them), within its prefetch; SettleRun gives the credit back and moves a
// named consumer's offset; a run alone is shared with nobody.
func TestStreamStoredRuns(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	good := encodeMessage(&Message{RoutingKey: "s", Props: Properties{Headers: Table{"a": "1", "b": "2"}}, Body: []byte("m")}, 1, nil)
	twice := bytes.Replace(good, []byte("\x01bS\x012"), []byte("\x01aS\x012"), 1)
	recs := [][]byte{good, {9, 9}, twice, good, good}
	for i, rec := range recs {
		q.st.enqueue(&Message{RoutingKey: "s"}, rec, nil, int64(i+1), nil)
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == uint64(len(recs)) })
	s := &runSink{}
	c, _ := consume(t, v, "s", ConsumeOpts{Prefetch: 3, Sink: s, StoredRuns: true,
		Args: Table{"x-stream-offset": "first", "x-stream-consumer-name": "r"}})
	waitFor(t, "a run", func() bool { return s.records() == 3 })
	time.Sleep(20 * time.Millisecond)
	runs := s.taken()
	if len(runs) != 1 || len(runs[0].Recs) != 3 || s.len() != 0 {
		t.Fatalf("%d runs (%d records), %d messages; want one run of 3 (the prefetch)", len(runs), s.records(), s.len())
	}
	r := runs[0]
	for i, rec := range r.Recs {
		if rec.Off != uint64(i) || !bytes.Equal(rec.Data, recs[i]) {
			t.Fatalf("record %d: offset %d %x, want %x", i, rec.Off, rec.Data, recs[i])
		}
	}
	if r.Shared != nil || r.Queue != q || r.Consumer != c {
		t.Fatalf("run %+v", r)
	}
	if off, _ := StreamOffset(Delivery{Queue: q, Seq: r.Seq}); off != 2 {
		t.Fatalf("the run's handle is at offset %d, want 2", off)
	}
	if q.Status().Unacked != 3 {
		t.Fatalf("unacked %d, want 3", q.Status().Unacked)
	}
	q.SettleRun(r.SeqOf(1), 2) // a part first
	waitFor(t, "the rest", func() bool { return s.records() == 5 })
	if got := s.taken()[1]; len(got.Recs) != 2 || got.Recs[0].Off != 3 {
		t.Fatalf("second run %+v", got)
	}
	if no, ok := q.StreamOffset("r"); !ok || no != 1 {
		t.Fatalf("named offset %d %v after settling to offset 1", no, ok)
	}
	q.SettleRun(r.Seq, 1)
	q.SettleRun(s.taken()[1].Seq, 2)
	if q.Status().Unacked != 0 {
		t.Fatalf("unacked %d after settling everything", q.Status().Unacked)
	}
	if no, _ := q.StreamOffset("r"); no != 4 {
		t.Fatalf("named offset %d, want 4", no)
	}
	q.NoteUnreadable(1)
	if bad := v.b.UnreadableMessages(); bad["//s"] != 1 {
		t.Fatalf("unreadable %v", bad)
	}
	c.Cancel()
}

// TestStreamRunsShared: readers of runs reading the same stretch share one
// SharedRun per run (the same for each reader, another for each run);
// nothing is shared while one reads alone.
func TestStreamRunsShared(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	const n = 3*runRecs + 10
	for i := range n {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == n })
	_, alone := consumeRuns(t, v, n, "first")
	waitFor(t, "the reader alone", func() bool { return alone.records() == n })
	for _, r := range alone.taken() {
		if r.Shared != nil {
			t.Fatal("a run shared by one reader")
		}
	}
	_, a := consumeRuns(t, v, n, "first")
	_, b := consumeRuns(t, v, n, "first")
	waitFor(t, "two readers", func() bool { return a.records() == n && b.records() == n })
	byFirst := func(s *runSink) map[uint64]RecordRun {
		m := map[uint64]RecordRun{}
		for _, r := range s.taken() {
			m[r.Recs[0].Off] = r
		}
		return m
	}
	ra, rb := byFirst(a), byFirst(b)
	shared := map[*SharedRun]bool{}
	for first, r := range ra {
		if r.Shared == nil {
			t.Fatalf("run at %d of %d records not shared", first, len(r.Recs))
		}
		if rb[first].Shared != r.Shared {
			t.Fatalf("the run at %d is shared by one reader and not the other", first)
		}
		if shared[r.Shared] {
			t.Fatal("two stretches share one SharedRun")
		}
		shared[r.Shared] = true
	}
	if len(shared) != 4 {
		t.Fatalf("%d runs shared, want 4", len(shared))
	}
}
