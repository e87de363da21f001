package logbridge

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's lines about a peer name it under "peer" (a raft.Server, its
// address or its ID) or "server-id". Its failure lines ("failed to
// heartbeat to", "failed to appendEntries to", "failed to contact", ...)
// at WARN or ERROR go through the peer limiter (peers.go); "pipelining
// replication" to a peer means it answers again.
const (
	raftRecoveredMsg = "pipelining replication"
	raftRemovedMsg   = "removed peer, stopping replication"
)

// raftPeer returns the peer a raft line is about, "" if none.
func (h *hcLogger) raftPeer(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := args[i].(string)
		if k != "peer" && k != "server-id" {
			continue
		}
		switch v := args[i+1].(type) {
		case raft.Server:
			h.peers.learn(string(v.Address), string(v.ID))
			return string(v.ID)
		case raft.ServerID:
			return string(v)
		case raft.ServerAddress:
			return h.peers.resolve(string(v))
		case string:
			return h.peers.resolve(v)
		}
	}
	return ""
}

// limitPeer applies the peer limiter to one raft line. It returns the
// level and attributes to log it with, and an extra INFO line to log
// first when the line says a failing peer answers again ("" if none).
func (h *hcLogger) limitPeer(level hclog.Level, msg string, args []any) (hclog.Level, []any, string, []any) {
	peer := h.raftPeer(args)
	if peer == "" {
		return level, args, "", nil
	}
	switch {
	case level >= hclog.Warn && strings.HasPrefix(msg, "failed to"):
		report, n, since := h.peers.failure(peer)
		if !report {
			return hclog.Debug, args, "", nil // the episode is already reported
		}
		if n > 0 {
			return hclog.Warn, append(args[:len(args):len(args)], "peer_down_for", h.peers.now().Sub(since).Round(time.Second), "suppressed", n), "", nil
		}
		return hclog.Warn, append(args[:len(args):len(args)], "peer_down", true), "", nil
	case msg == raftRecoveredMsg:
		if was, n, since := h.peers.success(peer); was {
			return level, args, "raft: peer answers again", []any{"peer", peer,
				"down_for", h.peers.now().Sub(since).Round(time.Millisecond), "suppressed", n}
		}
	case msg == raftRemovedMsg:
		h.peers.forget(peer)
	}
	return level, args, "", nil
}

// formatArgs formats hclog's deferred-format values (hclog.Fmt, Hex,
// Octal, Binary, Quote) as hclog's own writer does; passed to slog as
// they are, raft's `"servers", hclog.Fmt("%+v", servers)` printed
// servers="[%+v [...]]".
func formatArgs(args []any) []any {
	var out []any
	for i, a := range args {
		var s string
		switch v := a.(type) {
		case hclog.Format:
			if len(v) == 0 {
				s = ""
			} else if f, ok := v[0].(string); ok {
				s = fmt.Sprintf(f, v[1:]...)
			} else {
				s = fmt.Sprint(v...)
			}
		case hclog.Hex:
			s = "0x" + strconv.FormatUint(uint64(v), 16)
		case hclog.Octal:
			s = "0" + strconv.FormatUint(uint64(v), 8)
		case hclog.Binary:
			s = "0b" + strconv.FormatUint(uint64(v), 2)
		case hclog.Quote:
			s = strconv.Quote(string(v))
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = s
	}
	if out == nil {
		return args
	}
	return out
}
