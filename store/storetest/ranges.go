package storetest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trident-broker/trident/exchange"
)

// readAll collects ReadMessages and MessageKeys of qid from seq from on,
// stopping after max messages (0: all).
func readAll(t testing.TB, s exchange.Store, qid, from uint64, max int) (msgs []msg, keys []uint64) {
	t.Helper()
	must(t, s.ReadMessages(qid, from, func(seq uint64, data []byte) bool {
		msgs = append(msgs, msg{seq, string(data)})
		return max == 0 || len(msgs) < max
	}))
	must(t, s.MessageKeys(qid, from, func(seq uint64, size int64) bool {
		if size <= 0 {
			t.Errorf("MessageKeys: size %d of seq %d", size, seq)
		}
		keys = append(keys, seq)
		return max == 0 || len(keys) < max
	}))
	return msgs, keys
}

func testReadRange(t *testing.T, s exchange.Store) {
	for seq := uint64(1); seq <= 20; seq++ {
		appendSync(t, s, 7, seq*10, fmt.Sprintf("m%d", seq))
	}
	appendSync(t, s, 8, 5, "other queue")
	s.DeleteMessage(7, 50)
	must(t, s.Sync())
	msgs, keys := readAll(t, s, 7, 41, 3)
	eqMsgs(t, "ReadMessages from 41, 3", msgs, []msg{{60, "m6"}, {70, "m7"}, {80, "m8"}})
	if fmt.Sprint(keys) != "[60 70 80]" {
		t.Fatalf("MessageKeys from 41, 3: %v", keys)
	}
	msgs, keys = readAll(t, s, 7, 181, 0)
	eqMsgs(t, "ReadMessages to the end", msgs, []msg{{190, "m19"}, {200, "m20"}})
	if len(keys) != 2 {
		t.Fatalf("MessageKeys to the end: %v", keys)
	}
	if msgs, keys := readAll(t, s, 9, 0, 0); len(msgs)+len(keys) != 0 {
		t.Fatalf("empty queue read %v %v", msgs, keys)
	}
}

// testReadSeesQueued: a read sees appends and deletes issued before it,
// whether or not the writer has written them yet.
func testReadSeesQueued(t *testing.T, s exchange.Store) {
	big := strings.Repeat("x", 2000) // past the value threshold
	var want []msg
	for seq := uint64(1); seq <= 2000; seq++ {
		body := fmt.Sprintf("%d%s", seq, big)
		s.AppendMessage(3, seq, []byte(body), nil)
		if seq%3 == 0 {
			s.DeleteMessage(3, seq)
		} else {
			want = append(want, msg{seq, body})
		}
		if seq%250 == 0 {
			msgs, keys := readAll(t, s, 3, 1, 0)
			if len(msgs) != len(want) || len(keys) != len(want) {
				t.Fatalf("after %d appends: read %d messages, %d keys, want %d", seq, len(msgs), len(keys), len(want))
			}
			eqMsgs(t, "read while queued", msgs, want)
		}
	}
	must(t, s.Sync())
	msgs, _ := readAll(t, s, 3, 1, 0)
	eqMsgs(t, "read after sync", msgs, want)
}

// testDeleteRange: DeleteMessages removes [from, to) of one queue and
// nothing else; empty and absent ranges change nothing.
func testDeleteRange(t *testing.T, s exchange.Store) {
	for seq := uint64(0); seq < 100; seq++ {
		appendSync(t, s, 4, seq, fmt.Sprint(seq))
		appendSync(t, s, 5, seq, "other")
	}
	s.DeleteMessages(4, 10, 40)
	s.DeleteMessages(4, 60, 60)   // empty
	s.DeleteMessages(4, 70, 65)   // empty (to before from)
	s.DeleteMessages(4, 500, 900) // nothing there
	s.DeleteMessages(9, 0, 100)   // absent queue
	must(t, s.Sync())
	var want []msg
	for seq := uint64(0); seq < 100; seq++ {
		if seq < 10 || seq >= 40 {
			want = append(want, msg{seq, fmt.Sprint(seq)})
		}
	}
	eqMsgs(t, "after range delete", loadMsgs(t, s, 4), want)
	if n := len(loadMsgs(t, s, 5)); n != 100 {
		t.Fatalf("other queue has %d messages, want 100", n)
	}
	s.DeleteMessages(4, 0, 1<<64-1)
	must(t, s.Sync())
	eqMsgs(t, "after deleting [0, max)", loadMsgs(t, s, 4), nil)
}

// testDeleteRangeQueued: a range delete applies after the appends and
// deletes issued before it and before those issued after it, unsynced
// in between, and reads see it while it is queued.
func testDeleteRangeQueued(t *testing.T, s exchange.Store) {
	big := strings.Repeat("y", 1000) // past the value threshold
	for seq := uint64(0); seq < 50; seq++ {
		appendSync(t, s, 6, seq, fmt.Sprint(seq, big))
	}
	for round := uint64(0); round < 20; round++ {
		lo := 50 + round*100
		for seq := lo; seq < lo+100; seq++ {
			s.AppendMessage(6, seq, []byte(fmt.Sprint(seq, big)), nil)
		}
		// Everything below lo+50 goes; then lo+10 is appended again.
		s.DeleteMessages(6, 0, lo+50)
		s.AppendMessage(6, lo+10, []byte("again"), nil)
		s.DeleteMessage(6, lo+60)
		want := []msg{{lo + 10, "again"}}
		for seq := lo + 50; seq < lo+100; seq++ {
			if seq != lo+60 {
				want = append(want, msg{seq, fmt.Sprint(seq, big)})
			}
		}
		msgs, keys := readAll(t, s, 6, 0, 0)
		eqMsgs(t, fmt.Sprintf("round %d, read while queued", round), msgs, want)
		if len(keys) != len(want) {
			t.Fatalf("round %d: %d keys, want %d", round, len(keys), len(want))
		}
		if round%5 == 4 {
			must(t, s.Sync())
			eqMsgs(t, fmt.Sprintf("round %d, after sync", round), loadMsgs(t, s, 6), want)
		}
		// The next round's range removes this round's survivors.
	}
}

// testPutDeleteRangeStored: messages stored already and written again
// with PutMessage (a replicated log applied again after a crash), then
// removed by a range delete in the same batch, are gone from the disk.
func testPutDeleteRangeStored(t *testing.T, s exchange.Store) {
	const n = 2000
	for i := range uint64(n) {
		s.AppendMessage(7, i, []byte("stored"), nil)
	}
	must(t, s.Sync())
	var ok atomic.Int64
	for i := range uint64(n) {
		s.PutMessage(7, i, []byte("stored"), func(err error) {
			if err == nil {
				ok.Add(1)
			}
		})
		if i%100 == 99 {
			s.DeleteMessages(7, i-99, i+1)
		}
	}
	s.PutMessage(7, n, []byte("kept"), nil)
	must(t, s.Sync())
	if ok.Load() != n {
		t.Fatalf("%d of %d puts got done(nil)", ok.Load(), n)
	}
	eqMsgs(t, "after put+range delete of stored messages", loadMsgs(t, s, 7), []msg{{n, "kept"}})
}
