package quorum

import (
	"errors"

	"github.com/hashicorp/raft"
)

var (
	// ErrClosed is passed to the done callback of every op that the Log
	// had not proposed when Close was called, and of every op queued after.
	ErrClosed = errors.New("quorum: log closed")
	// ErrCorrupt is wrapped by the error of a Raft entry or a snapshot
	// that does not decode.
	ErrCorrupt = errors.New("quorum: corrupt data")
	// ErrStateOnly is Restore's error for a state-only snapshot (a
	// member's own, on disk): its messages are in the Store of the node
	// that took it, so it cannot be installed elsewhere, nor where that
	// Store lost the queue.
	ErrStateOnly = errors.New("quorum: a state-only snapshot cannot be installed")
	// ErrBadRange is wrapped by Log.DeleteRange's error for a range it
	// cannot carry (empty, across key groups, or more messages than keys).
	ErrBadRange = errors.New("quorum: bad key range")
)

// NotAppendedError is the error of an op the Log never appended to the
// Raft log, so that no member holds it or ever will: the batch holding it
// was never handed to raft.Apply (the Log had failed or was closed), or
// Raft answered that it was not appended — raft.ErrNotLeader (hashicorp/raft
// answers it only for a future it never dispatched: it reached the
// leader loop while stepping down, or a follower's or candidate's loop),
// raft.ErrLeadershipTransferInProgress (a leader rejecting applies while
// it hands over) or raft.ErrEnqueueTimeout (it never reached Raft's loop).
// Such an op may be sent to the queue's next leader instead of failing
// its publisher. raft.ErrLeadershipLost and raft.ErrRaftShutdown are not
// wrapped: the entry may be committed, its outcome is unknown.
//
// Err is the error as the Log got it; errors.Is sees through it. The
// core recognizes it by its NotAppended method (exchange.NotAppended).
type NotAppendedError struct{ Err error }

func (e *NotAppendedError) Error() string { return e.Err.Error() + " (not appended)" }
func (e *NotAppendedError) Unwrap() error { return e.Err }

// NotAppended marks the error for exchange.NotAppended.
func (e *NotAppendedError) NotAppended() bool { return true }

// notAppendedByRaft reports whether err, a future's, says Raft never
// appended its entry (see NotAppendedError).
func notAppendedByRaft(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
		errors.Is(err, raft.ErrEnqueueTimeout)
}
