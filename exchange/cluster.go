package exchange

// What the core needs from a cluster (issue 7). The core knows nothing of
// Raft or of the network: the node wires these interfaces to cluster/*.
//
//   - Topology writes (MetaOp) go through the node's Store as before; in a
//     cluster that Store replicates the records of replicated prefixes
//     through the metadata Raft group, and every node applies every
//     committed record with Broker.ApplyMeta (idempotent: a record equal to
//     what memory holds changes nothing, so the node that made the change
//     and replays after a restart are no-ops).
//   - A queue's messages live in a MessageLog: the node's Store for classic
//     queues, the queue's Raft group for quorum queues on the node that
//     leads it.
//   - A queue whose messages live on another node (a classic queue homed
//     elsewhere, a quorum queue led elsewhere) is a proxy: publishes,
//     consumes, acks and gets go to that node through a Remote.

// MetaOp is one topology record write: a put (Val non-nil), a delete
// (Val nil) or, with Prefix set, the delete of every key starting with Key.
type MetaOp struct {
	Key    string
	Val    []byte
	Prefix bool
}

// MessageLog is where a queue keeps its messages. The node's Store is
// one; a quorum queue's Raft group is another.
type MessageLog interface {
	// AppendMessage stores message seq of queue qid; done (may be nil)
	// is called once it is durable (committed by a majority, for a
	// quorum queue) or with an error. data is copied.
	AppendMessage(qid, seq uint64, data []byte, done func(error))
	// DeleteMessage removes message seq (batched, not waited for).
	DeleteMessage(qid, seq uint64)
}

// ReturnLog is implemented by a MessageLog that counts deliveries across
// failovers (quorum queues): ReturnMessage records that seq was delivered
// and came back (requeued), for x-delivery-limit.
type ReturnLog interface {
	ReturnMessage(qid, seq uint64)
}

// Remote reaches a queue whose messages live on another node. Its
// methods may be called with the proxy queue's lock held and must not
// block on the network: they queue work and report through callbacks.
type Remote interface {
	// Publish sends m to the queue. done(nil) once the owning node
	// accepted it (confirmed it, for a persistent message), done(err)
	// if it did not. done is called exactly once, from another goroutine.
	Publish(m *Message, done func(error))
	// Consume starts (or, with prefetch changed, resizes) the upstream
	// consumer: up to prefetch unacked messages are pushed to push, in
	// order, from another goroutine. reset is called when the upstream
	// consumer was lost (node down, leader change) and restarted: every
	// tag pushed before is dead (its message will be redelivered).
	Consume(prefetch int, push func(m *Message, tag uint64, redelivered bool), reset func())
	// StopConsuming cancels the upstream consumer; its unacked messages
	// go back to the queue.
	StopConsuming()
	// Ack and Nack settle a pushed delivery. A tag from before a reset
	// is ignored.
	Ack(tag uint64)
	Nack(tag uint64, requeue bool)
	// Get takes one message (basic.get) from the owning node; tag is for
	// Ack/Nack unless noAck. ok false when the queue is empty.
	Get(noAck bool) (m *Message, tag uint64, redelivered bool, remaining int, ok bool, err error)
	// Purge removes the queue's ready messages on the owning node.
	Purge() (int, error)
	// Count returns the owning node's ready message and consumer counts.
	Count() (messages, consumers int, err error)
	// Close stops everything (the proxy queue is gone or became local).
	Close()
}
