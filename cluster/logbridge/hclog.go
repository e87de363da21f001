package logbridge

import (
	"context"
	"io"
	"log"
	"log/slog"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// NewHCLogger returns an hclog.Logger (as raft.Config.Logger takes) that
// logs to l. hclog's Trace is slog Debug-4; Debug, Info, Warn and Error map
// to their slog namesakes. Key/value pairs become slog attributes; the
// logger's name becomes the attribute "logger".
func NewHCLogger(l *slog.Logger, name string) hclog.Logger {
	h := &hcLogger{l: l, name: name, level: new(atomic.Int32), peers: newPeerLimiter()}
	h.level.Store(int32(hclog.Trace))
	return h
}

type hcLogger struct {
	l       *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32 // hclog-side floor (an hclog.Level), shared with derived loggers; slog's handler filters too
	peers   *peerLimiter  // shared with derived loggers (raftpeer.go)
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hcLogger) enabled(level hclog.Level) bool {
	floor := hclog.Level(h.level.Load())
	if level == hclog.Off || floor == hclog.Off || level < floor {
		return false
	}
	return h.l.Enabled(context.Background(), slogLevel(level))
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	level, msg = demote(level, msg, args) // raftnet.go
	level, args, upMsg, upArgs := h.limitPeer(level, msg, args)
	if upMsg != "" && h.enabled(hclog.Info) {
		h.l.Log(context.Background(), slog.LevelInfo, upMsg, h.attrs(upArgs)...)
	}
	if !h.enabled(level) {
		return
	}
	h.l.Log(context.Background(), slogLevel(level), msg, h.attrs(formatArgs(args))...)
}

func (h *hcLogger) attrs(args []any) []any {
	attrs := make([]any, 0, len(h.implied)+len(args)+2)
	if h.name != "" {
		attrs = append(attrs, "logger", h.name)
	}
	attrs = append(attrs, formatArgs(h.implied)...)
	return append(attrs, args...)
}

func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hcLogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hcLogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hcLogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hcLogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hcLogger) ImpliedArgs() []any { return h.implied }

func (h *hcLogger) With(args ...any) hclog.Logger {
	c := *h
	c.implied = append(append([]any(nil), h.implied...), args...)
	return &c
}

func (h *hcLogger) Name() string { return h.name }

func (h *hcLogger) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *hcLogger) SetLevel(level hclog.Level) { h.level.Store(int32(level)) }
func (h *hcLogger) GetLevel() hclog.Level      { return hclog.Level(h.level.Load()) }

func (h *hcLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(nil), "", 0)
}

func (h *hcLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return newStdWriter(h.l)
}
