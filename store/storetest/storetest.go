// Package storetest is the conformance suite every exchange.Store passes, and
// the benchmarks every store engine is measured with.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// Run runs the conformance suite. open returns a fresh, empty store; the
// suite closes it.
func Run(t *testing.T, open func(t *testing.T) exchange.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s exchange.Store)
	}{
		{"MetaPutGetDelete", testMeta},
		{"MetaPrefixOrder", testMetaPrefixOrder},
		{"MetaDeletePrefix", testMetaDeletePrefix},
		{"MetaLoadStops", testMetaLoadStops},
		{"MessageAppendLoad", testAppendLoad},
		{"MessageCopied", testMessageCopied},
		{"MessageDelete", testDelete},
		{"MessageDrop", testDrop},
		{"ManyQueuesInterleaved", testInterleaved},
		{"DoneOnce", testDoneOnce},
		{"SyncSemantics", testSync},
		{"AppendThenDeleteCancel", testAppendDeleteCancel},
		{"DeleteThenAppend", testDeleteThenAppend},
		{"PutThenDeleteOfStored", testPutDeleteStored},
		{"LoadReentrant", testLoadReentrant},
		{"LargeMessage", testLarge},
		{"CloseThenError", testCloseThenError},
		{"AppendDuringClose", testAppendDuringClose},
		{"ReadRange", testReadRange},
		{"ReadSeesQueued", testReadSeesQueued},
		{"DeleteRange", testDeleteRange},
		{"DeleteRangeQueued", testDeleteRangeQueued},
		{"PutThenDeleteRangeOfStored", testPutDeleteRangeStored},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			defer closeQuiet(t, s)
			tc.fn(t, s)
		})
	}
}

func closeQuiet(t testing.TB, s exchange.Store) {
	if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type kv struct {
	k string
	v string
}

func loadMeta(t testing.TB, s exchange.Store, prefix string) []kv {
	t.Helper()
	var out []kv
	must(t, s.LoadMeta(prefix, func(k string, v []byte) error {
		out = append(out, kv{k, string(v)})
		return nil
	}))
	return out
}

type msg struct {
	seq  uint64
	data string
}

func loadMsgs(t testing.TB, s exchange.Store, qid uint64) []msg {
	t.Helper()
	var out []msg
	must(t, s.LoadMessages(qid, func(seq uint64, data []byte) error {
		out = append(out, msg{seq, string(data)})
		return nil
	}))
	return out
}

func eqKV(t testing.TB, what string, got, want []kv) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func eqMsgs(t testing.TB, what string, got, want []msg) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d messages, want %d\n got %.20v\nwant %.20v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: message %d: got %v want %v", what, i, got[i], want[i])
		}
	}
}

// appendSync appends and waits for done, failing on an error.
func appendSync(t testing.TB, s exchange.Store, qid, seq uint64, data string) {
	t.Helper()
	ch := make(chan error, 1)
	s.AppendMessage(qid, seq, []byte(data), func(err error) { ch <- err })
	must(t, <-ch)
}

func testMeta(t *testing.T, s exchange.Store) {
	must(t, s.PutMeta("queue/a", []byte("1")))
	must(t, s.PutMeta("queue/a", []byte("2"))) // overwrite
	must(t, s.PutMeta("empty", nil))
	eqKV(t, "after put", loadMeta(t, s, ""), []kv{{"empty", ""}, {"queue/a", "2"}})
	must(t, s.DeleteMeta("queue/a"))
	must(t, s.DeleteMeta("missing"))
	eqKV(t, "after delete", loadMeta(t, s, ""), []kv{{"empty", ""}})
	buf := []byte("abc")
	must(t, s.PutMeta("copy", buf))
	buf[0] = 'X'
	eqKV(t, "value copied", loadMeta(t, s, "copy"), []kv{{"copy", "abc"}})
}

func testMetaPrefixOrder(t *testing.T, s exchange.Store) {
	keys := []string{"x/b", "x/a", "y/a", "x/", "x/c/d", "w", "x/c", "xa"}
	for i, k := range keys {
		must(t, s.PutMeta(k, []byte(fmt.Sprint(i))))
	}
	eqKV(t, "prefix x/", loadMeta(t, s, "x/"),
		[]kv{{"x/", "3"}, {"x/a", "1"}, {"x/b", "0"}, {"x/c", "6"}, {"x/c/d", "4"}})
	eqKV(t, "prefix x", loadMeta(t, s, "x"),
		[]kv{{"x/", "3"}, {"x/a", "1"}, {"x/b", "0"}, {"x/c", "6"}, {"x/c/d", "4"}, {"xa", "7"}})
	eqKV(t, "prefix none", loadMeta(t, s, "z"), nil)
	if got := len(loadMeta(t, s, "")); got != len(keys) {
		t.Fatalf("all: got %d records, want %d", got, len(keys))
	}
}

func testMetaDeletePrefix(t *testing.T, s exchange.Store) {
	for i := range 300 {
		must(t, s.PutMeta(fmt.Sprintf("vh1/q/%03d", i), []byte("v")))
	}
	must(t, s.PutMeta("vh1", []byte("vhost")))
	must(t, s.PutMeta("vh2/q/000", []byte("v")))
	must(t, s.DeleteMetaPrefix("vh1/"))
	eqKV(t, "after prefix delete", loadMeta(t, s, ""), []kv{{"vh1", "vhost"}, {"vh2/q/000", "v"}})
	must(t, s.DeleteMetaPrefix("nothing/"))
}

func testMetaLoadStops(t *testing.T, s exchange.Store) {
	for _, k := range []string{"a", "b", "c"} {
		must(t, s.PutMeta(k, []byte(k)))
	}
	stop := errors.New("stop")
	n := 0
	err := s.LoadMeta("", func(string, []byte) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("LoadMeta: err %v after %d calls, want stop after 1", err, n)
	}
	appendSync(t, s, 1, 1, "x")
	appendSync(t, s, 1, 2, "y")
	n = 0
	err = s.LoadMessages(1, func(uint64, []byte) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("LoadMessages: err %v after %d calls, want stop after 1", err, n)
	}
}

func testAppendLoad(t *testing.T, s exchange.Store) {
	// seqs chosen to catch a little-endian or string ordering of keys
	seqs := []uint64{0, 1, 2, 255, 256, 257, 1 << 16, 1 << 40, 1<<64 - 1}
	var want []msg
	for i, seq := range seqs {
		want = append(want, msg{seq, fmt.Sprint("m", i)})
	}
	// issue in a shuffled order: load is by seq, not by arrival
	order := rand.Perm(len(want))
	var wg sync.WaitGroup
	for _, i := range order {
		wg.Add(1)
		s.AppendMessage(7, want[i].seq, []byte(want[i].data), func(err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	s.AppendMessage(8, 5, nil, nil) // nil done allowed; empty data allowed
	must(t, s.Sync())
	eqMsgs(t, "queue 7", loadMsgs(t, s, 7), want)
	eqMsgs(t, "queue 8", loadMsgs(t, s, 8), []msg{{5, ""}})
	eqMsgs(t, "queue 6", loadMsgs(t, s, 6), nil)
	// queue ids adjacent in key space do not leak into each other
	appendSync(t, s, 1<<8, 1, "q256")
	eqMsgs(t, "queue 1", loadMsgs(t, s, 1), nil)
}

func testMessageCopied(t *testing.T, s exchange.Store) {
	buf := []byte("hello")
	s.AppendMessage(1, 1, buf, nil)
	copy(buf, "XXXXX") // the store must have copied before returning
	must(t, s.Sync())
	var kept []byte
	must(t, s.LoadMessages(1, func(_ uint64, d []byte) error { kept = d; return nil }))
	eqMsgs(t, "copied", loadMsgs(t, s, 1), []msg{{1, "hello"}})
	if string(kept) != "hello" {
		t.Fatalf("data kept from LoadMessages changed to %q", kept)
	}
}

func testDelete(t *testing.T, s exchange.Store) {
	for seq := uint64(1); seq <= 10; seq++ {
		appendSync(t, s, 3, seq, fmt.Sprint(seq))
	}
	for seq := uint64(1); seq <= 10; seq += 2 {
		s.DeleteMessage(3, seq)
	}
	s.DeleteMessage(3, 99) // absent: no effect
	s.DeleteMessage(4, 1)  // absent queue
	must(t, s.Sync())
	var want []msg
	for seq := uint64(2); seq <= 10; seq += 2 {
		want = append(want, msg{seq, fmt.Sprint(seq)})
	}
	eqMsgs(t, "after delete", loadMsgs(t, s, 3), want)
}

func testDrop(t *testing.T, s exchange.Store) {
	for seq := uint64(1); seq <= 100; seq++ {
		s.AppendMessage(1, seq, []byte("a"), nil)
		s.AppendMessage(2, seq, []byte("b"), nil)
	}
	// no Sync: a drop applies after the appends issued before it
	must(t, s.DropMessages(1))
	eqMsgs(t, "dropped queue", loadMsgs(t, s, 1), nil)
	if n := len(loadMsgs(t, s, 2)); n != 100 {
		t.Fatalf("other queue has %d messages, want 100", n)
	}
	must(t, s.DropMessages(1)) // again: no error
	must(t, s.DropMessages(9)) // never used
	appendSync(t, s, 1, 1, "again")
	eqMsgs(t, "append after drop", loadMsgs(t, s, 1), []msg{{1, "again"}})
}

func testInterleaved(t *testing.T, s exchange.Store) {
	const writers, queues, per = 16, 8, 200
	var wg sync.WaitGroup
	var fails atomic.Int64
	// writer w owns seqs w*per..w*per+per-1 of every queue
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inner sync.WaitGroup
			for i := range per {
				seq := uint64(w*per + i)
				q := uint64(rand.IntN(queues))
				for qq := range uint64(queues) {
					qid := (q + qq) % queues
					inner.Add(1)
					s.AppendMessage(qid, seq, fmt.Appendf(nil, "%d/%d", qid, seq), func(err error) {
						if err != nil {
							fails.Add(1)
						}
						inner.Done()
					})
				}
				if i%7 == 0 {
					s.DeleteMessage(q, seq)
				}
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	must(t, s.Sync())
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d appends failed", n)
	}
	for qid := range uint64(queues) {
		got := loadMsgs(t, s, qid)
		prev := int64(-1)
		for _, m := range got {
			if int64(m.seq) <= prev {
				t.Fatalf("queue %d: seq %d after %d", qid, m.seq, prev)
			}
			prev = int64(m.seq)
			if m.data != fmt.Sprintf("%d/%d", qid, m.seq) {
				t.Fatalf("queue %d seq %d: data %q", qid, m.seq, m.data)
			}
		}
		// exactly the deleted (q, seq) pairs are missing; count them
		if len(got) > writers*per || len(got) < writers*per-writers*(per/7+1) {
			t.Fatalf("queue %d: %d messages", qid, len(got))
		}
	}
}

func testDoneOnce(t *testing.T, s exchange.Store) {
	const n = 5000
	calls := make([]atomic.Int32, n)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 4 {
				s.AppendMessage(uint64(g), uint64(i), []byte("x"), func(err error) {
					if err != nil {
						t.Error(err)
					}
					calls[i].Add(1)
				})
				if i%3 == 0 {
					s.DeleteMessage(uint64(g), uint64(i)) // cancelled appends get done too
				}
			}
		}()
	}
	wg.Wait()
	must(t, s.Sync())
	must(t, s.Close())
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("append %d: done called %d times", i, c)
		}
	}
}

func testSync(t *testing.T, s exchange.Store) {
	must(t, s.Sync()) // nothing pending
	const n = 1000
	var done atomic.Int64
	for i := range n {
		s.AppendMessage(1, uint64(i), []byte("s"), func(err error) {
			if err == nil {
				done.Add(1)
			}
		})
	}
	s.DeleteMessage(1, 0)
	must(t, s.Sync())
	// Sync returns after the appends before it are durable and their done
	// callbacks have run, and after the deletes before it are applied.
	if d := done.Load(); d != n {
		t.Fatalf("after Sync: %d of %d done callbacks ran", d, n)
	}
	if got := len(loadMsgs(t, s, 1)); got != n-1 {
		t.Fatalf("after Sync: %d messages visible, want %d", got, n-1)
	}
	// concurrent Syncs with concurrent appends
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				s.AppendMessage(2, uint64(g*50+i), []byte("c"), nil)
				if err := s.Sync(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := len(loadMsgs(t, s, 2)); got != 400 {
		t.Fatalf("concurrent syncs: %d messages, want 400", got)
	}
}

func testAppendDeleteCancel(t *testing.T, s exchange.Store) {
	const n = 2000
	var ok atomic.Int64
	for i := range n {
		s.AppendMessage(5, uint64(i), []byte("transient"), func(err error) {
			if err == nil {
				ok.Add(1)
			}
		})
		s.DeleteMessage(5, uint64(i))
	}
	s.AppendMessage(5, n, []byte("kept"), nil)
	must(t, s.Sync())
	if ok.Load() != n {
		t.Fatalf("%d of %d cancelled appends got done(nil)", ok.Load(), n)
	}
	eqMsgs(t, "after append+delete", loadMsgs(t, s, 5), []msg{{n, "kept"}})
}

// testPutDeleteStored writes messages that are stored already again with
// PutMessage (a replicated log's entries applied again after a crash) and
// deletes them at once: they must be gone, though an append and a delete
// of one message in one batch otherwise never reach the disk.
func testPutDeleteStored(t *testing.T, s exchange.Store) {
	const n = 2000
	for i := range n {
		s.AppendMessage(6, uint64(i), []byte("stored"), nil)
	}
	must(t, s.Sync())
	var ok atomic.Int64
	for i := range n {
		s.PutMessage(6, uint64(i), []byte("stored"), func(err error) {
			if err == nil {
				ok.Add(1)
			}
		})
		s.DeleteMessage(6, uint64(i))
	}
	s.PutMessage(6, n, []byte("kept"), nil)
	must(t, s.Sync())
	if ok.Load() != n {
		t.Fatalf("%d of %d puts got done(nil)", ok.Load(), n)
	}
	eqMsgs(t, "after put+delete of stored messages", loadMsgs(t, s, 6), []msg{{n, "kept"}})
}

func testDeleteThenAppend(t *testing.T, s exchange.Store) {
	appendSync(t, s, 1, 1, "old")
	s.DeleteMessage(1, 1)
	s.AppendMessage(1, 1, []byte("new"), nil)
	s.DeleteMessage(1, 2)
	s.AppendMessage(1, 2, []byte("two"), nil)
	s.AppendMessage(1, 3, []byte("gone"), nil)
	s.DeleteMessage(1, 3)
	s.AppendMessage(1, 3, []byte("three"), nil)
	must(t, s.Sync())
	eqMsgs(t, "delete then append", loadMsgs(t, s, 1), []msg{{1, "new"}, {2, "two"}, {3, "three"}})
}

func testLoadReentrant(t *testing.T, s exchange.Store) {
	for seq := range uint64(50) {
		appendSync(t, s, 1, seq, "r")
	}
	must(t, s.PutMeta("k", []byte("v")))
	// fn may call back into the store without deadlocking
	must(t, s.LoadMessages(1, func(seq uint64, _ []byte) error {
		s.DeleteMessage(1, seq)
		return nil
	}))
	must(t, s.LoadMeta("", func(k string, _ []byte) error { return s.PutMeta(k+"2", nil) }))
	must(t, s.Sync())
	eqMsgs(t, "after reentrant delete", loadMsgs(t, s, 1), nil)
}

func testLarge(t *testing.T, s exchange.Store) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB
	appendSync(t, s, 1, 1, string(big))
	must(t, s.PutMeta("big", big))
	got := loadMsgs(t, s, 1)
	if len(got) != 1 || got[0].data != string(big) {
		t.Fatalf("large message not loaded intact")
	}
	if m := loadMeta(t, s, "big"); len(m) != 1 || m[0].v != string(big) {
		t.Fatalf("large meta not loaded intact")
	}
}

func testCloseThenError(t *testing.T, s exchange.Store) {
	appendSync(t, s, 1, 1, "x")
	must(t, s.Close())
	is := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	is("Close", s.Close())
	is("PutMeta", s.PutMeta("k", nil))
	is("DeleteMeta", s.DeleteMeta("k"))
	is("DeleteMetaPrefix", s.DeleteMetaPrefix("k"))
	is("LoadMeta", s.LoadMeta("", func(string, []byte) error { return nil }))
	is("LoadMessages", s.LoadMessages(1, func(uint64, []byte) error { return nil }))
	is("DropMessages", s.DropMessages(1))
	is("Sync", s.Sync())
	var got error
	calls := 0
	s.AppendMessage(1, 2, []byte("late"), func(err error) { got = err; calls++ })
	if calls != 1 {
		t.Fatalf("AppendMessage after Close: done called %d times before return", calls)
	}
	is("AppendMessage done", got)
	s.AppendMessage(1, 3, nil, nil)
	s.DeleteMessage(1, 1) // no panic
}

func testAppendDuringClose(t *testing.T, s exchange.Store) {
	const writers, per = 8, 2000
	var calls, oks atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range per {
				s.AppendMessage(uint64(w), uint64(i), []byte("c"), func(err error) {
					calls.Add(1)
					switch {
					case err == nil:
						oks.Add(1)
					case !errors.Is(err, store.ErrClosed):
						t.Errorf("done: %v", err)
					}
				})
			}
		}()
	}
	close(start)
	for calls.Load() < 100 { // let some appends in first
		time.Sleep(100 * time.Microsecond)
	}
	must(t, s.Close())
	wg.Wait()
	if c := calls.Load(); c != writers*per {
		t.Fatalf("done called %d times for %d appends", c, writers*per)
	}
	t.Logf("%d of %d appends made it before Close", oks.Load(), writers*per)
}
