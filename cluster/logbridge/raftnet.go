package logbridge

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// Raft's network transport logs "failed to decode incoming command" at
// error level whenever reading an inbound connection fails other than
// with a clean io.EOF. When a peer dies (a killed leader) its connections
// end in a reset or in the middle of an RPC: what is dropped is that
// peer's unfinished request, which it will never see answered anyway, and
// Raft repairs whatever it carried (a new leader sends its log again). So
// when the error is the connection ending, the line is logged at debug
// level with what happened; a real decode failure (an unknown RPC type, a
// malformed message) stays an error.
const raftDecodeMsg = "failed to decode incoming command"

// demote returns the level and message to log a raft transport line at.
func demote(level hclog.Level, msg string, args []any) (hclog.Level, string) {
	if level != hclog.Error || msg != raftDecodeMsg {
		return level, msg
	}
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "error" {
			continue
		}
		if err, ok := args[i+1].(error); ok && connectionEnded(err) {
			return hclog.Debug, "raft: inbound connection ended mid-request (peer gone or closing); its unfinished request is dropped"
		}
	}
	return level, msg
}

// connectionEnded reports whether err is a connection ending (reset,
// closed, cut short) rather than bad data.
func connectionEnded(err error) bool {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	// The msgpack codec flattens the cause into its message.
	s := err.Error()
	for _, m := range []string{"unexpected EOF", "connection reset by peer", "use of closed network connection", "broken pipe"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}
