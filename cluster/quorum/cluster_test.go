package quorum

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestClusterAppendDeleteReturn(t *testing.T) {
	skipShort(t)
	c := newCluster(t, 3, steadyLeader)
	ld := c.leader()
	l, err := New(ld.r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	const n = 10000
	rs := newResults()
	for i := 0; i < n; i++ {
		l.AppendMessage(1, uint64(i), msg(i), rs.done(uint64(i)))
	}
	rs.wait(t)
	for i, s := range rs.order {
		if s != uint64(i) {
			t.Fatalf("callback %d was for seq %d: out of order", i, s)
		}
		if err := rs.errs[s]; err != nil {
			t.Fatalf("seq %d: %v", s, err)
		}
	}
	if ld.fsm.Len() != n || ld.fsm.Bytes() != 16*n {
		t.Fatalf("leader FSM: %d messages, %d bytes", ld.fsm.Len(), ld.fsm.Bytes())
	}
	t.Logf("%d appends in %d raft entries", n, ld.r.LastIndex())
	if ld.r.LastIndex() >= n {
		t.Errorf("no batching: %d entries for %d appends", ld.r.LastIndex(), n)
	}
	c.waitEqual(ld)

	// Delete the even seqs, return every third odd one twice, then a
	// marker append: done(nil) for it means all of the above is applied.
	for i := 0; i < n; i++ {
		switch {
		case i%2 == 0:
			l.DeleteMessage(1, uint64(i))
		case i%3 == 0:
			l.ReturnMessage(1, uint64(i))
			l.ReturnMessage(1, uint64(i))
		}
	}
	marker := newResults()
	l.AppendMessage(1, n, msg(n), marker.done(n))
	marker.wait(t)
	if err := marker.errs[n]; err != nil {
		t.Fatal(err)
	}
	got := c.waitEqual(ld)
	if len(got) != n/2+1 {
		t.Fatalf("%d messages after deletes, want %d", len(got), n/2+1)
	}
	for _, e := range got[:n/2] {
		want := uint32(0)
		if e.seq%3 == 0 {
			want = 2
		}
		if e.seq%2 == 0 || e.returns != want || string(e.data) != string(msg(int(e.seq))) {
			t.Fatalf("message %d: returns %d data %q", e.seq, e.returns, e.data)
		}
	}
}

func TestClusterFailover(t *testing.T) {
	skipShort(t)
	c := newCluster(t, 3, nil)
	watches := map[*tnode]*watchLog{}
	for _, nd := range c.nodes {
		watches[nd] = watch(t, nd)
	}
	old := c.leader()
	watches[old].await(t, true)
	l, err := New(old.r, Options{MaxBatchBytes: 512})
	if err != nil {
		t.Fatal(err)
	}

	// A follower's Log fails: it is not the leader.
	var follower *tnode
	for _, nd := range c.nodes {
		if nd != old {
			follower = nd
		}
	}
	fl, _ := New(follower.r, Options{})
	frs := newResults()
	fl.AppendMessage(1, 99, msg(99), frs.done(99))
	frs.wait(t)
	if err := frs.errs[99]; !errors.Is(err, raft.ErrNotLeader) {
		t.Fatalf("append on a follower: %v", err)
	}
	if !errors.Is(fl.Err(), raft.ErrNotLeader) {
		t.Fatalf("follower Log Err = %v", fl.Err())
	}
	fl.Close()

	// Appends in flight when the leader dies: every acked one survives.
	const n = 6000
	rs := newResults()
	killed := make(chan struct{})
	go func() {
		for len(rs.acked()) < 1000 {
			time.Sleep(time.Millisecond)
		}
		c.kill(old)
		close(killed)
	}()
	for i := 0; i < n; i++ {
		l.AppendMessage(1, uint64(i), msg(i), rs.done(uint64(i)))
		if i%50 == 0 {
			time.Sleep(time.Millisecond) // spread the appends over the kill
		}
		if i%3 == 0 && i > 0 {
			l.DeleteMessage(1, uint64(i-1))
		}
	}
	rs.wait(t)
	<-killed
	acked := rs.acked()
	t.Logf("%d of %d appends acked before the leader died", len(acked), n)
	if len(acked) == n {
		t.Log("every append was acked before the kill took effect")
	}
	// Acks are a prefix: once one append failed, none after it succeeded.
	for i, s := range rs.order {
		if rs.errs[s] != nil {
			for _, s2 := range rs.order[i:] {
				if rs.errs[s2] == nil {
					t.Fatalf("seq %d acked after seq %d failed", s2, s)
				}
			}
			break
		}
	}
	if l.Err() == nil {
		t.Fatal("old leader's Log has not failed")
	}
	late := newResults()
	l.AppendMessage(1, n+1, msg(n+1), late.done(n+1))
	late.wait(t)
	if late.errs[n+1] == nil {
		t.Fatal("append on a dead leader's Log succeeded")
	}
	l.Close()
	watches[old].await(t, false)

	nl := c.leader()
	watches[nl].await(t, true) // after its Barrier: the FSM holds every committed entry
	have := map[uint64]string{}
	if err := nl.fsm.Messages(func(seq uint64, data []byte, _ uint32) bool {
		have[seq] = string(data)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range acked {
		data, ok := have[s]
		if !ok && s%3 != 2 { // seqs ≡ 2 (mod 3) were deleted after the next append
			t.Fatalf("acked seq %d lost in failover", s)
		}
		if ok && data != string(msg(int(s))) {
			t.Fatalf("seq %d: %q", s, data)
		}
	}

	// The new leader takes appends.
	l2, _ := New(nl.r, Options{})
	defer l2.Close()
	rs2 := newResults()
	for i := n + 10; i < n+510; i++ {
		l2.AppendMessage(1, uint64(i), msg(i), rs2.done(uint64(i)))
	}
	rs2.wait(t)
	if len(rs2.acked()) != 500 {
		t.Fatalf("new leader: %d of 500 appends acked", len(rs2.acked()))
	}
	c.waitEqual(nl)

	// The old leader comes back as a follower and catches up.
	c.restart(old)
	c.waitEqual(nl)
	if c.leader() != nl {
		t.Log("leadership moved after the restart")
	}
}

func TestClusterSnapshotCatchUp(t *testing.T) {
	skipShort(t)
	c := newCluster(t, 3, func(rc *raft.Config) {
		rc.SnapshotThreshold = 64
		rc.SnapshotInterval = 20 * time.Millisecond
		rc.TrailingLogs = 16
		steadyLeader(rc)
	})
	ld := c.leader()
	l, _ := New(ld.r, Options{MaxBatchBytes: 256}) // many small entries
	defer l.Close()
	var lag, other *tnode
	for _, nd := range c.nodes {
		if nd != ld {
			if lag == nil {
				lag = nd
			} else {
				other = nd
			}
		}
	}

	appendRange := func(from, to int) {
		t.Helper()
		rs := newResults()
		for i := from; i < to; i++ {
			l.AppendMessage(1, uint64(i), msg(i), rs.done(uint64(i)))
			if i%4 == 0 {
				l.ReturnMessage(1, uint64(i))
			}
			if i%5 == 0 {
				l.DeleteMessage(1, uint64(i-1))
			}
		}
		rs.wait(t)
		if len(rs.acked()) != to-from {
			t.Fatalf("%d of %d appends acked", len(rs.acked()), to-from)
		}
	}
	appendRange(0, 500)
	c.waitEqual(ld)

	// A lagging member: cut off while the leader's log is compacted past it.
	c.isolate(lag)
	lagIndex := lag.r.LastIndex()
	appendRange(500, 3000)
	if err := ld.r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	first, _ := ld.store.FirstIndex()
	if first <= lagIndex+1 {
		t.Fatalf("leader log starts at %d, lagging member has %d: no snapshot needed", first, lagIndex)
	}
	c.connectAll()
	want := c.waitEqual(ld)
	if s := lag.r.Stats()["last_snapshot_index"]; s == "0" {
		t.Fatalf("lagging member caught up without a snapshot (last_snapshot_index %s)", s)
	}
	if len(want) == 0 {
		t.Fatal("empty state")
	}

	// A restarted member: fresh FSM over its old stores, more entries and
	// snapshots meanwhile.
	c.kill(other)
	appendRange(3000, 4000)
	if err := ld.r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	c.restart(other)
	c.waitEqual(ld)
	if other.fsm.Len() != ld.fsm.Len() || other.fsm.Bytes() != ld.fsm.Bytes() {
		t.Fatalf("restarted member: %d/%d vs %d/%d", other.fsm.Len(), other.fsm.Bytes(), ld.fsm.Len(), ld.fsm.Bytes())
	}
}

// TestLogClose: a leader that cannot commit (its followers are cut off)
// holds one batch in flight; everything queued behind it fails with
// ErrClosed on Close, callers blocked on MaxPendingBytes are released,
// and ops after Close fail too.
func TestLogClose(t *testing.T) {
	skipShort(t)
	// Slow to notice the lost quorum, so that Close comes first.
	c := newCluster(t, 3, steadyLeader)
	ld := c.leader()
	for _, nd := range c.nodes {
		if nd != ld {
			c.isolate(nd)
		}
	}
	l, _ := New(ld.r, Options{MaxInFlight: 1, MaxPendingBytes: 1024, MaxBatchBytes: 256})
	rs := newResults()
	const n = 1000
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := 0; i < n; i++ {
			l.AppendMessage(1, uint64(i), msg(i), rs.done(uint64(i)))
		}
	}()
	select {
	case <-returned:
		t.Fatal("1000 appends queued past MaxPendingBytes of 1 KiB without blocking")
	case <-time.After(100 * time.Millisecond):
	}
	l.Close()
	<-returned // every rs.done registered
	rs.wait(t)
	closed := 0
	for _, err := range rs.errs {
		switch {
		case err == nil:
			t.Fatal("an append committed without a quorum")
		case errors.Is(err, ErrClosed):
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("no op failed with ErrClosed")
	}
	t.Logf("%d of %d appends failed with ErrClosed", closed, n)
	after := newResults()
	l.AppendMessage(1, n, msg(n), after.done(n))
	after.wait(t)
	if !errors.Is(after.errs[n], ErrClosed) {
		t.Fatalf("append after Close: %v", after.errs[n])
	}
	if l.Err() == nil {
		t.Fatal("Err after Close is nil")
	}
	l.Close() // twice is fine
}

// TestClusterDeposedLeader: a leader cut off from its group (alive, not
// shut down) steps down; its Log fails every op, Watch reports the loss,
// the majority elects another leader, and after the partition heals the
// old leader follows with the same state.
func TestClusterDeposedLeader(t *testing.T) {
	skipShort(t)
	c := newCluster(t, 3, nil)
	old := c.leader()
	wOld := watch(t, old)
	wOld.await(t, true)
	l, _ := New(old.r, Options{})
	defer l.Close()
	rs := newResults()
	for i := 0; i < 100; i++ {
		l.AppendMessage(1, uint64(i), msg(i), rs.done(uint64(i)))
	}
	rs.wait(t)
	if len(rs.acked()) != 100 {
		t.Fatalf("%d of 100 acked", len(rs.acked()))
	}

	c.isolate(old)
	wOld.await(t, false)
	cut := newResults()
	for i := 100; i < 200; i++ {
		l.AppendMessage(1, uint64(i), msg(i), cut.done(uint64(i)))
	}
	cut.wait(t)
	if n := len(cut.acked()); n != 0 {
		t.Fatalf("%d appends acked by a deposed leader", n)
	}
	if err := cut.errs[199]; !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatalf("append on a deposed leader: %v", err)
	}

	var nl *tnode
	deadline := time.Now().Add(10 * time.Second)
	for nl == nil && time.Now().Before(deadline) {
		for _, nd := range c.nodes {
			if nd != old && nd.r.State() == raft.Leader {
				nl = nd
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if nl == nil {
		t.Fatal("the majority elected no leader")
	}
	l2, _ := New(nl.r, Options{})
	defer l2.Close()
	rs2 := newResults()
	l2.AppendMessage(1, 1000, msg(1000), rs2.done(1000))
	rs2.wait(t)
	if err := rs2.errs[1000]; err != nil {
		t.Fatal(err)
	}

	c.connectAll()
	got := c.waitEqual(c.leader())
	if len(got) < 101 {
		t.Fatalf("%d messages after healing, want at least the 101 acked", len(got))
	}
	// The old Log stays failed even if its node leads again.
	again := newResults()
	l.AppendMessage(1, 2000, msg(2000), again.done(2000))
	again.wait(t)
	if again.errs[2000] == nil {
		t.Fatal("a failed Log took an append")
	}
}

// TestClusterDeleteRange: a range delete proposed by the leader reaches
// every member as one op in one entry: each member's store and counts
// lose the same range. A bad range is refused and queues nothing.
func TestClusterDeleteRange(t *testing.T) {
	skipShort(t)
	c := newCluster(t, 3, steadyLeader)
	ld := c.leader()
	l, err := New(ld.r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 2000
	rs := newResults()
	for i := 0; i < n; i++ {
		l.AppendMessage(1, uint64(i), msg(i), rs.done(uint64(i)))
	}
	rs.wait(t)
	c.waitEqual(ld)
	for _, bad := range [][2]uint64{{5, 5}, {7, 3}, {1<<56 - 1, 1<<56 + 1}} {
		if err := l.DeleteRange(1, bad[0], bad[1], 0, 0); !errors.Is(err, ErrBadRange) {
			t.Fatalf("DeleteRange(%d, %d): %v, want ErrBadRange", bad[0], bad[1], err)
		}
	}
	if err := l.DeleteRange(1, 0, 10, 11, 0); !errors.Is(err, ErrBadRange) {
		t.Fatalf("11 messages in 10 keys: %v, want ErrBadRange", err)
	}
	before := ld.r.LastIndex()
	if err := l.DeleteRange(1, 0, 1200, 1200, 16*1200); err != nil {
		t.Fatal(err)
	}
	marker := newResults()
	l.AppendMessage(1, n, msg(n), marker.done(n))
	marker.wait(t)
	if err := marker.errs[n]; err != nil {
		t.Fatal(err)
	}
	if entries := ld.r.LastIndex() - before; entries > 2 {
		t.Fatalf("the range and the marker took %d entries", entries)
	}
	got := c.waitEqual(ld)
	if len(got) != n-1200+1 || got[0].seq != 1200 {
		t.Fatalf("%d messages from %d after the range, want %d from 1200", len(got), got[0].seq, n-1200+1)
	}
	for _, nd := range c.up() {
		deadline := time.Now().Add(5 * time.Second)
		for nd.fsm.Len() != n-1200+1 || nd.fsm.Bytes() != 16*(n-1200+1) {
			if time.Now().After(deadline) {
				t.Fatalf("%s counts %d messages, %d bytes", nd.id, nd.fsm.Len(), nd.fsm.Bytes())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestLogEager: while a batch is in flight (its followers cut off for a
// moment, so it stays uncommitted), small ops queued behind it are not
// proposed one entry each but wait in one batch, until it holds
// EagerBytes; then it goes while the first is still in flight. With
// EagerBytes negative each op behind it is an entry of its own (up to
// MaxInFlight), which is what the first half rules out. Every op commits,
// in order, once the followers are back.
func TestLogEager(t *testing.T) {
	skipShort(t)
	for _, eager := range []int{4096, -1} {
		t.Run(fmt.Sprint(eager), func(t *testing.T) {
			c := newCluster(t, 3, func(rc *raft.Config) {
				rc.HeartbeatTimeout = 2 * time.Second
				rc.ElectionTimeout = 2 * time.Second
				rc.LeaderLeaseTimeout = 2 * time.Second
			})
			ld := c.leader()
			l, _ := New(ld.r, Options{EagerBytes: eager})
			defer l.Close()
			base := ld.r.LastIndex()
			for _, nd := range c.nodes {
				if nd != ld {
					c.isolate(nd)
				}
			}
			rs := newResults()
			waitIndex := func(want uint64) {
				t.Helper()
				deadline := time.Now().Add(2 * time.Second)
				for ld.r.LastIndex() < want {
					if time.Now().After(deadline) {
						t.Fatalf("last index %d, want %d", ld.r.LastIndex(), want)
					}
					time.Sleep(time.Millisecond)
				}
			}
			l.AppendMessage(1, 0, msg(0), rs.done(0)) // none in flight: at once
			waitIndex(base + 1)
			for i := 1; i < 10; i++ {
				l.AppendMessage(1, uint64(i), msg(i), rs.done(uint64(i)))
				time.Sleep(5 * time.Millisecond)
			}
			got := ld.r.LastIndex() - base
			if eager > 0 {
				if got != 1 {
					t.Fatalf("%d entries proposed for 10 small ops with the first in flight, want 1", got)
				}
				// Past EagerBytes the waiting batch goes, the first still in flight.
				l.AppendMessage(1, 10, make([]byte, eager), rs.done(10))
				waitIndex(base + 2)
			} else if got < 3 {
				t.Fatalf("without EagerBytes only %d entries for 10 ops one at a time", got)
			}
			c.connectAll()
			rs.wait(t)
			want := 10
			if eager > 0 {
				want = 11
			}
			if acked := rs.acked(); len(acked) != want || !slices.IsSorted(acked) {
				t.Fatalf("acked %v, want 0..%d in order", acked, want-1)
			}
		})
	}
}
