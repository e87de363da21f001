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
	// EagerBytes: while a batch is in flight, the next one is proposed
	// only once it holds this many bytes (or is closed at MaxBatchBytes);
	// with none in flight it is proposed at once. Waiting for the batch in
	// flight makes the next one bigger, and a Raft entry's costs (its
	// append and sync on every member, its apply, the queue's dispatch of
	// what it committed, the confirms) are paid per entry: one publisher
	// at a time got 17% more through a 3-node cluster on 2 cores
	// (72k → 85k msgs/s, 64 KiB; 16 KiB gave 80k).
	// Past EagerBytes batches are pipelined (many publishers: up to
	// MaxInFlight). Negative proposes every batch as soon as a slot is free.
	EagerBytes int
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

// eagerBytes is DefaultOptions' EagerBytes.
const eagerBytes = 64 << 10

// DefaultOptions returns 1 MiB batches, 8 in flight (a second one once it
// holds 64 KiB), 64 MiB pending.
func DefaultOptions() Options {
	return Options{
		MaxBatchBytes:   1 << 20,
		MaxInFlight:     8,
		EagerBytes:      eagerBytes,
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
	if o.EagerBytes == 0 {
		o.EagerBytes = d.EagerBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
