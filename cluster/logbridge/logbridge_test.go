package logbridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func capture(level slog.Level) (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	return slog.New(h), &buf
}

func TestStdLoggerLevels(t *testing.T) {
	cases := []struct{ line, want string }{
		{"[DEBUG] memberlist: probe", `level=DEBUG msg="memberlist: probe"`},
		{"[INFO] memberlist: Marking n as failed", `level=DEBUG msg="memberlist: Marking n as failed"`},
		{"[WARN] memberlist: Refuting", `level=WARN msg="memberlist: Refuting"`},
		{"[ERR] memberlist: Failed", `level=ERROR msg="memberlist: Failed"`},
		{"[ERROR] x", `level=ERROR msg=x`},
		{"no prefix", `level=INFO msg="no prefix"`},
	}
	for _, c := range cases {
		l, buf := capture(slog.LevelDebug)
		NewStdLogger(l).Printf("%s", c.line)
		if got := strings.TrimSpace(buf.String()); got != c.want {
			t.Errorf("%q → %q, want %q", c.line, got, c.want)
		}
	}
	// Below the handler's level nothing is formatted or written.
	l, buf := capture(slog.LevelWarn)
	NewStdLogger(l).Printf("[DEBUG] quiet")
	if buf.Len() != 0 {
		t.Errorf("debug line written at warn level: %q", buf.String())
	}
}

func TestHCLogger(t *testing.T) {
	l, buf := capture(slog.LevelDebug)
	h := NewHCLogger(l, "raft").Named("meta").With("group", "g1")
	h.Info("entering leader state", "leader", "node0")
	h.Trace("not shown")
	h.Warn("heartbeat timeout")
	want := `level=INFO msg="entering leader state" logger=raft.meta group=g1 leader=node0
level=WARN msg="heartbeat timeout" logger=raft.meta group=g1`
	if got := strings.TrimSpace(buf.String()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if h.IsTrace() || !h.IsDebug() || !h.IsError() {
		t.Error("Is* does not follow the slog handler's level")
	}
	h.SetLevel(hclog.Error)
	if h.IsWarn() || h.GetLevel() != hclog.Error {
		t.Error("SetLevel ignored")
	}
}

// TestRaftDecodeErrorDemoted: raft's "failed to decode incoming command"
// is a debug line when the connection merely ended, an error otherwise.
func TestRaftDecodeErrorDemoted(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, "level=DEBUG"},
		{fmt.Errorf("read tcp: %w", net.ErrClosed), "level=DEBUG"},
		{errors.New("msgpack decode error [pos 41]: unexpected EOF"), "level=DEBUG"},
		{io.ErrUnexpectedEOF, "level=DEBUG"},
		{errors.New("unknown rpc type 9"), `level=ERROR msg="failed to decode incoming command"`},
	} {
		l, buf := capture(slog.LevelDebug)
		NewHCLogger(l, "raft-net").Error("failed to decode incoming command", "error", c.err)
		if got := buf.String(); !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %s", c.err, got, c.want)
		}
	}
}
