package quorum

import (
	"errors"
	"log/slog"
	"time"
)

// Options tunes a Log. Zero fields take the values of DefaultOptions.
type Options struct {
	// MaxBatchBytes closes a batch (one Raft entry) once its encoding
	// reaches this size; an op bigger than it is a batch of its own.
	MaxBatchBytes int
	// MaxInFlight is how many batches may be proposed and not yet
	// committed and applied at once (pipelining).
	MaxInFlight int
	// MaxPendingBytes bounds the encoded ops queued and not yet proposed.
	// Past it AppendMessage, DeleteMessage and ReturnMessage block until
	// Raft catches up (or fails, or the Log is closed): the only way they
	// ever block.
	MaxPendingBytes int
	// ApplyTimeout is passed to raft.Apply: how long to wait for Raft to
	// take a batch. Zero waits as long as it takes.
	ApplyTimeout time.Duration
	// Logger gets a warning when the Log fails. Nil discards.
	Logger *slog.Logger
	// Applied, if not nil, is called (on the Log's notifier goroutine,
	// before the batch's done callbacks) with the key of the last append
	// of each batch committed and applied by this node's FSM: every
	// append queued up to it is in the node's Store (or deleted since).
	// With it set the Log is an exchange.CommitLog that reports: the
	// core's queue then delivers only the messages reported applied, so
	// it must reach the queue (Queue.LogApplied).
	Applied func(key uint64)
}

// DefaultOptions returns 1 MiB batches, 8 in flight, 64 MiB pending.
func DefaultOptions() Options {
	return Options{
		MaxBatchBytes:   1 << 20,
		MaxInFlight:     8,
		MaxPendingBytes: 64 << 20,
	}
}

// Validate reports negative fields.
func (o Options) Validate() error {
	if o.MaxBatchBytes < 0 || o.MaxInFlight < 0 || o.MaxPendingBytes < 0 || o.ApplyTimeout < 0 {
		return errors.New("quorum: negative option")
	}
	return nil
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = d.MaxBatchBytes
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = d.MaxInFlight
	}
	if o.MaxPendingBytes == 0 {
		o.MaxPendingBytes = d.MaxPendingBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
