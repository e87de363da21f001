package exchange

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestSACPartitionRule: partition i's active member is member i mod n in
// subscription order, for every i and n, and a stream that is not a
// partition keeps its first member.
func TestSACPartitionRule(t *testing.T) {
	for n := 1; n <= 4; n++ {
		for part := -1; part < 6; part++ {
			g := &sacGroup{name: "g", part: part}
			for i := 0; i < n; i++ {
				g.members = append(g.members, &cursor{id: uint32(i)})
			}
			want := 0
			if part >= 0 {
				want = part % n
			}
			if got := g.designated(); got.id != uint32(want) {
				t.Errorf("partition %d of %d members: member %d active, want %d", part, n, got.id, want)
			}
		}
	}
}

// TestSACPartitionsSpread: three partitions consumed by a group of three
// members that each subscribe to every partition (as a super stream
// consumer does) get one active partition each; when a member goes, its
// partition moves to another, and the others still have one or two.
func TestSACPartitionsSpread(t *testing.T) {
	v, _ := newTestVHost(t)
	for p := 0; p < 3; p++ {
		newStreamQ(t, v, fmt.Sprintf("ss-%d", p), nil)
	}
	type member struct{ cs [3]*Consumer }
	var ms [3]member
	for m := 0; m < 3; m++ {
		for p := 0; p < 3; p++ {
			ms[m].cs[p], _ = consume(t, v, fmt.Sprintf("ss-%d", p), ConsumeOpts{Prefetch: 5, SingleActive: true, GroupName: "app", PartitionIndex: p})
		}
	}
	activeOn := func(m int) (n int) {
		for p := 0; p < 3; p++ {
			c := ms[m].cs[p]
			if c == nil {
				continue
			}
			if c.q.st.liveOf(c) {
				n++
			}
		}
		return n
	}
	for m := 0; m < 3; m++ {
		if got := activeOn(m); got != 1 {
			t.Fatalf("member %d active on %d partitions, want 1", m, got)
		}
		// Member m was the m-th to subscribe: it holds partition m.
		if !ms[m].cs[m].q.st.liveOf(ms[m].cs[m]) {
			t.Fatalf("member %d does not hold partition %d", m, m)
		}
	}
	for p := 0; p < 3; p++ {
		ms[1].cs[p].Cancel()
		ms[1].cs[p] = nil
	}
	if a, b := activeOn(0), activeOn(2); a+b != 3 || a == 0 || b == 0 {
		t.Fatalf("after member 1 left: %d and %d partitions active", a, b)
	}
}

// liveOf reports whether c's cursor is its group's active member.
func (st *stream) liveOf(c *Consumer) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, cur := range st.cursors {
		if cur.c == c {
			return cur.live()
		}
	}
	return false
}

// TestSACTakeover: of two AMQP-style members (x-single-active-consumer
// with x-stream-consumer-name) only the first receives; when it is
// cancelled the second starts after the group's offset (what the first
// acked), so nothing acked is seen again and nothing is skipped.
func TestSACTakeover(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 10; i++ {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 10 })
	args := Table{"x-stream-offset": "first", "x-single-active-consumer": true, "x-stream-consumer-name": "g"}
	c1, s1 := consume(t, v, "s", ConsumeOpts{Prefetch: 4, Args: args})
	_, s2 := consume(t, v, "s", ConsumeOpts{Prefetch: 4, Args: args})
	waitFor(t, "first member's prefetch", func() bool { return s1.len() == 4 })
	time.Sleep(50 * time.Millisecond)
	if s2.len() != 0 {
		t.Fatalf("waiting member got %v", s2.bodies())
	}
	if cs := q.Consumers(); len(cs) != 2 || !cs[0].Active || cs[1].Active || !cs[0].SingleActive || !cs[1].SingleActive {
		t.Fatalf("consumers %+v", cs)
	}
	d := s1.deliveries()
	q.AckMany([]uint64{d[0].Seq, d[1].Seq, d[2].Seq}) // 0..2 acked, 3 not
	c1.Cancel()
	waitFor(t, "takeover", func() bool { return s2.len() == 4 })
	if got := fmt.Sprint(s2.bodies()); got != "[3 4 5 6]" {
		t.Fatalf("second member got %s, want [3 4 5 6]", got)
	}
	if _, err := v.Consume("s", ConsumeOpts{Prefetch: 1, Sink: &sink{}, Args: Table{"x-single-active-consumer": true}}); KindOf(err) != KindPreconditionFailed {
		t.Fatalf("SAC without a name: %v", err)
	}
	if _, err := v.Consume("s", ConsumeOpts{Prefetch: 1, Sink: &sink{}, Args: Table{"x-single-active-consumer": "yes", "x-stream-consumer-name": "g"}}); KindOf(err) != KindPreconditionFailed {
		t.Fatalf("SAC not a boolean: %v", err)
	}
}

// askSink is an ActivationSink that records what it was told.
type askSink struct {
	sink
	amu  sync.Mutex
	told []bool
}

func (s *askSink) Activation(_ *Consumer, active bool) {
	s.amu.Lock()
	s.told = append(s.told, active)
	s.amu.Unlock()
}

func (s *askSink) updates() string {
	s.amu.Lock()
	defer s.amu.Unlock()
	return fmt.Sprint(s.told)
}

// TestSACAsk: an ActivationSink member starts only when its front end
// answers, at the offset it answers; a member that must step down for a
// partition's newcomer is asked, and the newcomer is activated only when
// that answer came.
func TestSACAsk(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	for i := 0; i < 10; i++ {
		publish(t, v, "", "s", fmt.Sprint(i))
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 10 })
	a1, a2 := &askSink{}, &askSink{}
	c1, err := v.Consume("s", ConsumeOpts{Prefetch: 3, Sink: a1, SingleActive: true, GroupName: "g", PartitionIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a1.updates() != "[true]" {
		t.Fatalf("first member told %s", a1.updates())
	}
	time.Sleep(30 * time.Millisecond)
	if a1.len() != 0 {
		t.Fatal("delivered before the answer")
	}
	c1.ActivationAnswered(int64(7))
	waitFor(t, "from the answered offset", func() bool { return a1.len() == 3 })
	if got := fmt.Sprint(a1.bodies()); got != "[7 8 9]" {
		t.Fatalf("got %s", got)
	}
	// Partition 1 of 2 members: the newcomer is member 1.
	c2, err := v.Consume("s", ConsumeOpts{Prefetch: 3, Sink: a2, SingleActive: true, GroupName: "g", PartitionIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a1.updates() != "[true false]" || a2.updates() != "[]" {
		t.Fatalf("told %s and %s", a1.updates(), a2.updates())
	}
	c1.ActivationAnswered(nil)
	if a2.updates() != "[true]" {
		t.Fatalf("newcomer told %s", a2.updates())
	}
	if err := q.StoreStreamOffset("g", 4); err != nil {
		t.Fatal(err)
	}
	c2.ActivationAnswered(nil) // no offset: after the stored one
	waitFor(t, "after the stored offset", func() bool { return a2.len() == 3 })
	if got := fmt.Sprint(a2.bodies()); got != "[5 6 7]" {
		t.Fatalf("got %s", got)
	}
}
