// Package forward implements exchange.Remote over AMQP 0-9-1: a proxy
// queue on this node reaches the queue that holds its messages on another
// node (a classic queue's home, a quorum queue's leader) through that
// node's internal AMQP listener (protocol/amqp Server.ServeInternal),
// with github.com/rabbitmq/amqp091-go as the client.
//
// # Connections
//
// One connection per (peer address, vhost), since an AMQP connection is
// bound to a vhost. It is opened on first use and, once lost, reopened on
// the next use, no sooner than a backoff (50 ms doubling to 5 s) after a
// failed dial. Heartbeats (10 s) detect a peer that stopped answering.
//
// # What is guaranteed
//
//   - Publish never waits on the network. Messages go, in the order
//     Publish was called, through a confirm-mode channel of the
//     connection (one per hop, see below) to the default exchange with
//     the queue's name as routing key
//     (mandatory false), every property and header as they are. done(nil)
//     on basic.ack; done(ErrNacked) on basic.nack; done(ErrConnectionLost)
//     when the channel or connection fails before the confirm, or when the
//     peer cannot be reached (nothing is retried: the outcome is unknown,
//     and the core reports it to its publisher). done runs on another
//     goroutine, exactly once.
//   - A queue that moves does not hold its publishers (inflight.go):
//     while a Remote has publishes awaiting their confirm it asks its
//     Locator every 100 ms where the queue is; those sent to an address
//     the queue has left for 500 ms (or to anywhere, 500 ms after the
//     Remote was closed because the queue became local or went away) fail
//     with ErrMoved, and the core nacks them. This is what a frozen
//     leader needs (a SIGSTOPped process, a stuck disk): its connection
//     stays open, nothing confirms, and since a channel's confirms are
//     released in order, every later publish of the same publisher would
//     wait for it. The outcome of a failed one is unknown (the old node
//     may still commit it when it goes on): the publisher republishes, at
//     least once, as RabbitMQ's clients do after a nack. A confirm that
//     comes after the publish failed is ignored: done runs once.
//   - Back-pressure: Publish blocks while MaxPending (10,000) publishes of
//     the same connection and hop are queued or unconfirmed. Slots are
//     released before the done callbacks run.
//   - Hops: a message the owning node forwards again (it holds a proxy
//     there: a quorum queue's member that is not the leader, or a view of
//     the queue's home that is a moment behind) carries its hop count
//     (exchange.ForwardHopsHeader) and goes on that hop's own channel and
//     budget; a message forwarded MaxHops (3) times is refused
//     (ErrTooManyHops), never passed on. Since amqp091-go releases a
//     channel's confirms in order, this is what keeps a confirm from
//     waiting behind one that waits for it (publisher.go).
//   - A channel whose oldest publish has waited 30 s for its confirm is
//     closed with an error in the log (its publishes fail with
//     ErrConnectionLost), so that nothing can hold a link for good.
//   - Consume keeps one upstream consumer (a channel of its own, manual
//     acks, prefetch as a channel-wide basic.qos, which unlike a
//     per-consumer one applies to the running consumer when Consume is
//     called again with another value) and pushes its deliveries in
//     order. When the channel or connection dies, or the Locator (asked
//     every 500 ms) names another address, the channel is closed (the
//     owner requeues what was unacked), reset is called at once, and the
//     consumer is restarted where the Locator says, with backoff while
//     that fails. Tags carry a
//     generation: a tag pushed before a reset or StopConsuming is ignored
//     by Ack and Nack.
//   - Ack and Nack never block: they are queued and sent by the Remote's
//     goroutine, a run of acks from the oldest unacked delivery as one
//     multiple=true basic.ack. Unknown or repeated tags are dropped.
//   - Get, Purge and Count block (the core calls them without locks) for
//     at most 5 s, then return ErrTimeout and drop the connection.
//
// # Limits
//
//   - A message forwarded here reaches the owning node through the default
//     exchange: consumers there see exchange "" and the queue's name as
//     routing key, not what it was first published with.
//   - The owning node acks a publish to a queue it does not have (it is
//     unroutable, and mandatory is false).
//   - Expiration is passed on as it was set, so the per-message TTL
//     restarts on the owning node.
//
// # Locks
//
// Forwarder.mu → publisher.mu; link.ctlMu → link.mu; remote.getMu →
// remote.mu → pubFlights.mu; confirmChan.mu and pubFlights.mu are leaves. No callback (done,
// push, reset) runs with a lock of this package held.
package forward
