package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// badgerLogger bridges Badger's printf logger into slog. Badger's errors and
// warnings keep their level; its info lines (open/close/compaction chatter)
// go to Debug and its debug lines below that, so they show only when asked.
type badgerLogger struct{ log *slog.Logger }

func (l badgerLogger) logf(level slog.Level, format string, args []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.log.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (l badgerLogger) Errorf(f string, a ...any)   { l.logf(slog.LevelError, f, a) }
func (l badgerLogger) Warningf(f string, a ...any) { l.logf(slog.LevelWarn, f, a) }
func (l badgerLogger) Infof(f string, a ...any)    { l.logf(slog.LevelDebug, f, a) }
func (l badgerLogger) Debugf(f string, a ...any)   { l.logf(slog.LevelDebug-4, f, a) }
