package exchange

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// redeliveredAfterRestart publishes three persistent messages, delivers the
// first one (and requeues it, as a closing channel does), then restarts
// the broker over the same store, cleanly (Close) or not, and returns the
// redelivered flags of the three messages as Get sees them.
func redeliveredAfterRestart(t *testing.T, clean bool) []bool {
	t.Helper()
	st := newFakeStore()
	b := newTestBroker(t, st)
	v := mustVHost(t, b, "/")
	q := declareQ(t, v, "q", QueueOpts{Durable: true})
	for _, body := range []string{"a", "b", "c"} {
		publishM(t, v, &Message{RoutingKey: "q", Body: []byte(body), Props: Properties{DeliveryMode: 2}}, PublishOpts{})
	}
	d, ok := q.Get(false)
	if !ok || string(d.Msg.Body) != "a" || d.Redelivered {
		t.Fatalf("first get: %+v %v", d, ok)
	}
	q.Reject([]uint64{d.Seq}, true)
	if clean {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b2 := newTestBroker(t, st)
	v2 := mustVHost(t, b2, "/")
	q2, err := v2.Queue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	var flags []bool
	for _, want := range []string{"a", "b", "c"} {
		d, ok := q2.Get(true)
		if !ok || string(d.Msg.Body) != want {
			t.Fatalf("after restart: got %q (%v), want %q", d.Msg.Body, ok, want)
		}
		flags = append(flags, d.Redelivered)
	}
	return flags
}

func TestRedeliveredAfterCleanRestart(t *testing.T) {
	got := redeliveredAfterRestart(t, true)
	want := []bool{true, false, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("redelivered flags after a clean restart: got %v, want %v", got, want)
		}
	}
}

func TestRedeliveredAfterCrash(t *testing.T) {
	// Without a clean shutdown nobody knows what was delivered: every
	// recovered message is flagged, the safe answer.
	got := redeliveredAfterRestart(t, false)
	for i, r := range got {
		if !r {
			t.Fatalf("message %d not flagged redelivered after a crash: %v", i, got)
		}
	}
}

func TestCleanMarkerRemovedAtStart(t *testing.T) {
	st := newFakeStore()
	b := newTestBroker(t, st)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	newTestBroker(t, st)
	found := false
	_ = st.LoadMeta(cleanShutdownKey, func(string, []byte) error { found = true; return nil })
	if found {
		t.Fatal("clean-shutdown marker still stored after start: a later crash would pass for a clean stop")
	}
}

// TestDeliveredAllRecord: the one-record form of every queue's delivered
// seqs round-trips, and a damaged record is cut short, never a panic.
func TestDeliveredAllRecord(t *testing.T) {
	var all []byte
	add := func(qid, upto uint64, seqs ...uint64) {
		var rec []byte
		prev := uint64(0)
		for _, s := range seqs {
			rec = binary.AppendUvarint(rec, s-prev)
			prev = s
		}
		all = binary.AppendUvarint(all, qid)
		all = binary.AppendUvarint(all, upto)
		all = binary.AppendUvarint(all, uint64(len(rec)))
		all = append(all, rec...)
	}
	add(7, 0, 3, 9)
	add(8, 500)
	add(1<<40, 12, 1)
	d, u := map[uint64]map[uint64]bool{}, map[uint64]uint64{}
	decodeDeliveredAll(all, d, u)
	if !d[7][3] || !d[7][9] || len(d[7]) != 2 || u[8] != 500 || u[1<<40] != 12 || !d[1<<40][1] {
		t.Fatalf("decoded %v %v", d, u)
	}
	for cut := 0; cut < len(all); cut++ {
		decodeDeliveredAll(all[:cut], map[uint64]map[uint64]bool{}, map[uint64]uint64{})
	}
	decodeDeliveredAll([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, d, u)
	decodeDeliveredAll([]byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, d, u)
}

// FuzzDecodeDelivered: the shutdown records of delivered seqs never panic
// and never allocate much more than their input, whatever is stored.
func FuzzDecodeDelivered(f *testing.F) {
	f.Add([]byte{7, 0, 2, 3, 6})
	f.Add([]byte{8, 0xf4, 3, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, u := map[uint64]map[uint64]bool{}, map[uint64]uint64{}
		decodeDeliveredAll(b, d, u)
		n := 0
		for _, m := range d {
			n += len(m)
		}
		if n > len(b) || len(u) > len(b) {
			t.Fatalf("%d bytes decoded into %d seqs, %d watermarks", len(b), n, len(u))
		}
		_ = decodeDelivered(b)
	})
}

// TestDeliveredPerQueueRecordOfOlderStop: a clean stop of an older version
// wrote one delivered record per queue; a start reads it still.
func TestDeliveredPerQueueRecordOfOlderStop(t *testing.T) {
	st := newFakeStore()
	b1 := newTestBroker(t, st)
	v := mustVHost(t, b1, "/")
	q := declareQ(t, v, "q", QueueOpts{Durable: true})
	for i := 0; i < 3; i++ {
		publishM(t, v, persistent("", "q", body(i)), PublishOpts{})
	}
	// The older shutdown: message seq 2 delivered, the clean marker.
	if err := st.PutMeta(deliveredPrefix+fmt.Sprint(q.id), binary.AppendUvarint(nil, 2)); err != nil {
		t.Fatal(err)
	}
	if err := st.PutMeta(cleanShutdownKey, []byte{1}); err != nil {
		t.Fatal(err)
	}
	b2 := newTestBroker(t, st)
	q2, _ := mustVHost(t, b2, "/").Queue("q", nil)
	for i := 0; i < 3; i++ {
		d, ok := q2.Get(true)
		if !ok || string(d.Msg.Body) != body(i) || d.Redelivered != (i == 1) {
			t.Fatalf("get %d: %v %q redelivered %v", i, ok, d.Msg.Body, d.Redelivered)
		}
	}
}
