package exchange

import (
	"fmt"
	"testing"
)

// TestPagingRecoveryReadsKeysOnly: a restart counts the backlog from keys,
// reads no body until a consumer needs one, drops transient pages, and
// flags every message redelivered after a crash, none after a clean stop.
func TestPagingRecoveryReadsKeysOnly(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			st := newFakeStore()
			b1, v := pagedVHost(t, st, 8)
			declareQ(t, v, "q", QueueOpts{Durable: true})
			const n = 600
			for i := 0; i < n; i++ {
				m := &Message{RoutingKey: "q", Body: []byte(body(i))}
				if i%3 != 0 {
					m.Props.DeliveryMode = 2
				}
				publishM(t, v, m, PublishOpts{})
			}
			if clean {
				if err := b1.Close(); err != nil {
					t.Fatal(err)
				}
			}
			st.Reads = 0
			b2 := newTestBroker(t, st)
			b2.SetQueueWindow(8, 1<<20)
			v2 := mustVHost(t, b2, "/")
			q2, err := v2.Queue("q", nil)
			if err != nil {
				t.Fatal(err)
			}
			want := n - n/3 // the transient third is gone
			if r := ready(q2); r != want {
				t.Fatalf("recovered %d, want %d", r, want)
			}
			if st.Reads != 0 {
				t.Fatalf("recovery read %d message bodies", st.Reads)
			}
			i := 0
			for k := 0; k < n; k++ {
				if k%3 == 0 {
					continue
				}
				d, ok := q2.Get(true)
				if !ok || string(d.Msg.Body) != body(k) {
					t.Fatalf("get %d: %v %q, want %q", i, ok, d.Msg.Body, body(k))
				}
				if d.Redelivered == clean {
					t.Fatalf("get %d: redelivered %v after a clean=%v stop", i, d.Redelivered, clean)
				}
				i++
			}
			if len(st.StoredSeqs(q2.id)) != 0 {
				t.Fatal("messages left in the store")
			}
		})
	}
}

// TestPagingCleanStopKeepsFlags: a message delivered and returned before a
// clean stop stays flagged redelivered, also while it is paged out.
func TestPagingCleanStopKeepsFlags(t *testing.T) {
	b1, _, st, q := pagedFilled(t, 8, nil, 100)
	d, _ := q.Get(false)
	q.Reject([]uint64{d.Seq}, true)
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := newTestBroker(t, st)
	q2, _ := mustVHost(t, b2, "/").Queue("q", nil)
	for i := 0; i < 100; i++ {
		d, ok := q2.Get(true)
		if !ok || string(d.Msg.Body) != body(i) || d.Redelivered != (i == 0) {
			t.Fatalf("get %d: %v %q redelivered %v", i, ok, d.Msg.Body, d.Redelivered)
		}
	}
	// A second clean stop with recovered messages still paged out keeps
	// the flags of a crash recovery (all of them).
	_, _, st2, _ := pagedFilled(t, 8, nil, 100) // then a crash: no Close
	b4 := newTestBroker(t, st2)                 // every message may have been delivered
	if err := b4.Close(); err != nil {          // clean stop, nothing read
		t.Fatal(err)
	}
	b5 := newTestBroker(t, st2)
	q5, _ := mustVHost(t, b5, "/").Queue("q", nil)
	for i := 0; i < 100; i++ {
		d, ok := q5.Get(true)
		if !ok || !d.Redelivered {
			t.Fatalf("get %d after crash then clean stop: %v redelivered %v", i, ok, d.Redelivered)
		}
	}
}

// TestPagingCorruptRecord: a stored record that does not decode is
// logged, counted for the health check and skipped; the rest is delivered.
func TestPagingCorruptRecord(t *testing.T) {
	b, _, st, q := pagedFilled(t, 8, nil, 600)
	st.Mu.Lock()
	st.Msgs[q.id][storeKey(0, 100, false)] = []byte{0xff, 1, 2}
	st.Mu.Unlock()
	got := getBodies(q)
	if len(got) != 599 || got[98] != body(98) || got[99] != body(100) {
		t.Fatalf("got %d around the bad record: %v", len(got), got[97:101])
	}
	if bad := b.UnreadableMessages(); bad["//q"] != 1 {
		t.Fatalf("unreadable %v", bad)
	}
	if ready(q) != 0 || len(st.StoredSeqs(q.id)) != 0 {
		t.Fatalf("left ready %d stored %d", ready(q), len(st.StoredSeqs(q.id)))
	}
}

// TestPagingRecoverySplitsBigLanes: recovery counts a big lane in parallel
// ranges (forced here with a small split span and a small limit for the
// one-pass count), priorities and transient pages included, and gets
// every count and the order right; so does the one-pass count of a small
// queue (countSmall), which "one pass" makes of both queues.
func TestPagingRecoverySplitsBigLanes(t *testing.T) {
	for _, c := range []struct {
		name  string
		small int
	}{{"split", 100}, {"one pass", 1 << 20}} {
		t.Run(c.name, func(t *testing.T) {
			oldSpan, oldSmall := splitSpan, smallQueueKeys
			splitSpan, smallQueueKeys = 64, c.small
			defer func() { splitSpan, smallQueueKeys = oldSpan, oldSmall }()
			testRecoveryCounts(t, c.small)
		})
	}
}

func testRecoveryCounts(t *testing.T, smallKeys int) {
	st := newFakeStore()
	_, v := pagedVHost(t, st, 8)
	declareQ(t, v, "pq", QueueOpts{Durable: true, Args: Table{"x-max-priority": int32(2)}})
	declareQ(t, v, "small", QueueOpts{Durable: true})
	const n = 3000
	for i := 0; i < n; i++ {
		m := &Message{RoutingKey: "pq", Body: []byte(body(i))}
		m.Props.Priority = uint8(2 * (i % 2)) // lanes 0 and 2
		if i%5 != 0 {
			m.Props.DeliveryMode = 2
		}
		publishM(t, v, m, PublishOpts{})
	}
	for i := 0; i < 10; i++ {
		publishM(t, v, persistent("", "small", body(i)), PublishOpts{})
	}
	st.Mu.Lock()
	st.KeyOps = 0
	st.Mu.Unlock()
	b2 := newTestBroker(t, st)
	st.Mu.Lock()
	keyOps := st.KeyOps
	st.Mu.Unlock()
	// One pass reads each queue's keys once; "pq" planned and split takes
	// a seek per lane and per bisection step, and a count per range.
	if one := smallKeys >= n; one != (keyOps == 2) {
		t.Fatalf("recovery listed keys %d times for 2 queues (one pass: %v)", keyOps, one)
	}
	v2 := mustVHost(t, b2, "/")
	pq, _ := v2.Queue("pq", nil)
	small, _ := v2.Queue("small", nil)
	if r := ready(small); r != 10 {
		t.Fatalf("small: %d", r)
	}
	want := []string{}
	for _, lane := range []int{1, 0} { // odd i have priority 2: first
		for i := lane; i < n; i += 2 {
			if i%5 != 0 {
				want = append(want, body(i))
			}
		}
	}
	if r := ready(pq); r != len(want) {
		t.Fatalf("pq: recovered %d, want %d", r, len(want))
	}
	got := getBodies(pq)
	if !equalStrings(got, want) {
		t.Fatalf("pq: %d messages, first diff at %d", len(got), firstDiff(got, want))
	}
	if len(st.StoredSeqs(pq.id)) != 0 {
		t.Fatal("messages or pages left in the store")
	}
}
