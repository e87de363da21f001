package logbridge

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func levelCount(out, level string) int { return strings.Count(out, "level="+level+" ") }

// TestRaftPeerDownOncePerEpisode: a dead peer's heartbeat and append
// retries make one WARN line, not one per retry; the peer answering again
// is one INFO line, and failing again afterwards a new WARN line.
func TestRaftPeerDownOncePerEpisode(t *testing.T) {
	l, buf := capture(slog.LevelInfo)
	h := NewHCLogger(l, "raft").(*hcLogger)
	now := time.Unix(1000, 0)
	h.peers.now = func() time.Time { return now }
	peer := raft.Server{Suffrage: raft.Voter, ID: "node2", Address: "127.0.0.1:7001"}
	err := errors.New("dial tcp 127.0.0.1:7001: connect: connection refused")
	// Raft names the peer by address in heartbeats, by raft.Server in appends.
	h.Error("failed to appendEntries to", "peer", peer, "error", err)
	for i := 0; i < 120; i++ {
		now = now.Add(200 * time.Millisecond) // 24 s
		h.Error("failed to heartbeat to", "peer", peer.Address, "backoff time", 10*time.Millisecond, "error", err)
	}
	out := buf.String()
	if n := levelCount(out, "WARN") + levelCount(out, "ERROR"); n != 1 {
		t.Fatalf("%d warn/error lines for one dead peer, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, `msg="failed to appendEntries to"`) || !strings.Contains(out, "peer_down=true") {
		t.Errorf("first failure line: %s", out)
	}
	buf.Reset()
	h.Info("pipelining replication", "peer", peer)
	h.Error("failed to heartbeat to", "peer", peer.Address, "error", err)
	out = buf.String()
	if !strings.Contains(out, `level=INFO msg="raft: peer answers again" logger=raft peer=node2 down_for=24s suppressed=120`) {
		t.Errorf("no recovery line:\n%s", out)
	}
	if levelCount(out, "WARN") != 1 {
		t.Errorf("failing again after a recovery is not reported:\n%s", out)
	}
	// Still failing a minute later: one summary with the count.
	buf.Reset()
	for i := 0; i < 301; i++ {
		now = now.Add(200 * time.Millisecond)
		h.Error("failed to heartbeat to", "peer", peer.Address, "error", err)
	}
	out = buf.String()
	if levelCount(out, "WARN") != 1 || !strings.Contains(out, "suppressed=299") || !strings.Contains(out, "peer_down_for=1m0s") {
		t.Errorf("want one minute summary with the count:\n%s", out)
	}
	// Another peer is its own episode.
	buf.Reset()
	h.Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.1:7002"), "error", err)
	if levelCount(buf.String(), "WARN") != 1 {
		t.Errorf("second peer's failure not reported: %s", buf.String())
	}
}

// TestMemberlistPeerDownOncePerEpisode: memberlist's repeated failures
// about one peer are one WARN line, then a summary a minute later.
func TestMemberlistPeerDownOncePerEpisode(t *testing.T) {
	l, buf := capture(slog.LevelInfo)
	lg := NewStdLogger(l)
	w := lg.Writer().(stdWriter)
	now := time.Unix(1000, 0)
	w.peers.now = func() time.Time { return now }
	for i := 0; i < 50; i++ {
		now = now.Add(time.Second)
		lg.Printf("[ERR] memberlist: Push/Pull with node2 failed: dial tcp 127.0.0.1:7946: connect: connection refused")
		lg.Printf("[ERR] memberlist: Failed to send gossip to 127.0.0.1:7946: write: connection refused")
	}
	out := buf.String()
	if n := levelCount(out, "WARN") + levelCount(out, "ERROR"); n != 2 { // one per peer name
		t.Fatalf("%d lines, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "peer=node2 peer_down=true") || !strings.Contains(out, "peer=127.0.0.1:7946 peer_down=true") {
		t.Errorf("peers not named:\n%s", out)
	}
	// A line about no peer is not limited.
	buf.Reset()
	lg.Printf("[ERR] memberlist: Error reading UDP packet: x")
	lg.Printf("[ERR] memberlist: Error reading UDP packet: x")
	if levelCount(buf.String(), "ERROR") != 2 {
		t.Errorf("unrelated errors limited: %s", buf.String())
	}
}

// TestHCLoggerFormatsDeferredValues: raft's hclog.Fmt values are
// formatted, not printed as their format string and arguments.
func TestHCLoggerFormatsDeferredValues(t *testing.T) {
	l, buf := capture(slog.LevelInfo)
	servers := []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "a:1"}}
	NewHCLogger(l, "raft").With("v", hclog.Fmt("%d/%d", 1, 2)).Info("initial configuration", "index", 1, "servers", hclog.Fmt("%+v", servers),
		"h", hclog.Hex(255), "q", hclog.Quote("x y"))
	got := strings.TrimSpace(buf.String())
	want := fmt.Sprintf(`level=INFO msg="initial configuration" logger=raft v=1/2 index=1 servers="%+v" h=0xff q="\"x y\""`, servers)
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(got, "%+v") {
		t.Error("unformatted value")
	}
}
