// Package quorum keeps a quorum queue's messages in the queue's Raft group
// (hashicorp/raft): one group per queue, every member holding the same
// replicated state, so that whichever member leads next can rebuild the
// queue.
//
// # Pieces
//
//   - FSM (raft.FSM, raft.BatchingFSM): the state, the queue's messages
//     in seq order, each an opaque byte string (the core's encoding) and
//     a return count (deliveries that came back, for x-delivery-limit).
//     Messages walks it in seq order for a new leader; Len and Bytes
//     size it. Snapshot/Restore stream it (snapshot.go).
//   - Log: exchange.MessageLog and exchange.ReturnLog on the leader.
//     AppendMessage, DeleteMessage and ReturnMessage queue ops that are
//     group-committed into Raft entries (codec.go), several entries in
//     flight, and report each append's commit through its callback.
//   - Watch: tells the node when it leads the group with an FSM that
//     holds every committed entry (after raft.Barrier), and when it stops.
//
// # Guarantees
//
//   - Apply is deterministic: the state is a function of the entries
//     applied. Append of an existing seq replaces its data (and keeps its
//     return count); Delete and Return of an unknown seq do nothing; an
//     entry that does not decode changes nothing and returns an error
//     wrapping ErrCorrupt.
//   - Ops are applied in the order they were queued on the Log. An
//     append's done(nil) means a majority holds it and this node's FSM
//     has applied it: it survives the loss of any minority, leader
//     included. done(err) means it may or may not be committed.
//   - A Log fails for good on its first error and then proposes nothing;
//     the FSMs hold a prefix of the queued ops (see Log).
//   - The Log never blocks its caller on Raft, except past
//     Options.MaxPendingBytes (64 MiB) of queued, unproposed ops; done
//     callbacks run on the Log's own goroutine, never inside the call
//     that queued them, so they may take the lock the caller held.
//   - Memory: a 40-byte slot per message plus its data, in one
//     seq-ordered slice (binary search, no map); deleted slots are
//     compacted away once they are more than half the slice (amortised
//     O(1)), so at most 80 bytes a message plus data; a FIFO queue's
//     deletes at the head cost nothing until then. Snapshot copies the
//     live slots, not the data. Decoding a
//     snapshot or an entry never allocates much more than its input, and
//     malformed input is an error, never a panic.
//
// # Locks
//
// FSM.mu guards the state; nothing is called with it held. Log.mu guards
// the queued batches and Log.nmu the completed ones; neither is held
// while taking the other, nor while calling Raft or a callback.
//
// # Wiring (per quorum queue, on each member)
//
//	fsm := quorum.NewFSM()
//	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
//	var ql *quorum.Log
//	w := quorum.Watch(r, 5*time.Second, func(leader bool) {
//		if leader {
//			fsm.Messages(rebuild) // the queue's messages, seq order
//			ql, _ = quorum.New(r, quorum.Options{Logger: log})
//			// the core's queue uses ql as its MessageLog
//		} else if ql != nil {
//			ql.Close() // the queue becomes a proxy to the new leader
//		}
//	})
package quorum
