package exchange

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// pagedVHost is vhost "/" of a broker whose queues keep at most msgs
// messages of their head in memory.
func pagedVHost(t *testing.T, st *fakeStore, msgs int) (*Broker, *VHost) {
	t.Helper()
	b := newTestBroker(t, st)
	b.SetQueueWindow(msgs, 1<<20)
	return b, mustVHost(t, b, "/")
}

func body(i int) string { return fmt.Sprintf("m%05d", i) }

// memBound is what a lane may hold in memory: its window (read ahead at
// least minReadAhead) and its tail buffer, each message counted with its
// overhead.
func memBound(window int, size int) int64 {
	return int64(max(window, minReadAhead)+tailMsgs) * (int64(size) + msgOverhead)
}

func (q *Queue) memBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.mem
}

// TestPagingBoundsMemory: a backlog far past the window is mostly on
// disk while it fills and while it drains, in order, nothing lost.
//
// The queue has an in-memory limit of its own (x-max-in-memory-length),
// so its transient messages are paged past the window too.
func TestPagingBoundsMemory(t *testing.T) {
	st := newFakeStore()
	_, v := pagedVHost(t, st, 2048)
	q := declareQ(t, v, "big", QueueOpts{Durable: true, Args: Table{"x-max-in-memory-length": int32(16)}})
	const n = 5000
	bound := memBound(16, len(body(0)))
	for i := 0; i < n; i++ {
		m := &Message{RoutingKey: "big", Body: []byte(body(i))}
		if i%2 == 0 {
			m.Props.DeliveryMode = 2 // persistent and transient interleaved
		}
		publishM(t, v, m, PublishOpts{})
		if mem := q.memBytes(); mem > bound {
			t.Fatalf("after %d publishes %d bytes in memory, bound %d", i+1, mem, bound)
		}
	}
	if r := ready(q); r != n {
		t.Fatalf("ready %d", r)
	}
	if got := len(st.StoredSeqs(q.id)); got < n-int(bound/(int64(len(body(0)))+msgOverhead)) {
		t.Fatalf("%d messages in the store: the backlog was not paged out", got)
	}
	for i := 0; i < n; i++ {
		d, ok := q.Get(true)
		if !ok {
			t.Fatalf("get %d: empty", i)
		}
		if string(d.Msg.Body) != body(i) {
			t.Fatalf("get %d: %q", i, d.Msg.Body)
		}
		if d.Redelivered {
			t.Fatalf("get %d: redelivered", i)
		}
		if mem := q.memBytes(); mem > bound {
			t.Fatalf("draining: %d bytes in memory, bound %d", mem, bound)
		}
	}
	if _, ok := q.Get(true); ok {
		t.Fatal("a message too many")
	}
	if got := st.StoredSeqs(q.id); len(got) != 0 {
		t.Fatalf("%d messages left in the store", len(got))
	}
	if st := q.Status(); st.Ready != 0 || st.ReadyBytes != 0 {
		t.Fatalf("status after drain %+v", st)
	}
}

// TestPagingReadsAheadInBatches: draining a backlog on disk reads it in
// batches of about half of what a refill brings, whichever limit binds:
// the window's count, its bytes (the node's window_bytes, or a queue's
// x-max-in-memory-bytes: both reach window()), maxReadMsgs, or maxRead.
// A head full of bytes but short of the count must not read again at
// every message (measured: a drain 10–18× slower).
func TestPagingReadsAheadInBatches(t *testing.T) {
	for _, c := range []struct {
		name  string
		msgs  int
		bytes int64
		size  int
	}{
		{"window bytes bind", 1 << 15, 64 << 10, 1024},
		{"window count binds", 64, 1 << 30, 1024},
		{"maxReadMsgs binds", 1 << 15, 1 << 30, 1024},
		{"maxRead binds", 1 << 15, 1 << 30, 4096}, // 2,048 × 4 KiB > 4 MiB
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newFakeStore()
			b1 := newTestBroker(t, st)
			v1 := mustVHost(t, b1, "/")
			declareQ(t, v1, "d", QueueOpts{Durable: true})
			const n = 10000 // more than any one read brings
			big := make([]byte, c.size)
			for i := 0; i < n; i++ {
				copy(big, body(i))
				publishM(t, v1, persistent("", "d", string(big)), PublishOpts{})
			}
			if err := b1.Close(); err != nil {
				t.Fatal(err)
			}
			// After a restart the whole backlog is on disk (the
			// benchmark's drain), whatever the window.
			b := newTestBroker(t, st)
			b.SetQueueWindow(c.msgs, c.bytes)
			q, err := mustVHost(t, b, "/").Queue("d", nil)
			if err != nil {
				t.Fatal(err)
			}
			st.Mu.Lock()
			st.ReadOps = 0
			st.Mu.Unlock()
			for i := 0; i < n; i++ {
				d, ok := q.Get(true)
				if !ok || string(d.Msg.Body[:len(body(i))]) != body(i) {
					t.Fatalf("get %d: %v", i, ok)
				}
			}
			// A read ahead at half of what a refill brings brings at
			// least 32 messages; and the whole backlog came from the store.
			st.Mu.Lock()
			ops := st.ReadOps
			st.Mu.Unlock()
			if ops > n/16 || ops < n/maxReadMsgs {
				t.Fatalf("%d store reads for %d messages", ops, n)
			}
		})
	}
}

// TestPagingTransientUnderBudget: without a per-queue limit, transient
// messages past the window stay in memory while the queues' budget allows
// (persistent ones are paged as ever); past the budget they are paged
// too, and everything drains in order.
func TestPagingTransientUnderBudget(t *testing.T) {
	st := newFakeStore()
	b, v := pagedVHost(t, st, 16)
	q := declareQ(t, v, "tq", QueueOpts{Durable: true})
	const n = 2000
	for i := 0; i < n; i++ {
		publishM(t, v, &Message{RoutingKey: "tq", Body: []byte(body(i))}, PublishOpts{})
	}
	if got := len(st.StoredSeqs(q.id)); got != 0 {
		t.Fatalf("%d transient messages paged out without memory pressure", got)
	}
	if mem, want := q.memBytes(), int64(n)*(int64(len(body(0)))+msgOverhead); mem != want {
		t.Fatalf("%d bytes in memory, want %d", mem, want)
	}
	// Persistent ones behind them are kept in order (the tail's oldest
	// stays, so do the newer).
	for i := n; i < n+10; i++ {
		publishM(t, v, persistent("", "tq", body(i)), PublishOpts{})
	}
	// Past the budget, what comes is paged out.
	const budget = 64 << 10
	b.SetQueueMemoryBudget(budget)
	for i := n + 10; i < 2*n; i++ {
		publishM(t, v, &Message{RoutingKey: "tq", Body: []byte(body(i))}, PublishOpts{})
		if mem := q.memBytes(); mem > budget+memQuantum+int64(len(body(0)))+msgOverhead {
			t.Fatalf("after %d publishes over the budget: %d bytes in memory", i+1, mem)
		}
	}
	if got := len(st.StoredSeqs(q.id)); got < n-int(budget/(int64(len(body(0)))+msgOverhead)) {
		t.Fatalf("%d messages in the store: nothing paged past the budget", got)
	}
	for i := 0; i < 2*n; i++ {
		d, ok := q.Get(true)
		if !ok || string(d.Msg.Body) != body(i) {
			t.Fatalf("get %d: %v %q", i, ok, d.Msg.Body)
		}
	}
	if _, ok := q.Get(true); ok {
		t.Fatal("a message too many")
	}
}

// TestPagingConsumerAcksRequeue: a consumer with a prefetch drains a paged
// backlog; requeued messages come back first, flagged, in order.
func TestPagingConsumerAcksRequeue(t *testing.T) {
	st := newFakeStore()
	_, v := pagedVHost(t, st, 8)
	q := declareQ(t, v, "q", QueueOpts{Durable: true})
	const n = 1000
	for i := 0; i < n; i++ {
		publishM(t, v, persistent("", "q", body(i)), PublishOpts{})
	}
	l := &Limit{}
	l.SetMax(10)
	c, s := consume(t, v, "q", ConsumeOpts{Limit: l, Prefetch: 10})
	eventually(t, time.Second, "first deliveries", func() bool { return s.len() == 10 })
	ds := s.deliveries()
	q.Reject([]uint64{ds[3].Seq, ds[1].Seq}, true)
	for i, d := range ds {
		if i != 1 && i != 3 {
			q.Ack(d.Seq)
		}
	}
	var got []string
	seen := 0
	eventually(t, 5*time.Second, "drain", func() bool {
		all := s.deliveries()
		for _, d := range all[seen:] {
			got = append(got, string(d.Msg.Body))
			if d.Redelivered != (len(got) == 11 || len(got) == 12) {
				t.Errorf("delivery %d (%s): redelivered %v", len(got), d.Msg.Body, d.Redelivered)
			}
			if len(got) > 10 {
				q.Ack(d.Seq)
			}
		}
		seen = len(all)
		return ready(q) == 0 && seen == n+2
	})
	c.Cancel()
	// The first ten, then the two requeued, then the rest in order.
	want := []string{}
	for i := 0; i < 10; i++ {
		want = append(want, body(i))
	}
	want = append(want, body(1), body(3))
	for i := 10; i < n; i++ {
		want = append(want, body(i))
	}
	if !equalStrings(got, want) {
		t.Fatalf("order: got %d, first diff at %d", len(got), firstDiff(got, want))
	}
	eventually(t, time.Second, "store empty", func() bool { return len(st.StoredSeqs(q.id)) == 0 })
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestPagingPriorities: each priority level pages on its own; the highest
// priority comes first, FIFO within a level, across the disk boundary.
func TestPagingPriorities(t *testing.T) {
	st := newFakeStore()
	_, v := pagedVHost(t, st, 4)
	q := declareQ(t, v, "pq", QueueOpts{Durable: true, Args: Table{"x-max-priority": int32(2)}})
	const n = 900
	for i := 0; i < n; i++ {
		m := persistent("", "pq", body(i))
		m.Props.Priority = uint8(i % 3)
		publishM(t, v, m, PublishOpts{})
	}
	got := getBodies(q)
	var want []string
	for p := 2; p >= 0; p-- {
		for i := p; i < n; i += 3 {
			want = append(want, body(i))
		}
	}
	if !equalStrings(got, want) {
		t.Fatalf("priority order: %d messages, first diff at %d", len(got), firstDiff(got, want))
	}
}

// pagedFilled declares durable queue "q" with args on a fresh broker whose
// window is window, and publishes n persistent messages body(0..n-1) to it.
func pagedFilled(t *testing.T, window int, args Table, n int) (*Broker, *VHost, *fakeStore, *Queue) {
	t.Helper()
	st := newFakeStore()
	b, v := pagedVHost(t, st, window)
	q := declareQ(t, v, "q", QueueOpts{Durable: true, Args: args})
	for i := 0; i < n; i++ {
		publishM(t, v, persistent("", "q", body(i)), PublishOpts{})
	}
	return b, v, st, q
}

// pagedWithDLQ is pagedFilled with a dead-letter queue "dlq" for q.
func pagedWithDLQ(t *testing.T, window int, args Table, n int) (*VHost, *fakeStore, *Queue, *Queue) {
	t.Helper()
	args["x-dead-letter-exchange"], args["x-dead-letter-routing-key"] = "", "dlq"
	st := newFakeStore()
	_, v := pagedVHost(t, st, window)
	dlq := declareQ(t, v, "dlq", QueueOpts{Durable: true})
	q := declareQ(t, v, "q", QueueOpts{Durable: true, Args: args})
	for i := 0; i < n; i++ {
		publishM(t, v, persistent("", "q", body(i)), PublishOpts{})
	}
	return v, st, q, dlq
}

// TestPagingMaxLengthDropHead: x-max-length drops from the head while
// the backlog is on disk, dead-lettering in order.
func TestPagingMaxLengthDropHead(t *testing.T) {
	const n = 1000
	_, _, q, dlq := pagedWithDLQ(t, 8, Table{"x-max-length": int64(300)}, n)
	if r := ready(q); r != 300 {
		t.Fatalf("ready %d", r)
	}
	eventually(t, time.Second, "dead letters", func() bool { return ready(dlq) == n-300 })
	got := getBodies(q)
	for i, b := range got {
		if b != body(n-300+i) {
			t.Fatalf("kept %d: %q", i, b)
		}
	}
	dead := getBodies(dlq)
	for i, b := range dead {
		if b != body(i) {
			t.Fatalf("dead-lettered %d: %q", i, b)
		}
	}
}

// TestPagingTTLExpiresBacklog: a message TTL expires a backlog that is
// mostly on disk, all of it, into the dead-letter queue.
func TestPagingTTLExpiresBacklog(t *testing.T) {
	const n = 800
	_, st, q, dlq := pagedWithDLQ(t, 8, Table{"x-message-ttl": int64(30)}, n)
	eventually(t, 3*time.Second, "expiry", func() bool { return ready(q) == 0 && ready(dlq) == n })
	// Every one, once (dead letters collected by the publisher and by the
	// expiry timer may interleave).
	got := getBodies(dlq)
	slices.Sort(got)
	for i := range n {
		if i >= len(got) || got[i] != body(i) {
			t.Fatalf("dead letters: %d, at %d", len(got), i)
		}
	}
	eventually(t, time.Second, "store empty", func() bool { return len(st.StoredSeqs(q.id)) == 0 })
}

// TestPagingDeliveryLimit: x-delivery-limit counts deliveries of a message
// that was paged in.
func TestPagingDeliveryLimit(t *testing.T) {
	_, _, q, dlq := pagedWithDLQ(t, 4, Table{"x-delivery-limit": int64(1)}, 200)
	// Take the first 150 (through several refills) and return them,
	// twice: the second return is past the limit of one redelivery.
	for round := 1; round <= 2; round++ {
		var seqs []uint64
		for i := 0; i < 150; i++ {
			d, ok := q.Get(false)
			if !ok || string(d.Msg.Body) != body(i) || d.Redelivered != (round == 2) {
				t.Fatalf("round %d get %d: %v %q redelivered %v", round, i, ok, d.Msg.Body, d.Redelivered)
			}
			seqs = append(seqs, d.Seq)
		}
		q.Reject(seqs, true)
		if round == 1 && (ready(q) != 200 || ready(dlq) != 0) {
			t.Fatalf("after one return: ready %d, dead-lettered %d", ready(q), ready(dlq))
		}
	}
	eventually(t, time.Second, "delivery limit", func() bool { return ready(dlq) == 150 })
	if r := ready(q); r != 50 {
		t.Fatalf("left %d", r)
	}
	dead := getBodies(dlq) // returned together: in any order
	slices.Sort(dead)
	if dead[0] != body(0) || dead[149] != body(149) {
		t.Fatalf("dead-lettered %d: %s .. %s", len(dead), dead[0], dead[len(dead)-1])
	}
	if got := getBodies(q); got[0] != body(150) || len(got) != 50 {
		t.Fatalf("kept %d from %s", len(got), got[0])
	}
}

// TestPagingPurge: a purge removes what is on disk too.
func TestPagingPurge(t *testing.T) {
	st := newFakeStore()
	_, v := pagedVHost(t, st, 8)
	q := declareQ(t, v, "q", QueueOpts{Durable: true})
	for i := 0; i < 700; i++ {
		m := &Message{RoutingKey: "q", Body: []byte(body(i))}
		m.Props.DeliveryMode = uint8(1 + i%2)
		publishM(t, v, m, PublishOpts{})
	}
	if n := q.Purge(); n != 700 {
		t.Fatalf("purged %d", n)
	}
	if got := st.StoredSeqs(q.id); len(got) != 0 {
		t.Fatalf("%d messages left in the store", len(got))
	}
	publishM(t, v, persistent("", "q", "after"), PublishOpts{})
	if got := getBodies(q); !equalStrings(got, []string{"after"}) {
		t.Fatalf("after purge %v", got)
	}
}

// TestPagingMemoryPressure: under pressure a queue without consumers keeps
// nothing new in memory and pages out its head.
func TestPagingMemoryPressure(t *testing.T) {
	st := newFakeStore()
	b, v := pagedVHost(t, st, 1000)
	q := declareQ(t, v, "q", QueueOpts{})
	for i := 0; i < 500; i++ {
		publish(t, v, "", "q", body(i))
	}
	if mem := q.memBytes(); mem != 500*(int64(len(body(0)))+msgOverhead) {
		t.Fatalf("in memory before pressure %d", mem)
	}
	b.SetMemoryPressure(true)
	publish(t, v, "", "q", body(500))
	if mem := q.memBytes(); mem != 0 {
		t.Fatalf("in memory under pressure %d", mem)
	}
	b.SetMemoryPressure(false)
	got := getBodies(q)
	if len(got) != 501 || got[0] != body(0) || got[500] != body(500) {
		t.Fatalf("drained %d", len(got))
	}
	if len(st.StoredSeqs(q.id)) != 0 {
		t.Fatal("pages left in the store")
	}
}

// TestPagingLazyArgAndPolicy: x-queue-mode lazy and the max-in-memory
// policy keys shrink a queue's window.
func TestPagingLazyArgAndPolicy(t *testing.T) {
	st := newFakeStore()
	_, v := pagedVHost(t, st, 2048)
	lazy := declareQ(t, v, "lazy", QueueOpts{Durable: true, Args: Table{"x-queue-mode": "lazy"}})
	pol := declareQ(t, v, "pol", QueueOpts{Durable: true})
	if _, err := v.SetPolicy(Policy{Name: "p", Pattern: "^pol$", Definition: Table{"max-in-memory-length": int64(10)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.DeclareQueue("bad", QueueOpts{Args: Table{"x-queue-mode": "eager"}}); KindOf(err) != KindPreconditionFailed {
		t.Fatalf("bad queue mode: %v", err)
	}
	for i := 0; i < 2000; i++ {
		publishM(t, v, persistent("", "lazy", body(i)), PublishOpts{})
		publishM(t, v, persistent("", "pol", body(i)), PublishOpts{})
	}
	for _, q := range []*Queue{lazy, pol} {
		if mem, bound := q.memBytes(), memBound(10, len(body(0))); mem > bound {
			t.Fatalf("%s: %d bytes in memory, bound %d", q.name, mem, bound)
		}
		if got := getBodies(q); len(got) != 2000 || got[1999] != body(1999) {
			t.Fatalf("%s drained %d", q.name, len(got))
		}
	}
}

// TestPagingMemoryBudget: many queues without consumers keep, all together,
// about the node's budget in memory, however many messages they hold.
func TestPagingMemoryBudget(t *testing.T) {
	st := newFakeStore()
	b, v := pagedVHost(t, st, 2048)
	const budget = 64 << 10
	b.SetQueueMemoryBudget(budget)
	const nq, each, size = 40, 200, 100
	var qs []*Queue
	for i := 0; i < nq; i++ {
		qs = append(qs, declareQ(t, v, fmt.Sprint("q", i), QueueOpts{Durable: true}))
	}
	m := string(make([]byte, size))
	for k := 0; k < each; k++ {
		for i := 0; i < nq; i++ {
			publishM(t, v, persistent("", fmt.Sprint("q", i), m), PublishOpts{})
		}
	}
	var held int64
	for _, q := range qs {
		held += q.memBytes()
	}
	// Each queue may be a quantum behind in the total, and holds the
	// message that went over.
	if limit := int64(budget) + int64(nq)*(memQuantum+int64(size)+msgOverhead); held > limit {
		t.Fatalf("%d bytes in memory over %d queues, budget %d (limit %d)", held, nq, budget, limit)
	}
	if used, _ := b.QueueMemory(); used > held+nq*memQuantum || used < held-nq*memQuantum {
		t.Fatalf("broker counts %d, queues hold %d", used, held)
	}
	for _, q := range qs {
		if n := len(getBodies(q)); n != each {
			t.Fatalf("%s: %d", q.name, n)
		}
	}
	if used, _ := b.QueueMemory(); used != 0 {
		t.Fatalf("after draining, %d counted", used)
	}
}

// TestPagingDropHeadUnderPressure: under memory pressure a new message is
// paged out at once, and drop-head may read it back in the same publish:
// its record is in the store's queue by then, nothing goes missing.
func TestPagingDropHeadUnderPressure(t *testing.T) {
	st := newFakeStore()
	b, v := pagedVHost(t, st, 8)
	q := declareQ(t, v, "q", QueueOpts{Durable: true, Args: Table{"x-max-length": int64(5)}})
	// A consumer without credit: the queue still reads ahead a window.
	l := &Limit{}
	l.SetMax(1)
	_, s := consume(t, v, "q", ConsumeOpts{Limit: l, Prefetch: 1})
	publishM(t, v, persistent("", "q", "first"), PublishOpts{})
	eventually(t, time.Second, "first delivery", func() bool { return s.len() == 1 })
	b.SetMemoryPressure(true)
	for i := 0; i < 500; i++ {
		publishM(t, v, persistent("", "q", body(i)), PublishOpts{})
	}
	b.SetMemoryPressure(false)
	if bad := b.UnreadableMessages(); len(bad) != 0 {
		t.Fatalf("unreadable: %v", bad)
	}
	if n := len(st.StoredSeqs(q.id)); n != 6 { // and the unacked "first"
		t.Fatalf("%d messages in the store, want 6", n)
	}
	got := getBodies(q)
	if len(got) != 5 || got[0] != body(495) || got[4] != body(499) {
		t.Fatalf("kept %v", got)
	}
}

// TestPagingLeavesNoRoom: a queue whose messages all went to the store
// keeps no ring buffer for them, small ones included (an emptied deque
// keeps a buffer of up to 64 entries otherwise, which across 100,000
// paged queues was most of their memory).
func TestPagingLeavesNoRoom(t *testing.T) {
	st := newFakeStore()
	b, v := pagedVHost(t, st, 1000)
	q := declareQ(t, v, "q", QueueOpts{Durable: true})
	for i := 0; i < 20; i++ {
		publishM(t, v, persistent("", "q", body(i)), PublishOpts{})
	}
	room := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		l := &q.ready.levels[0]
		return cap(l.head.buf) + cap(l.tail.buf)
	}
	if room() == 0 {
		t.Fatal("nothing in memory before pressure")
	}
	b.SetMemoryPressure(true)
	publishM(t, v, persistent("", "q", body(20)), PublishOpts{})
	if n := room(); n != 0 {
		t.Fatalf("every message paged out, room kept for %d entries", n)
	}
	b.SetMemoryPressure(false)
	if got := getBodies(q); len(got) != 21 || got[0] != body(0) || got[20] != body(20) {
		t.Fatalf("drained %d", len(got))
	}
}
