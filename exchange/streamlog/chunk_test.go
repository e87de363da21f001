package streamlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// chunkLog is a standalone stream's log over st that writes chunk
// records when chunks is set.
func chunkLog(st *fakeStore, chunks *atomic.Bool) *Log {
	var id atomic.Uint64
	id.Store(100)
	return New(Config{Store: st, NewID: func() uint64 { return id.Add(1) },
		Prefix: "streamseg/t\x00s\x00", Chunks: chunks.Load, TimeOf: testTime})
}

// chunkAppend appends message i (enqueued at 1000+i) the way
// stream.enqueue does, in batch's run (nil: none).
func chunkAppend(t *testing.T, l *Log, i int, batch *testBatch, done func(error)) {
	t.Helper()
	ts := int64(1000 + i)
	l.mu.Lock()
	_, err := l.AppendBatchLocked(testRecord(nil, ts, fmt.Appendf(nil, "m%d", i)), ts, 1<<30, nil, done, batchOf(batch))
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
}

// checkRecs checks that recs are the messages from offset from on.
func checkRecs(t *testing.T, recs []Rec, from uint64) {
	t.Helper()
	for k, r := range recs {
		want := from + uint64(k)
		body, ts, err := decodeTestRecord(r.Data)
		if r.Off != want || err != nil || string(body) != fmt.Sprintf("m%d", want) || ts != int64(1000+want) {
			t.Fatalf("record %d from %d: offset %d body %q ts %d err %v", k, from, r.Off, body, ts, err)
		}
	}
}

func storeKeys(st *fakeStore, id uint64) []uint64 {
	var keys []uint64
	_ = st.MessageKeys(id, 0, func(seq uint64, _ int64) bool { keys = append(keys, seq); return true })
	return keys
}

// A run of appends is stored as chunk records, one per run and never
// across a multiple of chunkAlign, confirmed when the run's batch
// flushes; every offset reads back, from any offset inside a chunk, and
// after a restart.
func TestStreamChunkRecords(t *testing.T) {
	st := newFakeStore()
	var on atomic.Bool
	on.Store(true)
	l := chunkLog(st, &on)
	var b testBatch
	var confirmed atomic.Int64
	const n = 600
	for i := range n {
		chunkAppend(t, l, i, &b, func(err error) {
			if err == nil {
				confirmed.Add(1)
			}
		})
	}
	st.WG.Wait()
	// Two chunks were full (offsets 0-255, 256-511); the rest waits for
	// the batch.
	if d := l.durable.Load(); d != 2*chunkAlign {
		t.Fatalf("durable %d before the batch flushed, want %d", d, 2*chunkAlign)
	}
	b.Flush()
	st.WG.Wait()
	if d, c := l.durable.Load(), confirmed.Load(); d != n || c != n {
		t.Fatalf("durable %d, confirmed %d after the flush, want %d", d, c, n)
	}
	if len(l.segs) != 1 || !l.segs[0].chunked {
		t.Fatalf("segments %+v, want one of chunks", l.segs)
	}
	id := l.segs[0].id
	if keys := storeKeys(st, id); fmt.Sprint(keys) != "[0 256 512]" {
		t.Fatalf("store keys %v, want one record per chunk", keys)
	}
	// A run that starts inside an alignment block is cut at its end.
	for i := n; i < n+200; i++ {
		chunkAppend(t, l, i, &b, nil)
	}
	b.Flush()
	st.WG.Wait()
	if keys := storeKeys(st, id); fmt.Sprint(keys) != "[0 256 512 600 768]" {
		t.Fatalf("store keys %v after a second run", keys)
	}
	const total = n + 200
	read := func(l *Log) {
		t.Helper()
		for _, from := range []uint64{0, 1, 255, 256, 300, 511, 512, 599, 600, 767, 768, total - 1} {
			recs, next, err := l.readRange(from, 5, 1<<20)
			if err != nil || len(recs) != int(min(5, total-from)) || next != from+uint64(len(recs)) {
				t.Fatalf("readRange(%d): %d records, next %d, %v", from, len(recs), next, err)
			}
			checkRecs(t, recs, from)
			r, ok := l.readOne(*l.segs[0], from)
			if !ok || r.Off != from {
				t.Fatalf("readOne(%d) = %d %v", from, r.Off, ok)
			}
		}
		for from := uint64(0); from < total; from += 37 {
			recs, _, err := l.Read(from, 1000, 1<<30)
			if err != nil || len(recs) != int(total-from) {
				t.Fatalf("read(%d): %d records, %v", from, len(recs), err)
			}
			checkRecs(t, recs, from)
		}
		if off := l.SeekTime(1000 + 300); off != 300 {
			t.Fatalf("seekTime: %d, want 300", off)
		}
		if last, ok := l.LastOffset(); !ok || last != total-1 {
			t.Fatalf("last offset %d %v", last, ok)
		}
	}
	read(l)
	// A restart: the segment's count, next and timestamps from its keys
	// and its first and last records.
	l2 := chunkLog(st, &on)
	if _, err := l2.Recover(); err != nil {
		t.Fatal(err)
	}
	msgs, _, segs, fts, lts := l2.Stats()
	if msgs != total || segs != 1 || l2.next != total || l2.durable.Load() != total || fts != 1000 || lts != 1000+total-1 {
		t.Fatalf("recovered %d messages in %d segments, next %d, durable %d, ts %d-%d", msgs, segs, l2.next, l2.durable.Load(), fts, lts)
	}
	if !l2.segs[0].chunked {
		t.Fatal("recovered segment not chunked")
	}
	read(l2)
	// It goes on appending after what it found.
	chunkAppend(t, l2, total, nil, nil)
	st.WG.Wait()
	if recs, _, _ := l2.readRange(total, 1, 1<<20); len(recs) != 1 {
		t.Fatal("append after the restart not read")
	}
	checkRecs(t, []Rec{{Off: total, Data: mustRead(t, l2, total)}}, total)
}

func mustRead(t *testing.T, l *Log, off uint64) []byte {
	t.Helper()
	recs, _, err := l.readRange(off, 1, 1<<20)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read %d: %v", off, err)
	}
	return recs[0].Data
}

// A log of message records (an older release's, or written with the
// flag off) stays readable; once chunks are enabled the next append
// rolls to a segment of chunks (record version 2); both read back in
// order, and after a restart.
func TestStreamChunksAfterMessageRecords(t *testing.T) {
	st := newFakeStore()
	var on atomic.Bool
	l := chunkLog(st, &on)
	var b testBatch
	for i := range 10 {
		chunkAppend(t, l, i, &b, nil)
	}
	st.WG.Wait()
	if len(l.segs) != 1 || l.segs[0].chunked || len(storeKeys(st, l.segs[0].id)) != 10 {
		t.Fatalf("flag off: segments %+v, want one of 10 message records", l.segs)
	}
	if b.Active() {
		t.Fatal("a message record waits for the batch")
	}
	on.Store(true)
	for i := 10; i < 20; i++ {
		chunkAppend(t, l, i, &b, nil)
	}
	b.Flush()
	st.WG.Wait()
	if len(l.segs) != 2 || l.segs[0].chunked || !l.segs[1].chunked || l.segs[1].first != 10 {
		t.Fatalf("segments %+v, want a segment of chunks from 10", l.segs)
	}
	if keys := storeKeys(st, l.segs[1].id); fmt.Sprint(keys) != "[10]" {
		t.Fatalf("chunk keys %v", keys)
	}
	rec := st.Meta[segKey(l.prefix, 10)]
	if id, first, err := decodeSegment(rec); err != nil || id != l.segs[1].id || first != 10 || !segmentChunked(rec) {
		t.Fatalf("segment record: %d %d %v", id, first, err)
	}
	if segmentChunked(st.Meta[segKey(l.prefix, 0)]) {
		t.Fatal("the first segment's record says chunks")
	}
	for _, ll := range []*Log{l, chunkLog(st, &on)} {
		if ll != l {
			if _, err := ll.Recover(); err != nil {
				t.Fatal(err)
			}
		}
		recs, next, err := ll.Read(0, 100, 1<<30)
		if err != nil || len(recs) != 20 || next != 20 {
			t.Fatalf("read: %d records, next %d, %v", len(recs), next, err)
		}
		checkRecs(t, recs, 0)
		if msgs, _, segs, _, _ := ll.Stats(); msgs != 20 || segs != 2 {
			t.Fatalf("stats: %d messages in %d segments", msgs, segs)
		}
	}
}

// Deleting a stream fails the pending chunk's publishes (none is
// written); closing it writes the chunk first.
func TestStreamChunkPendingAtClose(t *testing.T) {
	st := newFakeStore()
	var on atomic.Bool
	on.Store(true)
	l := chunkLog(st, &on)
	var b testBatch
	var mu sync.Mutex
	var errs []error
	done := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	chunkAppend(t, l, 0, &b, done)
	chunkAppend(t, l, 1, &b, done)
	id := l.segs[0].id
	if err := l.DropAll(); err != nil {
		t.Fatal(err)
	}
	b.Flush() // the batch's run ends after the delete: nothing to write
	st.WG.Wait()
	mu.Lock()
	if len(errs) != 2 || !errors.Is(errs[0], ErrClosed) || !errors.Is(errs[1], ErrClosed) {
		t.Fatalf("confirms %v, want two ErrClosed", errs)
	}
	mu.Unlock()
	if keys := storeKeys(st, id); len(keys) != 0 {
		t.Fatalf("store keys %v after the delete", keys)
	}
}

// The chunk codec: golden cases, and whatever bytes it is given it
// neither panics nor hands out bytes past its input.
var chunkCases = []struct {
	rec  []byte
	want []string // the message records, nil: does not decode
}{
	{testChunk(1, 1, 'a'), []string{"a"}},
	{testChunk(3, 1, 'a', 0, 2, 'b', 'c'), []string{"a", "", "bc"}},
	{testChunk(300, 1, 'a'), nil}, // messages missing
	{testChunk(1, 5, 'a'), nil},   // a length past the end
	{[]byte{chunkVersion}, nil},   // no count
	{[]byte{1, 2, 3}, nil},        // a message record
	{[]byte{}, nil},               // nothing
	{append([]byte{chunkVersion}, binary.AppendUvarint(nil, 1<<62)...), nil},
}

// testChunk is a chunk record of n message records, body as in a
// pending chunk.
func testChunk(n int, body ...byte) []byte {
	return chunkRecord(n, append(make([]byte, chunkHead), body...))
}

func TestChunkRecordCodec(t *testing.T) {
	for i, c := range chunkCases {
		var got []string
		err := eachInChunk(c.rec, func(k int, d []byte) bool {
			if k != len(got) {
				t.Fatalf("case %d: index %d", i, k)
			}
			got = append(got, string(d))
			return true
		})
		if c.want == nil {
			if err == nil {
				t.Errorf("case %d: %q decodes", i, got)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("case %d: %q %v, want %q", i, got, err, c.want)
		}
		if chunkCount(c.rec) != uint64(len(c.want)) {
			t.Errorf("case %d: count %d", i, chunkCount(c.rec))
		}
	}
}

func FuzzChunkRecord(f *testing.F) {
	for _, c := range chunkCases {
		f.Add(c.rec)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		total := 0
		_ = eachInChunk(b, func(_ int, d []byte) bool {
			total += len(d)
			if cap(d) != len(d) {
				t.Fatal("a message's slice reaches past it")
			}
			return true
		})
		if total > len(b) {
			t.Fatalf("%d bytes handed out of %d", total, len(b))
		}
		if n := chunkCount(b); n == 0 || n > uint64(len(b))+1 {
			t.Fatalf("count %d of %d bytes", n, len(b))
		}
	})
}
