package groups

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestFollowerLag: the leader's node sees how far behind each follower's
// log is, from the followers' answers (the keepalives' included): caught
// up while they follow, no fresh answer from one whose group stopped
// while entries went on, and caught up again once it is back and has
// been sent what it lacked.
func TestFollowerLag(t *testing.T) {
	nodes := make([]*node, 3)
	var servers []raft.Server
	for i := range nodes {
		nodes[i] = startNode(t, string(rune('a'+i)), t.TempDir(), "127.0.0.1:0")
		servers = append(servers, nodes[i].host.Self())
	}
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	const g = "q/%2F/lag"
	opts := Options{Timing: QuorumTiming()}
	var rafts []*raft.Raft
	for _, n := range nodes {
		r, err := n.host.Start(g, &listFSM{}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := Bootstrap(r, servers); err != nil {
			t.Fatal(err)
		}
		rafts = append(rafts, r)
	}
	l := waitLeader(t, rafts...)
	var lead *node
	var followers []*node
	for i, r := range rafts {
		if r == l {
			lead = nodes[i]
		} else {
			followers = append(followers, nodes[i])
		}
	}
	apply := func(n int) {
		t.Helper()
		for i := range n {
			if err := l.Apply([]byte(fmt.Sprint(i)), 5*time.Second).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// caughtUp waits until the leader's node saw f's log within slack
	// entries of its own, in an answer newer than since.
	caughtUp := func(f *node, slack uint64, since time.Time, wait time.Duration) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for {
			lag, at, ok := lead.host.FollowerLag(g, f.host.Self().Address)
			if ok && lag <= slack && at.After(since) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: lag %d at %v (ok %v), want at most %d after %v", f.id, lag, at, ok, slack, since)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	apply(20)
	for _, f := range followers {
		caughtUp(f, 2, time.Now(), 20*time.Second)
	}

	// One follower's node stops; entries go on without it.
	away := followers[0]
	self := away.host.Self().Address
	away.stop(t)
	stopped := time.Now()
	apply(300)
	time.Sleep(time.Second)
	if _, at, ok := lead.host.FollowerLag(g, self); !ok || at.After(stopped) {
		t.Fatalf("an answer from a stopped member: at %v, stopped %v", at, stopped)
	}
	caughtUp(followers[1], 2, stopped, 20*time.Second)

	// Back (from its directory, on its address): it is sent what it
	// lacks and is caught up again.
	for i, n := range nodes {
		if n == away {
			away = startNode(t, n.id, n.dir, string(self))
			nodes[i] = away
		}
	}
	if _, err := away.host.Start(g, &listFSM{}, opts); err != nil {
		t.Fatal(err)
	}
	// hashicorp/raft's replication to a follower whose RPCs failed waits
	// out a backoff (up to 10 s per failure) that its heartbeats, which
	// succeed meanwhile, do not reset: until then the lag stays (seen
	// here for 20 s), which is what the quorum-critical check must see.
	back := time.Now()
	caughtUp(away, 2, back, 60*time.Second)
	t.Logf("caught up %v after the restart", time.Since(back).Round(time.Millisecond))
	if _, _, ok := lead.host.FollowerLag("no such group", away.host.Self().Address); ok {
		t.Fatal("a lag for a group that does not run here")
	}
}

// TestNoteLog: a follower's lag is what its answer's last log index
// lacks of the leader's when the request went; an older answer does not
// replace a newer one.
func TestNoteLog(t *testing.T) {
	tr := &groupTransport{}
	now := time.Now()
	tr.noteLog("f", &raft.AppendEntriesResponse{LastLog: 100, Success: true}, 13100, now)
	if l, ok := tr.followerLog("f"); !ok || l.lag != 13000 || !l.at.Equal(now) {
		t.Fatalf("lag %+v, %v; want 13000", l, ok)
	}
	tr.noteLog("f", &raft.AppendEntriesResponse{LastLog: 13101}, 13100, now.Add(-time.Second))
	if l, _ := tr.followerLog("f"); l.lag != 13000 {
		t.Fatalf("an older answer replaced a newer one: %+v", l)
	}
	tr.noteLog("f", &raft.AppendEntriesResponse{LastLog: 13101}, 13100, now.Add(time.Second))
	if l, _ := tr.followerLog("f"); l.lag != 0 {
		t.Fatalf("a follower ahead of the request: lag %d, want 0", l.lag)
	}
	if _, ok := tr.followerLog("g"); ok {
		t.Fatal("a lag for a follower never heard from")
	}
}
