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
	v, sorted, verr := viewMessage(rec)
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
	if _, sorted, err := viewMessage(twice); err != nil || sorted {
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

// TestStreamStoredRecords: a consumer that asks for stored records and
// reads alone gets each message as its record (Msg nil), the bytes the
// log holds; a corrupt record is skipped and counted as it is for every
// consumer; a record with a header key twice comes decoded; while two or
// more read, each record comes with what they share of it (where a front
// end caches its encoding), one per offset.
func TestStreamStoredRecords(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	good := encodeMessage(&Message{RoutingKey: "s", Props: Properties{Headers: Table{"a": "1", "b": "2"}}, Body: []byte("m")}, 1, nil)
	twice := bytes.Replace(good, []byte("\x01bS\x012"), []byte("\x01aS\x012"), 1)
	for i, rec := range [][]byte{good, {9, 9}, twice, good} {
		q.st.enqueue(&Message{RoutingKey: "s"}, rec, nil, int64(i+1), nil)
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 4 })
	c, s := consume(t, v, "s", ConsumeOpts{Prefetch: 10, NoOffsetHeader: true, StoredRecords: true, Args: Table{"x-stream-offset": "first"}})
	waitFor(t, "deliveries", func() bool { return s.len() == 3 })
	ds := s.deliveries()
	for i, want := range []uint64{0, 2, 3} {
		if off, _ := StreamOffset(ds[i]); off != want {
			t.Fatalf("delivery %d at offset %d, want %d", i, off, want)
		}
	}
	if ds[0].Msg != nil || !bytes.Equal(ds[0].Record, good) || ds[2].Msg != nil || !bytes.Equal(ds[2].Record, good) {
		t.Fatalf("deliveries of good records: %+v %+v", ds[0], ds[2])
	}
	if ds[1].Record != nil || ds[1].Msg == nil || ds[1].Msg.Props.Headers["a"] != "2" {
		t.Fatalf("the record with a key twice: %+v", ds[1])
	}
	if bad := v.b.UnreadableMessages(); bad["//s"] != 1 {
		t.Fatalf("unreadable %v", bad)
	}
	// Two more readers (three read): they get the records with what they
	// share of each, one per offset; the record with a key twice decoded.
	q.AckMany([]uint64{ds[0].Seq, ds[1].Seq, ds[2].Seq})
	_, s2 := consume(t, v, "s", ConsumeOpts{Prefetch: 10, NoOffsetHeader: true, StoredRecords: true, Args: Table{"x-stream-offset": "first"}})
	_, s3 := consume(t, v, "s", ConsumeOpts{Prefetch: 10, NoOffsetHeader: true, StoredRecords: true, Args: Table{"x-stream-offset": "first"}})
	waitFor(t, "the other readers", func() bool { return s2.len() == 3 && s3.len() == 3 })
	d2, d3 := s2.deliveries(), s3.deliveries()
	for _, i := range []int{0, 2} {
		if d2[i].Shared == nil || d2[i].Shared != d3[i].Shared || !bytes.Equal(d2[i].Record, good) || d2[i].Msg != nil {
			t.Fatalf("delivery %d: %+v and %+v, want one shared record", i, d2[i], d3[i])
		}
	}
	if d2[0].Shared == d2[2].Shared {
		t.Fatal("two offsets share one record")
	}
	if d2[1].Msg == nil || d2[1].Record != nil || d2[1].Shared != nil {
		t.Fatalf("the record with a key twice: %+v", d2[1])
	}
	c.Cancel()
}

// TestStreamRecordsShareOnlyWhenFound: two readers of stored records, one
// of them stalled: what the other puts in the ring is never found again,
// so after a window it shares only one record in shareSample (each
// encoded in place, not made to be kept); once the stalled one reads the
// same stretch again with it, sharing pays and resumes for every record.
func TestStreamRecordsShareOnlyWhenFound(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	const n = 3 * shareWindow
	for i := range n {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == n })
	stalled := &sink{pause: true}
	consume(t, v, "s", ConsumeOpts{Prefetch: 1, Sink: stalled, NoOffsetHeader: true, StoredRecords: true,
		Args: Table{"x-stream-offset": "next"}})
	_, s := consume(t, v, "s", ConsumeOpts{Prefetch: n, NoOffsetHeader: true, StoredRecords: true, Args: Table{"x-stream-offset": "first"}})
	waitFor(t, "deliveries", func() bool { return s.len() == n })
	shared := 0
	for _, d := range s.deliveries()[2*shareWindow:] {
		if d.Shared != nil {
			shared++
			if off, _ := StreamOffset(d); off%shareSample != 0 {
				t.Fatalf("offset %d shared while sharing does not pay", off)
			}
		}
	}
	if shared == 0 || shared > shareWindow/shareSample {
		t.Fatalf("%d of the last %d records shared, want 1 in %d", shared, shareWindow, shareSample)
	}
	// Two readers in step: what one puts the other finds, and every
	// record is shared again.
	const prefetch = 512
	var ss []*sink
	for range 2 {
		_, x := consume(t, v, "s", ConsumeOpts{Prefetch: prefetch, NoOffsetHeader: true, StoredRecords: true,
			Args: Table{"x-stream-offset": "first"}})
		ss = append(ss, x)
	}
	for got := prefetch; ; got += prefetch {
		waitFor(t, "a round", func() bool { return ss[0].len() == got && ss[1].len() == got })
		if got == n {
			break
		}
		for _, x := range ss {
			var seqs []uint64
			for _, d := range x.deliveries()[got-prefetch : got] {
				seqs = append(seqs, d.Seq)
			}
			q.AckMany(seqs)
		}
	}
	found := 0
	d0, d1 := ss[0].deliveries(), ss[1].deliveries()
	for i := n - shareWindow; i < n; i++ {
		if d0[i].Shared != nil && d0[i].Shared == d1[i].Shared {
			found++
		}
	}
	if found < shareWindow/2 {
		t.Fatalf("%d of the last %d records shared by the readers in step", found, shareWindow)
	}
}
