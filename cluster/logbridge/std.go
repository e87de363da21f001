package logbridge

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// NewStdLogger returns a *log.Logger (as memberlist.Config.Logger takes)
// whose lines go to l. The level comes from the line's prefix as memberlist
// and its libraries write it: "[DEBUG]" and "[INFO]" become Debug (the
// membership package logs the events worth seeing itself), "[WARN]" Warn,
// "[ERR]"/"[ERROR]" Error; a line without a prefix is Info.
func NewStdLogger(l *slog.Logger) *log.Logger {
	return log.New(stdWriter{l}, "", 0)
}

type stdWriter struct{ l *slog.Logger }

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
	if w.l.Enabled(ctx, level) {
		w.l.Log(ctx, level, string(line))
	}
	return len(p), nil
}
