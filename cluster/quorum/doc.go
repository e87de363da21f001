// Package quorum keeps a quorum queue's messages in the queue's Raft group
// (hashicorp/raft): one group per queue, every member holding the same
// replicated state, so that whichever member leads next can rebuild the
// queue.
//
// # Pieces
//
//   - FSM (raft.FSM, raft.BatchingFSM): the state. The queue's messages
//     live in the node's message store (Store, the same Badger as the
//     classic queues') under the queue's id and the keys the core gives
//     them, written as entries are applied; in memory the FSM keeps only
//     counts per key group (the key's top byte: a priority level), the
//     return counts of messages that came back, and its applied index. A
//     state record in the store (StateQID) holds those, so the group runs
//     with NoSnapshotRestoreOnStart and a restart reads no message.
//     A snapshot on disk holds the state alone (a few bytes whatever the
//     backlog); SnapshotStore adds the messages, read from the store, only
//     when Raft sends one to a member, and Restore installs such a full
//     stream (snapshot.go, snapstore.go). With write-behind on (a quorum
//     queue's members; not a stream's) applied appends wait in a small
//     bounded buffer and a delete of a buffered one cancels both, so a
//     message acked while buffered never touches the store; a state
//     record names the last entry whose ops are all in the store (a
//     restart applies the later ones' ops to the store again), and the
//     leader's queue pages only what OnStored reports (behind.go).
//   - Log: exchange.MessageLog and exchange.ReturnLog on the leader.
//     AppendMessage, DeleteMessage and ReturnMessage queue ops that are
//     group-committed into Raft entries (codec.go), several entries in
//     flight, and report each append's commit through its callback.
//     DeleteRange queues one op that removes a key range (a stream's
//     retention dropping its head): every member applies it as one range
//     delete of its store, and its counts go down by the count and bytes
//     the op carries (the leader's store's, when it proposed it).
//   - Watch: tells the node when it leads the group with an FSM that
//     holds every committed entry (after raft.Barrier), and when it stops.
//
// # Guarantees
//
//   - Apply is deterministic: the state (the store's messages and the
//     counts) is a function of the entries applied. An entry that does
//     not decode changes nothing and returns an error wrapping ErrCorrupt.
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
//   - Memory: nothing per message but for returned ones (a map entry
//     until the message is deleted) and the write-behind buffer's (at
//     most 262,144 messages and 32 MiB per FSM, 64 MiB for all of a
//     process's FSMs together); message data only while an entry is
//     being applied or buffered. Decoding a snapshot or an entry never allocates much
//     more than its input, and malformed input is an error, never a panic.
//   - The core appends each key once and deletes only keys it appended,
//     once: the counts rely on it (the FSM does not read the store to
//     check). A range delete's count and bytes are the proposer's, which
//     reads them from its store when nothing queued before it touches
//     the range; the FSM clamps them to what its groups hold. Group byte sums shrink by the group's average on delete, so
//     they are estimates (exact for equal sizes, 0 when a group empties).
//   - Crash: the state record is issued after the ops it covers, through
//     the same ordered store, every 100 ms at most (1 s with write-behind,
//     its buffer flushed first) and at each snapshot (made durable before
//     Raft truncates its log); entries after it are applied again at
//     restart, which changes nothing twice. Entries up to the Raft log's
//     last index at start are written through when applied again (their
//     messages may have reached the store before the crash), and so are
//     appends of keys an installed snapshot held.

// # Locks
//
// FSM.mu guards the state; nothing is called with it held. Log.mu guards
// the queued batches and Log.nmu the completed ones; neither is held
// while taking the other, nor while calling Raft or a callback.
//
// # Wiring (per quorum queue, on each member)
//
//	fsm, err := quorum.NewFSM(nodeStore, qid, log)
//	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
//	var ql *quorum.Log
//	w := quorum.Watch(r, 5*time.Second, func(leader bool) {
//		if leader {
//			ql, _ = quorum.New(r, quorum.Options{Logger: log, Applied: q.LogApplied})
//			// the core's queue reads fsm.Groups() and the store
//			// the core's queue uses ql as its MessageLog
//		} else if ql != nil {
//			ql.Close() // the queue becomes a proxy to the new leader
//		}
//	})
package quorum
