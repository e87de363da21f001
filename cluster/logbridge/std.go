package logbridge

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"regexp"
	"time"
)

// NewStdLogger returns a *log.Logger (as memberlist.Config.Logger takes)
// whose lines go to l. The level comes from the line's prefix as memberlist
// and its libraries write it: "[DEBUG]" and "[INFO]" become Debug (the
// membership package logs the events worth seeing itself), "[WARN]" Warn,
// "[ERR]"/"[ERROR]" Error; a line without a prefix is Info.
//
// Memberlist's repeated failures about one peer (push/pull, gossip,
// compound pings) are logged once per episode (peers.go): the first at
// WARN, the next at DEBUG, with a WARN summary and their count once a
// minute while they go on.
func NewStdLogger(l *slog.Logger) *log.Logger {
	return log.New(newStdWriter(l), "", 0)
}

type stdWriter struct {
	l     *slog.Logger
	peers *peerLimiter
}

func newStdWriter(l *slog.Logger) stdWriter { return stdWriter{l: l, peers: newPeerLimiter()} }

// memberlistPeer finds the peer a memberlist failure line is about.
var memberlistPeer = regexp.MustCompile(`^memberlist: (?:Push/Pull with (\S+) failed|Failed to send gossip to (\S+?): |Failed to send UDP compound ping and suspect message to (\S+?): )`)

// peerOf returns the peer of a failure line, "" if it names none.
func peerOf(line []byte) string {
	m := memberlistPeer.FindSubmatch(line)
	for _, g := range m[min(1, len(m)):] {
		if len(g) > 0 {
			return string(g)
		}
	}
	return ""
}

var levelPrefixes = []struct {
	p     []byte
	level slog.Level
}{
	{[]byte("[DEBUG]"), slog.LevelDebug},
	{[]byte("[TRACE]"), slog.LevelDebug - 4},
	{[]byte("[INFO]"), slog.LevelDebug},
	{[]byte("[WARN]"), slog.LevelWarn},
	{[]byte("[ERR]"), slog.LevelError},
	{[]byte("[ERROR]"), slog.LevelError},
}

// Write handles one line (log.Logger calls Write once per line).
func (w stdWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, lp := range levelPrefixes {
		if bytes.HasPrefix(line, lp.p) {
			level = lp.level
			line = bytes.TrimSpace(line[len(lp.p):])
			break
		}
	}
	ctx := context.Background()
	var attrs []any
	if level >= slog.LevelWarn && w.peers != nil {
		if peer := peerOf(line); peer != "" {
			report, n, since := w.peers.failure(peer)
			switch {
			case !report:
				level = slog.LevelDebug // the episode is already reported
			case n > 0:
				level, attrs = slog.LevelWarn, []any{"peer", peer, "peer_down_for", w.peers.now().Sub(since).Round(time.Second), "suppressed", n}
			default:
				level, attrs = slog.LevelWarn, []any{"peer", peer, "peer_down", true}
			}
		}
	}
	if w.l.Enabled(ctx, level) {
		w.l.Log(ctx, level, string(line), attrs...)
	}
	return len(p), nil
}
