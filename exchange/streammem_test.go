package exchange

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStreamReadersMemoryBounded: three raw readers (NoOffsetHeader, as
// the stream protocol's subscriptions) read a stream of 4 KiB messages
// from its first offset, in step. The ring of messages they share never
// holds more than 16 MiB of records and bodies (16,384 of these messages
// would be ~200 MiB with their encodings), every delivery has its
// offset's body, and once the readers are gone the log's read cache is
// given back. The same for readers of stored records (the ring holds the
// records they share and the encodings a front end caches on them).
func TestStreamReadersMemoryBounded(t *testing.T) {
	t.Run("messages", func(t *testing.T) { testReadersMemoryBounded(t, false) })
	t.Run("records", func(t *testing.T) { testReadersMemoryBounded(t, true) })
}

var testKey = NewEncodingKey("test")

func testReadersMemoryBounded(t *testing.T, records bool) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	const n, prefetch, size = 6000, 512, 4 << 10
	body := func(off uint64) string {
		p := fmt.Sprintf("%08d", off)
		return p + strings.Repeat("x", size-len(p))
	}
	for i := range n {
		publish(t, v, "", "s", body(uint64(i)))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == n })
	var sinks []*runSink
	var conss []*Consumer
	for range 3 {
		s := &runSink{}
		c, _ := consume(t, v, "s", ConsumeOpts{Prefetch: prefetch, Sink: s, NoOffsetHeader: true, StoredRuns: records,
			Args: Table{"x-stream-offset": "first"}})
		sinks = append(sinks, s)
		conss = append(conss, c)
	}
	got := func(s *runSink) int { return s.len() + s.records() }
	held := func() int {
		q.st.mu.Lock()
		defer q.st.mu.Unlock()
		held := 0
		for _, sl := range q.st.share.ring {
			if sl.m != nil {
				held += len(sl.data) + len(sl.m.Body)
			}
		}
		for _, sl := range q.st.share.runs.m {
			if sl.sr != nil {
				held += sl.bytes / 2 // the records
				for e := sl.sr.enc.head.Load(); e != nil; e = e.next {
					held += len(e.Bytes)
				}
			}
		}
		return held
	}
	maxHeld := 0
	settled := make([]int, len(sinks)) // deliveries (runs: runs) settled
	for {
		// Each reader has what its prefetch lets out (or everything).
		waitFor(t, "a round", func() bool {
			for _, s := range sinks {
				if g := got(s); g < n && g < prefetch-runRecs {
					return false
				}
			}
			return true
		})
		time.Sleep(10 * time.Millisecond)
		maxHeld = max(maxHeld, held())
		done := true
		for i, s := range sinks {
			if got(s) < n {
				done = false
			}
			if records {
				runs := s.taken()
				for _, r := range runs[settled[i]:] {
					if r.Shared != nil && r.Shared.Encoding(testKey) == nil {
						// As a front end caches its encoding: about the records' size.
						r.Shared.AddEncoding(&Encoding{Key: testKey, Bytes: make([]byte, len(r.Recs)*size)})
					}
					q.SettleRun(r.Seq, len(r.Recs))
				}
				settled[i] = len(runs)
				continue
			}
			var seqs []uint64
			ds := s.deliveries()
			for _, d := range ds[settled[i]:] {
				seqs = append(seqs, d.Seq)
			}
			settled[i] = len(ds)
			q.AckMany(seqs)
		}
		if done {
			break
		}
		// The next round: wait for deliveries past what was settled.
		waitFor(t, "more", func() bool {
			for i, s := range sinks {
				if records && got(s) < n && len(s.taken()) == settled[i] {
					return false
				}
				if !records && got(s) < n && len(s.deliveries()) == settled[i] {
					return false
				}
			}
			return true
		})
	}
	if maxHeld > 16<<20 {
		t.Fatalf("the shared ring held %d MiB of records and bodies, want at most 16", maxHeld>>20)
	}
	shared := 0
	check := func(off uint64, b []byte) {
		if want := body(off); !bytes.Equal(b, []byte(want)) {
			t.Fatalf("offset %d has body %.8q…", off, b)
		}
	}
	for _, s := range sinks {
		for _, d := range s.deliveries() {
			off, _ := StreamOffset(d)
			check(off, d.Msg.Body)
			if d.Msg.shared {
				shared++
			}
		}
		for _, r := range s.taken() {
			for _, rec := range r.Recs {
				m, err := ViewStoredMessage(rec.Data)
				if err != nil {
					t.Fatal(err)
				}
				check(rec.Off, m.Body)
			}
			if r.Shared != nil {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatal("nothing shared")
	}
	if records {
		// The runs the bound left out make room: sharing goes on to the
		// end (8 runs of these messages fill the bound).
		late, runs := 0, 0
		for _, r := range sinks[0].taken() {
			if r.Recs[0].Off >= 2*n/3 {
				runs++
				if r.Shared != nil {
					late++
				}
			}
		}
		if 2*late < runs {
			t.Fatalf("%d of the %d runs in the last third of the stream shared", late, runs)
		}
	}
	if b := q.st.log.CacheBytes(); b == 0 || b > 8<<20 {
		t.Fatalf("read cache %d bytes while reading, want some and at most 8 MiB", b)
	}
	for _, c := range conss {
		c.Cancel()
	}
	if b := q.st.log.CacheBytes(); b != 0 {
		t.Fatalf("read cache %d bytes after the readers went, want 0", b)
	}
}
