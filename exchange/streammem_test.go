package exchange

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStreamReadersMemoryBounded: three readers of runs (as the stream
// protocol's subscriptions) read a stream of 4 KiB messages from its
// first offset, in step, caching an encoding of about the records' size
// on each shared run as a front end does. The runs they share never hold
// more than 16 MiB of records and encodings (8 runs of these messages
// fill it), the oldest go to make room so that sharing goes on to the
// end, every record has its offset's body, and once the readers are gone
// the log's read cache is given back.
func TestStreamReadersMemoryBounded(t *testing.T) {
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
		c, s := consumeRuns(t, v, prefetch, "first")
		sinks = append(sinks, s)
		conss = append(conss, c)
	}
	held := func() int {
		q.st.mu.Lock()
		defer q.st.mu.Unlock()
		held := 0
		for _, sl := range q.st.share.runs.m {
			held += sl.bytes / 2 // the records
			for e := sl.sr.enc.head.Load(); e != nil; e = e.next {
				held += len(e.Bytes)
			}
		}
		return held
	}
	maxHeld := 0
	settled := make([]int, len(sinks)) // runs settled
	for {
		// Each reader has what its prefetch lets out (or everything).
		waitFor(t, "a round", func() bool {
			for _, s := range sinks {
				if g := s.records(); g < n && g < prefetch-runRecs {
					return false
				}
			}
			return true
		})
		time.Sleep(10 * time.Millisecond)
		maxHeld = max(maxHeld, held())
		done := true
		for i, s := range sinks {
			if s.records() < n {
				done = false
			}
			runs := s.taken()
			for _, r := range runs[settled[i]:] {
				if r.Shared != nil && r.Shared.Encoding(testKey) == nil {
					// As a front end caches its encoding: about the records' size.
					r.Shared.AddEncoding(&Encoding{Key: testKey, Bytes: make([]byte, len(r.Recs)*size)})
				}
				q.SettleRun(r.Seq, len(r.Recs))
			}
			settled[i] = len(runs)
		}
		if done {
			break
		}
		// The next round: wait for runs past what was settled.
		waitFor(t, "more", func() bool {
			for i, s := range sinks {
				if s.records() < n && len(s.taken()) == settled[i] {
					return false
				}
			}
			return true
		})
	}
	if maxHeld > 16<<20 {
		t.Fatalf("the shared runs held %d MiB of records and encodings, want at most 16", maxHeld>>20)
	}
	for _, s := range sinks {
		for _, r := range s.taken() {
			for _, rec := range r.Recs {
				m, err := ViewStoredMessage(rec.Data)
				if err != nil {
					t.Fatal(err)
				}
				if want := body(rec.Off); !bytes.Equal(m.Body, []byte(want)) {
					t.Fatalf("offset %d has body %.8q…", rec.Off, m.Body)
				}
			}
		}
	}
	// The runs the bound left out make room: sharing goes on to the end.
	late, runs := 0, 0
	for _, r := range sinks[0].taken() {
		if r.Recs[0].Off >= 2*n/3 {
			runs++
			if r.Shared != nil {
				late++
			}
		}
	}
	if runs == 0 || 2*late < runs {
		t.Fatalf("%d of the %d runs in the last third of the stream shared", late, runs)
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

var testKey = NewEncodingKey("test")
