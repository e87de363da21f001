package quorum

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestLogHandOverNotAppended: a leader hands its leadership over while
// its Log is busy. Ops that Raft never appended (refused while the
// transfer was in progress, or after it, or queued behind a failure)
// fail with a *NotAppendedError, and no member ever holds one of them:
// their publisher may send them to the next leader. Ops whose outcome is
// unknown (raft.ErrLeadershipLost) are not marked.
func TestLogHandOverNotAppended(t *testing.T) {
	skipShort(t)
	c := newCluster(t, 3, steadyLeader)
	ld := c.leader()
	l, err := New(ld.r, Options{MaxBatchBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rs := newResults()
	stop := make(chan struct{})
	queued := make(chan uint64)
	go func() {
		i := uint64(0)
		defer func() { queued <- i }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			l.AppendMessage(1, i, msg(int(i)), rs.done(i))
			i++
			if i%16 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := ld.r.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	n := <-queued
	rs.wait(t)

	var nl *tnode
	deadline := time.Now().Add(10 * time.Second)
	for nl == nil && time.Now().Before(deadline) {
		nl = c.leader()
		if nl == ld {
			nl = nil
			time.Sleep(10 * time.Millisecond)
		}
	}
	if nl == nil {
		t.Fatal("no other leader after the transfer")
	}
	held := map[uint64]bool{}
	for _, e := range c.waitEqual(nl) {
		held[e.seq] = true
	}
	var acked, notAppended, unknown int
	for seq := uint64(0); seq < n; seq++ {
		err := rs.errs[seq]
		var na *NotAppendedError
		switch {
		case err == nil:
			acked++
			if !held[seq] {
				t.Fatalf("op %d acked but not held", seq)
			}
		case errors.As(err, &na):
			notAppended++
			if held[seq] {
				t.Fatalf("op %d failed as not appended (%v) but the group holds it", seq, err)
			}
			if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipTransferInProgress) &&
				!errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, ErrClosed) {
				t.Fatalf("op %d: unexpected error %v", seq, err)
			}
		default:
			unknown++
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
				t.Fatalf("op %d failed with %v, not marked as not appended", seq, err)
			}
		}
	}
	t.Logf("%d ops: %d acked, %d not appended, %d unknown outcome", n, acked, notAppended, unknown)
	if acked == 0 || notAppended == 0 {
		t.Fatalf("want ops acked before the transfer and ops not appended after it: %d acked, %d not appended", acked, notAppended)
	}
}
