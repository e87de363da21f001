package streamlog

import (
	"sync"
	"sync/atomic"
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
func replicatedLogs(t *testing.T, ranges bool, segBytes int64) (leader, follower *Log, g *groupLog) {
	t.Helper()
	g = &groupLog{stores: []*fakeStore{newFakeStore(), newFakeStore()}}
	var ml MessageLog = g
	if ranges {
		ml = rangedGroupLog{g}
	}
	mk := func(st *fakeStore) *Log {
		return New(Config{Store: st, NewID: func() uint64 { panic("a clustered stream has no segment ids") }, Prefix: "streamseg/t\x00s\x00", TimeOf: testTime})
	}
	leader, follower = mk(g.stores[0]), mk(g.stores[1])
	leader.EnterReplicated(9, segBytes)
	leader.ml = ml
	follower.EnterReplicated(9, 0)
	return leader, follower, g
}

// appendN appends n messages at ts and waits until they are durable.
func appendN(t *testing.T, l *Log, n int, ts int64, segBytes int64) {
	t.Helper()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		data := testRecord(nil, ts, make([]byte, 40))
		wg.Add(1)
		l.mu.Lock()
		_, err := l.AppendLocked(data, ts, segBytes, nil, func(error) { wg.Done() })
		l.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func msgSize(ts int64) int64 {
	return int64(len(testRecord(nil, ts, make([]byte, 40))))
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
	if _, _, segs, _, _ := leader.Stats(); segs != 10 {
		t.Fatalf("leader has %d segments, want 10", segs)
	}
	if err := leader.RetainReplicated(9, 25*m, 0); err != nil {
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
	if first, next := leader.Bounds(); first != 80 || next != 100 {
		t.Fatalf("leader bounds %d..%d", first, next)
	}
	follower.FollowStore(9, true)
	if first, _ := follower.Bounds(); first != 80 {
		t.Fatalf("follower's first offset %d, want the leader's boundary 80", first)
	}
	recs, _, err := leader.Read(0, 1, 1<<20)
	if err != nil || len(recs) != 1 || recs[0].Off != 80 {
		t.Fatalf("read from 0 after retention: %v %v", recs, err)
	}

	// Under the limit: nothing more, no op.
	if err := leader.RetainReplicated(9, 25*m, 0); err != nil {
		t.Fatal(err)
	}
	if ops, _ := g.ops(); len(ops) != 1 {
		t.Fatalf("a pass under the limit proposed %v", ops[1:])
	}

	// By age: every segment but the current one is older than the
	// cutoff.
	later := ts + int64(time.Hour)
	appendN(t, leader, 5, later, segBytes) // into a new segment at 100
	if err := leader.RetainReplicated(9, 0, later); err != nil {
		t.Fatal(err)
	}
	ops, _ = g.ops()
	if len(ops) != 2 || ops[1] != [4]int64{80, 100, 20, 20 * m} {
		t.Fatalf("age pass: range ops %v, want a second one [80 100 20 %d]", ops, 20*m)
	}

	// A new leader (the follower) cuts the range it finds from the old
	// leader's last boundary on, into the same segments.
	follower.EnterReplicated(9, segBytes)
	if first, next := follower.Bounds(); first != 100 || next != 105 {
		t.Fatalf("new leader's bounds %d..%d, want 100..105", first, next)
	}
	if msgs, bytes, segs, fts, lts := follower.Stats(); msgs != 5 || bytes != 5*m || segs != 1 || fts != later || lts != later {
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
	g.stores[0].Mu.Lock()
	g.stores[0].Hold = true // appends from now on are not yet committed
	g.stores[0].Mu.Unlock()
	for i := 0; i < 30; i++ {
		data := testRecord(nil, ts, make([]byte, 40))
		leader.mu.Lock()
		if _, err := leader.AppendLocked(data, ts, segBytes, nil, nil); err != nil {
			t.Fatal(err)
		}
		leader.mu.Unlock()
	}
	if err := leader.RetainReplicated(9, 5*m, 0); err != nil {
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
	if err := leader.RetainReplicated(9, 20*m, 0); err != nil {
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

// followerLog is a clustered stream's follower over its own store st,
// its index built from what st holds (a member starting).
func followerLog(st Store) *Log {
	l := New(Config{Store: st, NewID: func() uint64 { panic("a clustered stream has no segment ids") }, Prefix: "streamseg/t\x00s\x00", TimeOf: testTime})
	l.EnterReplicated(9, 0)
	return l
}

// putRange puts messages [from, to) of key range 9 at ts into st, as a
// member's FSM applies committed appends.
func putRange(st *fakeStore, from, to uint64, ts int64) {
	data := testRecord(nil, ts, make([]byte, 40))
	for off := from; off < to; off++ {
		st.PutMessage(9, off, data, nil)
	}
}

// checkFollower fails unless l's view is the messages [first, next) of
// size m each, as its store holds them.
func checkFollower(t *testing.T, l *Log, st *fakeStore, first, next uint64, m int64) {
	t.Helper()
	if f, n := firstKey(st, 9); f != first || n != int(next-first) {
		t.Fatalf("the store holds %d messages from %d, want [%d, %d)", n, f, first, next)
	}
	msgs, bytes, segs, _, _ := l.Stats()
	lo, hi := l.Bounds()
	last, ok := l.LastOffset()
	if msgs != int64(next-first) || bytes != msgs*m || segs != 1 || lo != first || hi != next || !ok || last != next-1 {
		t.Fatalf("follower's view: %d messages, %d bytes, %d segments, bounds %d..%d, last %d (%v); its store holds [%d, %d) of %d bytes each",
			msgs, bytes, segs, lo, hi, last, ok, first, next, m)
	}
	recs, nx, err := l.Read(0, 1000, 1<<30)
	if err != nil || len(recs) != int(next-first) || recs[0].Off != first || nx != next {
		t.Fatalf("read from 0: %d records, next %d, %v", len(recs), nx, err)
	}
}

// TestStreamClusterFollowerCatchUpPastRetention: a member restarted after
// a kill builds its index from what its store held then, and catches up
// in one burst: the appends it missed and the leader's range deletes,
// some of them past the index's end. Whether the follower's tick that
// looks at the head comes before or after one that only reads the tail,
// its index ends as its store: never a negative count, never a missing
// last offset (TestStreamClusterRetention saw -83 messages, no last).
func TestStreamClusterFollowerCatchUpPastRetention(t *testing.T) {
	ts := time.Now().UnixNano()
	m := msgSize(ts)
	for _, order := range []struct {
		name  string
		ticks []bool // head or not, one tick each, after the burst
	}{
		{"head first", []bool{true, false}},
		{"tail first", []bool{false, true}},
		{"head alone", []bool{true}},
	} {
		t.Run(order.name, func(t *testing.T) {
			st := newFakeStore()
			putRange(st, 0, 60, ts) // what the store held at the kill
			l := followerLog(st)
			checkFollower(t, l, st, 0, 60, m)

			// The catch-up: appends up to 200, and retention up to 171.
			putRange(st, 60, 200, ts)
			st.DeleteMessages(9, 0, 171)
			for _, head := range order.ticks {
				l.FollowStore(9, head)
			}
			if len(order.ticks) == 1 {
				l.FollowStore(9, false) // and the next tick
			}
			checkFollower(t, l, st, 171, 200, m)

			// Another pass removes all the index holds while more come.
			putRange(st, 200, 260, ts)
			st.DeleteMessages(9, 171, 230)
			for _, head := range order.ticks {
				l.FollowStore(9, head)
			}
			if len(order.ticks) == 1 {
				l.FollowStore(9, false)
			}
			checkFollower(t, l, st, 230, 260, m)
		})
	}
}

// keysHook is a store that runs a function once, after the first
// MessageKeys scan that follows arm.
type keysHook struct {
	*fakeStore
	after atomic.Pointer[func()]
}

func (s *keysHook) MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error {
	err := s.fakeStore.MessageKeys(qid, from, fn)
	if h := s.after.Swap(nil); h != nil {
		(*h)()
	}
	return err
}

// TestStreamClusterFollowerRebuildRace: a follower's index rebuilt from
// its store (BecomeProxy again) while its refresh tick runs: the tick
// reads the store after the rebuild's scan, and the rebuild's older view
// must not end up as the index (the store's later keys lost to it).
func TestStreamClusterFollowerRebuildRace(t *testing.T) {
	ts := time.Now().UnixNano()
	m := msgSize(ts)
	fs := newFakeStore()
	st := &keysHook{fakeStore: fs}
	putRange(fs, 0, 30, ts)
	l := followerLog(st)
	putRange(fs, 30, 60, ts)

	done := make(chan struct{})
	hook := func() {
		// After the rebuild's scan (it saw [0, 60)): more is applied,
		// and the tick runs; it may have to wait for the rebuild.
		putRange(fs, 60, 100, ts)
		go func() {
			defer close(done)
			l.FollowStore(9, false)
		}()
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
		}
	}
	st.after.Store(&hook)
	l.EnterReplicated(9, 0)
	<-done
	l.FollowStore(9, false) // the next tick
	checkFollower(t, l, fs, 0, 100, m)
}

// TestStreamClusterFollowerSnapshotInstall: a snapshot installed on a
// follower (quorum.FSM.Restore) drops the key range and puts the
// leader's messages back, from the leader's first offset (below the
// follower's end) to past it; the follower's ticks, and a rebuild of its
// index (a role switch) while the range is empty, may come at any point.
func TestStreamClusterFollowerSnapshotInstall(t *testing.T) {
	ts := time.Now().UnixNano()
	m := msgSize(ts)
	for _, rebuild := range []bool{false, true} {
		st := newFakeStore()
		putRange(st, 0, 60, ts)
		l := followerLog(st)
		_ = st.DropMessages(9) // Restore: the range dropped
		l.FollowStore(9, true)
		l.FollowStore(9, false)
		if rebuild {
			l.EnterReplicated(9, 0) // of the empty range
		}
		putRange(st, 30, 120, ts) // the snapshot's messages
		l.FollowStore(9, false)
		putRange(st, 120, 150, ts) // the entries after it
		l.FollowStore(9, true)
		l.FollowStore(9, false)
		checkFollower(t, l, st, 30, 150, m)
	}
}
