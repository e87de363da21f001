// Package exchange is Trident's protocol-neutral core: vhosts, exchanges,
// bindings, queues, consumers, deliveries and acknowledgements.
//
// Guarantees:
//   - A queue's state changes only by applying a command (enqueue, deliver,
//     ack, reject/requeue, expire, purge, delete) to its queueState. The
//     command application is deterministic given the same inputs (the current
//     time is an input), so a quorum queue can apply the very same commands
//     through a Raft log.
//   - No protocol type crosses into this package. Front ends translate their
//     frames into calls on VHost, Queue and Consumer, and translate *Error
//     values back into their protocol's error.
//   - A persistent message routed to a durable queue is handed to the Store
//     before Publish returns; PublishOpts.Done is called with true only after
//     the Store reports it durable (group commit).
//
// Lock order: VHost.mu → Exchange.mu → Queue.mu → Limit (atomics only).
// A Sink is called with Queue.mu held and must not block or call back into
// the core synchronously.
package exchange
