package exchange

import (
	"fmt"
	"testing"
)

// TestStreamRawReadersShare: three consumers that take offsets from their
// deliveries (NoOffsetHeader) read one stream from its first offset; the
// messages they get at one offset are one message (decoded once, marked
// shared so that a front end encodes it once), with the right body. A
// consumer with the header gets messages of its own, never marked shared.
func TestStreamRawReadersShare(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	const n, prefetch = 1000, 50
	for i := range n {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == n })
	var sinks []*sink
	for range 3 {
		_, s := consume(t, v, "s", ConsumeOpts{Prefetch: prefetch, NoOffsetHeader: true, Args: Table{"x-stream-offset": "first"}})
		sinks = append(sinks, s)
	}
	_, own := consume(t, v, "s", ConsumeOpts{Prefetch: n, Args: Table{"x-stream-offset": "first"}})
	// The raw readers go in step: each round they get prefetch more, and
	// their acks of it give the credit for the next.
	for got := prefetch; ; got = min(got+prefetch, n) {
		waitFor(t, "a round", func() bool {
			return sinks[0].len() == got && sinks[1].len() == got && sinks[2].len() == got
		})
		if got == n {
			break
		}
		for _, s := range sinks {
			var seqs []uint64
			for _, d := range s.deliveries()[got-prefetch : got] {
				seqs = append(seqs, d.Seq)
			}
			q.AckMany(seqs)
		}
	}
	waitFor(t, "the header consumer", func() bool { return own.len() == n })
	byOff := map[uint64]map[*Message]bool{}
	for _, s := range sinks {
		for _, d := range s.deliveries() {
			off, _ := StreamOffset(d)
			if string(d.Msg.Body) != fmt.Sprint(off) {
				t.Fatalf("offset %d has body %q", off, d.Msg.Body)
			}
			if byOff[off] == nil {
				byOff[off] = map[*Message]bool{}
			}
			byOff[off][d.Msg] = true
		}
	}
	decoded := 0
	for _, ms := range byOff {
		decoded += len(ms)
	}
	// The first reader read its first window alone, before the others
	// came: those it decoded for itself.
	if decoded > n+prefetch {
		t.Fatalf("%d messages decoded for %d deliveries of %d offsets: the readers did not share", decoded, 3*n, n)
	}
	for i, d := range sinks[2].deliveries() {
		if !SharedDelivery(d) {
			t.Fatalf("delivery %d of the third raw reader not marked shared", i)
		}
	}
	for _, d := range own.deliveries() {
		off, _ := StreamOffset(d)
		if SharedDelivery(d) || byOff[off][d.Msg] {
			t.Fatalf("offset %d: the header consumer's message is shared", off)
		}
	}
}
