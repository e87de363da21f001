package exchange

import (
	"sync"
	"testing"
	"time"
)

// groupLog is a clustered stream's group as its members see it: every
// op is applied at once to each member's store (the leader's first), as
// their FSMs would once it commits. It has no range ops; rangedGroupLog
// adds them.
type groupLog struct {
	stores []*fakeStore

	mu      sync.Mutex
	rangeOp [][4]int64 // from, to, count, bytes
	deletes int
}

func (g *groupLog) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	for i, st := range g.stores {
		if i == 0 {
			st.AppendMessage(qid, seq, data, done)
		} else {
			st.AppendMessage(qid, seq, data, nil)
		}
	}
}

func (g *groupLog) DeleteMessage(qid, seq uint64) {
	g.mu.Lock()
	g.deletes++
	g.mu.Unlock()
	for _, st := range g.stores {
		st.DeleteMessage(qid, seq)
	}
}

func (g *groupLog) ops() ([][4]int64, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][4]int64(nil), g.rangeOp...), g.deletes
}

// rangedGroupLog is a groupLog with range ops.
type rangedGroupLog struct{ *groupLog }

func (g rangedGroupLog) DeleteRange(qid, from, to uint64, count, bytes int64) error {
	g.mu.Lock()
	g.rangeOp = append(g.rangeOp, [4]int64{int64(from), int64(to), count, bytes})
	g.mu.Unlock()
	for _, st := range g.stores {
		st.DeleteMessages(qid, from, to)
	}
	return nil
}

var _ RangeLog = rangedGroupLog{}

// replicatedLogs returns a leader's log and a follower's over their own
// stores, both in the key range qid, the leader appending through ml.
func replicatedLogs(t *testing.T, ranges bool, segBytes int64) (leader, follower *streamLog, g *groupLog) {
	t.Helper()
	g = &groupLog{stores: []*fakeStore{newFakeStore(), newFakeStore()}}
	var ml MessageLog = g
	if ranges {
		ml = rangedGroupLog{g}
	}
	mk := func(st *fakeStore) *streamLog {
		return &streamLog{st: st, newID: func() uint64 { panic("a clustered stream has no segment ids") }, prefix: "streamseg/t\x00s\x00"}
	}
	leader, follower = mk(g.stores[0]), mk(g.stores[1])
	leader.enterReplicated(9, segBytes)
	leader.ml = ml
	follower.enterReplicated(9, 0)
	return leader, follower, g
}

// appendN appends n messages at ts and waits until they are durable.
func appendN(t *testing.T, l *streamLog, n int, ts int64, segBytes int64) {
	t.Helper()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		data := encodeMessage(&Message{RoutingKey: "s", Body: make([]byte, 40)}, ts, nil)
		wg.Add(1)
		l.mu.Lock()
		_, err := l.appendLocked(data, ts, segBytes, nil, func(error) { wg.Done() })
		l.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func msgSize(ts int64) int64 {
	return int64(len(encodeMessage(&Message{RoutingKey: "s", Body: make([]byte, 40)}, ts, nil)))
}

func firstKey(st *fakeStore, qid uint64) (uint64, int) {
	var first uint64
	n := 0
	_ = st.MessageKeys(qid, 0, func(seq uint64, _ int64) bool {
		if n == 0 {
			first = seq
		}
		n++
		return true
	})
	return first, n
}

// TestStreamClusterRetainByRange: the leader of a clustered stream cuts
// its key range into segments of x-stream-max-segment-size-bytes and a
// retention pass removes whole head segments with one range op, which
// takes the same head off every member's store; the follower's first
// offset moves to the leader's boundary.
func TestStreamClusterRetainByRange(t *testing.T) {
	ts := time.Now().UnixNano()
	m := msgSize(ts)
	segBytes := 10 * m // 10 messages a segment
	leader, follower, g := replicatedLogs(t, true, segBytes)
	appendN(t, leader, 100, ts, segBytes)
	if _, _, segs, _, _ := leader.stats(); segs != 10 {
		t.Fatalf("leader has %d segments, want 10", segs)
	}
	if err := leader.retainReplicated(9, 25*m, 0); err != nil {
		t.Fatal(err)
	}
	// 100 messages, 25 allowed: whole segments go until 20 stay, in one op.
	ops, deletes := g.ops()
	if len(ops) != 1 || deletes != 0 {
		t.Fatalf("range ops %v, single deletes %d: want one range op", ops, deletes)
	}
	if ops[0] != [4]int64{0, 80, 80, 80 * m} {
		t.Fatalf("range op %v, want [0 80 80 %d]", ops[0], 80*m)
	}
	for i, st := range g.stores {
		if first, n := firstKey(st, 9); first != 80 || n != 20 {
			t.Fatalf("member %d's store starts at %d with %d messages, want 80 and 20", i, first, n)
		}
	}
	if first, next := leader.bounds(); first != 80 || next != 100 {
		t.Fatalf("leader bounds %d..%d", first, next)
	}
	follower.followFirst(9)
	if first, _ := follower.bounds(); first != 80 {
		t.Fatalf("follower's first offset %d, want the leader's boundary 80", first)
	}
	recs, _, err := leader.read(0, 1, 1<<20)
	if err != nil || len(recs) != 1 || recs[0].off != 80 {
		t.Fatalf("read from 0 after retention: %v %v", recs, err)
	}

	// Under the limit: nothing more, no op.
	if err := leader.retainReplicated(9, 25*m, 0); err != nil {
		t.Fatal(err)
	}
	if ops, _ := g.ops(); len(ops) != 1 {
		t.Fatalf("a pass under the limit proposed %v", ops[1:])
	}

	// By age: every segment but the current one is older than the
	// cutoff.
	later := ts + int64(time.Hour)
	appendN(t, leader, 5, later, segBytes) // into a new segment at 100
	if err := leader.retainReplicated(9, 0, later); err != nil {
		t.Fatal(err)
	}
	ops, _ = g.ops()
	if len(ops) != 2 || ops[1] != [4]int64{80, 100, 20, 20 * m} {
		t.Fatalf("age pass: range ops %v, want a second one [80 100 20 %d]", ops, 20*m)
	}

	// A new leader (the follower) cuts the range it finds from the old
	// leader's last boundary on, into the same segments.
	follower.enterReplicated(9, segBytes)
	if first, next := follower.bounds(); first != 100 || next != 105 {
		t.Fatalf("new leader's bounds %d..%d, want 100..105", first, next)
	}
	if msgs, bytes, segs, fts, lts := follower.stats(); msgs != 5 || bytes != 5*m || segs != 1 || fts != later || lts != later {
		t.Fatalf("new leader's stats %d %d %d %d %d", msgs, bytes, segs, fts, lts)
	}
}

// TestStreamClusterRetainDurableOnly: a pass removes no segment the
// leader's FSM has not applied to its end (the range's count would not
// be what the members hold).
func TestStreamClusterRetainDurableOnly(t *testing.T) {
	ts := time.Now().UnixNano()
	m := msgSize(ts)
	segBytes := 10 * m
	leader, _, g := replicatedLogs(t, true, segBytes)
	appendN(t, leader, 30, ts, segBytes)
	g.stores[0].mu.Lock()
	g.stores[0].hold = true // appends from now on are not yet committed
	g.stores[0].mu.Unlock()
	for i := 0; i < 30; i++ {
		data := encodeMessage(&Message{RoutingKey: "s", Body: make([]byte, 40)}, ts, nil)
		leader.mu.Lock()
		if _, err := leader.appendLocked(data, ts, segBytes, nil, nil); err != nil {
			t.Fatal(err)
		}
		leader.mu.Unlock()
	}
	if err := leader.retainReplicated(9, 5*m, 0); err != nil {
		t.Fatal(err)
	}
	ops, _ := g.ops()
	if len(ops) != 1 || ops[0][0] != 0 || ops[0][1] != 30 {
		t.Fatalf("range ops %v, want one of [0, 30): the durable segments only", ops)
	}
}

// TestStreamClusterRetainWithoutRanges: a group log without range ops
// gets the same head as single deletes.
func TestStreamClusterRetainWithoutRanges(t *testing.T) {
	ts := time.Now().UnixNano()
	m := msgSize(ts)
	segBytes := 10 * m
	leader, _, g := replicatedLogs(t, false, segBytes)
	appendN(t, leader, 50, ts, segBytes)
	if err := leader.retainReplicated(9, 20*m, 0); err != nil {
		t.Fatal(err)
	}
	if ops, deletes := g.ops(); len(ops) != 0 || deletes != 30 {
		t.Fatalf("range ops %v, single deletes %d, want 30 deletes", ops, deletes)
	}
	for i, st := range g.stores {
		if first, n := firstKey(st, 9); first != 30 || n != 20 {
			t.Fatalf("member %d's store starts at %d with %d messages", i, first, n)
		}
	}
}
