package store_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// ReadRecords reads what ReadMessages reads (the queued appends and
// deletes too), record by record, and stops where fn says.
func TestBadgerReadRecords(t *testing.T) {
	s := openBadger(t, t.TempDir())
	defer s.Close()
	val := func(seq uint64) []byte { return bytes.Repeat(fmt.Appendf(nil, "%d;", seq), 2000) }
	type rec struct {
		seq  uint64
		data string
	}
	collect := func(read func(qid, from uint64, fn func(uint64, []byte) bool) error, from uint64, stop int) []rec {
		t.Helper()
		var out []rec
		if err := read(7, from, func(seq uint64, data []byte) bool {
			out = append(out, rec{seq, string(data)})
			return len(out) < stop
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	check := func(what string, from uint64, want ...uint64) {
		t.Helper()
		got := collect(s.ReadRecords, from, 100)
		if fmt.Sprint(got) != fmt.Sprint(collect(s.ReadMessages, from, 100)) {
			t.Fatalf("%s: ReadRecords and ReadMessages differ", what)
		}
		if len(got) != len(want) {
			t.Fatalf("%s from %d: %d records, want %v", what, from, len(got), want)
		}
		for i, r := range got {
			if r.seq != want[i] || r.data != string(val(want[i])) {
				t.Fatalf("%s from %d: record %d is %d, want %d", what, from, i, r.seq, want[i])
			}
		}
		if one := collect(s.ReadRecords, from, 1); len(want) > 0 && (len(one) != 1 || one[0].seq != want[0]) {
			t.Fatalf("%s from %d: a read that stops after one got %d", what, from, len(one))
		}
	}
	var wg sync.WaitGroup
	for _, seq := range []uint64{0, 256, 512} {
		wg.Add(1)
		s.AppendMessage(7, seq, val(seq), func(err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	check("queued", 0, 0, 256, 512) // possibly still queued for the writer
	wg.Wait()
	check("durable", 0, 0, 256, 512)
	check("durable", 300, 512)
	s.DeleteMessage(7, 256)
	check("a queued delete", 1, 512)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	check("deleted", 0, 0, 512)
}
