package quorum

import "errors"

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
