// Package drain is a node's maintenance mode, as RabbitMQ's
// "rabbitmq-upgrade drain" and "revive": a drained node accepts no new
// client connections on its protocol listeners (its HTTP API and cluster
// ports stay up), has closed the client connections it had, and has
// handed every Raft leadership it held (quorum queues, streams, the
// metadata group) to another voter; revive opens the listeners again.
//
// Guarantees:
//   - A Gate's listeners keep their bound address across Suspend and
//     Resume: a suspended listener's socket is closed (clients get
//     "connection refused"), a resumed one is bound again on the same
//     host:port. A server's Accept on a suspended listener blocks until it
//     is resumed or closed, so servers need not know about maintenance.
//   - Drainer.Drain and HandOver are bounded by their context: a peer
//     that does not take a leadership in time leaves it here (logged).
//   - Quiesce is a stop's first step in a cluster (SIGTERM): the same
//     sequence without the recorded state, after waiting (at most a
//     second) for the closed clients to go, so that a publish the
//     hand-over fails is not nacked to a client that would not publish
//     it again elsewhere.
//   - The drained state survives a restart: it is a marker file in the
//     node's data directory (Drainer.Restore applies it at start), as
//     RabbitMQ keeps it in the node's own state until "revive".
package drain
