package logbridge

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// BadgerLogger satisfies badger.Logger and logs to L. Badger's errors and
// warnings keep their level; its info lines (open, close, compaction) go to
// Debug and its debug lines below that.
type BadgerLogger struct{ L *slog.Logger }

func (b BadgerLogger) logf(level slog.Level, format string, args []any) {
	ctx := context.Background()
	if !b.L.Enabled(ctx, level) {
		return
	}
	b.L.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (b BadgerLogger) Errorf(f string, a ...any)   { b.logf(slog.LevelError, f, a) }
func (b BadgerLogger) Warningf(f string, a ...any) { b.logf(slog.LevelWarn, f, a) }
func (b BadgerLogger) Infof(f string, a ...any)    { b.logf(slog.LevelDebug, f, a) }
func (b BadgerLogger) Debugf(f string, a ...any)   { b.logf(slog.LevelDebug-4, f, a) }
