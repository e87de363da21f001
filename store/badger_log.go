package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// BadgerLogger bridges Badger's printf logger into slog, for every Badger
// DB of the node (this store and cluster/raftstore). Badger's errors and
// warnings keep their level; its info lines (open/close/compaction chatter)
// go to Debug and its debug lines below that, so they show only when asked.
type BadgerLogger struct{ Log *slog.Logger }

func (l BadgerLogger) logf(level slog.Level, format string, args []any) {
	ctx := context.Background()
	if !l.Log.Enabled(ctx, level) {
		return
	}
	l.Log.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (l BadgerLogger) Errorf(f string, a ...any)   { l.logf(slog.LevelError, f, a) }
func (l BadgerLogger) Warningf(f string, a ...any) { l.logf(slog.LevelWarn, f, a) }
func (l BadgerLogger) Infof(f string, a ...any)    { l.logf(slog.LevelDebug, f, a) }
func (l BadgerLogger) Debugf(f string, a ...any)   { l.logf(slog.LevelDebug-4, f, a) }
