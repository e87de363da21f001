// Package alarm holds the broker's resource alarms, RabbitMQ's memory and
// disk watermarks: watchers that measure the process's live memory and the
// data directory's free space and raise or clear the core's "memory" and
// "disk" alarms (exchange.Alarms), under which publishers are blocked.
//
// What it guarantees: an alarm is raised when its measure crosses the limit
// and cleared only once the measure is back under a margin (95% of the
// memory limit; the disk limit plus 5%), so it does not flap; an error
// reading a measure leaves the alarm as it is. Each watcher is one
// goroutine that runs until its stop channel is closed.
//
// Locks: none of its own but softLimits' mutex (the runtime's soft memory
// limit shared by the nodes of one process); the watchers call into
// exchange.Alarms and Broker.SetMemoryPressure, which take the core's
// locks, while holding nothing.
package alarm

// Logger is what the watchers log to (a *slog.Logger is one).
type Logger interface{ Warn(msg string, args ...any) }
