package stream

import (
	"math/rand/v2"
	"testing"
)

// TestPendingRing: every tag handed out is answered exactly once, with its
// own publish, whatever the order of the answers; unknown and repeated
// tags are not; the ring empties and starts over, and compacts behind an
// old unanswered publish.
func TestPendingRing(t *testing.T) {
	var r pendingRing
	want := map[uint64]pendingPublish{}
	add := func(n int) []uint64 {
		var tags []uint64
		for range n {
			id := uint64(len(want)) + 1000
			tag := r.add(uint8(id%7), id)
			if _, dup := want[tag]; dup {
				t.Fatalf("tag %d handed out twice", tag)
			}
			want[tag] = pendingPublish{pub: uint8(id % 7), id: id, live: true}
			tags = append(tags, tag)
		}
		return tags
	}
	take := func(tag uint64) {
		t.Helper()
		pp, ok := r.take(tag)
		w, live := want[tag]
		if ok != live || (ok && pp != w) {
			t.Fatalf("take(%d) = %+v %v, want %+v %v", tag, pp, ok, w, live)
		}
		delete(want, tag)
	}
	if _, ok := r.take(0); ok {
		t.Fatal("tag 0 answered before any publish")
	}
	// In order.
	for _, tag := range add(300) {
		take(tag)
	}
	if r.waiting() != 0 || len(r.recs) != 0 {
		t.Fatalf("ring not empty: %d waiting, %d slots", r.waiting(), len(r.recs))
	}
	// Out of order, with repeats and unknown tags.
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		tags := add(500 + round*37)
		rng.Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
		for i, tag := range tags {
			take(tag)
			if i%50 == 0 {
				take(tag)           // answered already
				take(tag + 1000000) // never handed out
			}
		}
		if n := r.waiting(); n != 0 {
			t.Fatalf("round %d: %d waiting after every answer", round, n)
		}
	}
	// One publish unanswered at the front while many others come and go.
	old := add(1)[0]
	for range 10 {
		for _, tag := range add(2000) {
			take(tag)
		}
	}
	if n := r.waiting(); n != 1 {
		t.Fatalf("%d waiting, want the old one", n)
	}
	if len(r.recs)-r.head > 1 || len(r.recs) > 4096 {
		t.Fatalf("ring holds %d slots (head %d) for one waiting publish", len(r.recs), r.head)
	}
	take(old)
	if r.waiting() != 0 {
		t.Fatal("the old publish still waits")
	}
}
