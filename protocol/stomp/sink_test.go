package stomp

import (
	"slices"
	"testing"
)

func refs(tags ...uint64) []unackedRef {
	out := make([]unackedRef, 0, len(tags)+4)
	for _, t := range tags {
		out = append(out, unackedRef{tag: t, seq: t * 10})
	}
	return out
}

func tagsOf(rs []unackedRef) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.tag)
	}
	return out
}

func equalTags(a []unackedRef, want ...uint64) bool { return slices.Equal(tagsOf(a), want) }

// TestTakeIndividual: ACKs in order cut the head, one out of order takes
// just that delivery, an unknown tag takes nothing; what take handed out
// stays as it was whatever the subscription does next (settle reuses it
// and deliveries append to the list).
func TestTakeIndividual(t *testing.T) {
	s := &subscription{c: &conn{}, ack: ackClientIndividual}
	s.unacked = refs(1, 2, 3, 4, 5)
	first, ok := s.take(1)
	if !ok || !equalTags(first, 1) || first[0].seq != 10 || !equalTags(s.unacked, 2, 3, 4, 5) {
		t.Fatalf("take 1: %v %v, left %v", tagsOf(first), ok, tagsOf(s.unacked))
	}
	mid, ok := s.take(4)
	if !ok || !equalTags(mid, 4) || !equalTags(s.unacked, 2, 3, 5) {
		t.Fatalf("take 4: %v %v, left %v", tagsOf(mid), ok, tagsOf(s.unacked))
	}
	if _, ok := s.take(4); ok {
		t.Fatal("took 4 twice")
	}
	if _, ok := s.take(9); ok {
		t.Fatal("took an unknown tag")
	}
	// The caller may write into what it got (settle does); the list and
	// its later appends must not see it, nor it them.
	first = append(first[:0], unackedRef{tag: 99})
	for tag := uint64(6); tag < 40; tag++ {
		s.unacked = append(s.unacked, unackedRef{tag: tag})
	}
	if !equalTags(first, 99) || s.unacked[0].tag != 2 || len(s.unacked) != 37 {
		t.Fatalf("after appends: got %v, list starts %v (len %d)", tagsOf(first), s.unacked[0].tag, len(s.unacked))
	}
	rest := []uint64{2, 3, 5}
	for tag := uint64(6); tag < 40; tag++ {
		rest = append(rest, tag)
	}
	for _, tag := range rest {
		got, ok := s.take(tag)
		if !ok || !equalTags(got, tag) {
			t.Fatalf("take %d: %v %v", tag, tagsOf(got), ok)
		}
	}
	if len(s.unacked) != 0 {
		t.Fatalf("left %v", tagsOf(s.unacked))
	}
	s.unacked = append(s.unacked, unackedRef{tag: 40})
	if got, ok := s.take(40); !ok || !equalTags(got, 40) {
		t.Fatalf("take 40 after emptying: %v %v", tagsOf(got), ok)
	}
}

// TestTakeCumulative: ack mode client settles every earlier delivery too.
func TestTakeCumulative(t *testing.T) {
	s := &subscription{c: &conn{}, ack: ackClient}
	s.unacked = refs(3, 5, 7, 9)
	got, ok := s.take(7)
	if !ok || !equalTags(got, 3, 5, 7) || !equalTags(s.unacked, 9) {
		t.Fatalf("take 7: %v %v, left %v", tagsOf(got), ok, tagsOf(s.unacked))
	}
	got = append(got[:0], unackedRef{tag: 1}, unackedRef{tag: 2}, unackedRef{tag: 4}) // within its cap
	s.unacked = append(s.unacked, unackedRef{tag: 11})
	if !equalTags(s.unacked, 9, 11) {
		t.Fatalf("the caller's writes reached the list: %v", tagsOf(s.unacked))
	}
	if _, ok := s.take(5); ok {
		t.Fatal("took a settled tag")
	}
	if got, ok := s.take(11); !ok || !equalTags(got, 9, 11) || len(s.unacked) != 0 {
		t.Fatalf("take 11: %v %v, left %v", tagsOf(got), ok, tagsOf(s.unacked))
	}
}
