// Package forward implements exchange.Remote between cluster nodes over
// the cluster's own framed RPC: a proxy queue on this node reaches the
// queue that holds its messages on another node (a classic queue's home,
// a quorum queue's leader) through that node's Server, which calls the
// core directly. The frames (publish, confirm, credit, consume, deliver,
// settle, get, purge, count) are package frame's: versioned, every
// length bounded.
//
// # Connections
//
// One connection per peer address, for every vhost (the vhost travels in
// each frame). It is opened on first use and, once lost, reopened on the
// next use, no sooner than a backoff (50 ms doubling to 5 s) after a
// failed dial. The client opens with Hello (its version); a peer of
// another version answers Refuse and the dial fails with ErrVersion,
// logged as an error on both sides (there is no fallback). The client
// pings every 5 s; a connection on which nothing was read for 30 s is
// dead (a peer that stopped answering).
//
// # What is guaranteed
//
//   - Publish never waits on the network. Messages go, in the order
//     Publish was called for each hop (see below), to the owning node,
//     with the exchange and routing key they were published with, their
//     hop count and, until that node confirmed one of the Remote's
//     publishes, this node's metadata index (SetMetaIndex): the owner
//     waits until it has applied as much before it routes the message,
//     then publishes it to exactly that queue (PublishOpts.Queue; a
//     message published to the queue by name goes through the default
//     exchange, which reaches a direct reply-to name too). done(nil) once
//     the owner accepted it (stored, for a persistent message);
//     done(ErrNacked) if it refused it (the queue rejects publishes, or is
//     not there: a message routed nowhere is refused, not confirmed);
//     done(ErrConnectionLost) when the connection fails before the
//     confirm (nothing is retried: the outcome is unknown, and the core
//     reports it to its publisher), or when the peer cannot be reached
//     for unsentWait (2 s): a publish that never left this node because
//     its owner refused connections (a leader whose process died) waits
//     with those waiting for the queue's location and goes to the node
//     the Locator names next, so a quorum queue's failover nacks only
//     what was on the wire when the leader died. Likewise a publish the
//     owner refuses with frame.ReasonNotAppended (ErrNotAppended: its
//     quorum queue's log never appended it, as a leader handing over
//     answers, so no member holds it) goes to the owner the Locator names
//     next, for at most notAppendedWait (5 s) from its first refusal,
//     then fails as refused: a leadership hand-over nacks nothing. The
//     reason is an ordinary Confirm's, so a node of version 0.1.0 takes it
//     as a refusal (a nack), as before;
//     done(ErrHeader) for a header value the codec cannot carry. done
//     runs on another goroutine, exactly once.
//   - Flow control is credit. The Server grants each hop of a connection
//     MaxPending publishes and grants one back per publish it has
//     settled, except while a resource alarm blocks publishing there: it
//     then grants none until the alarm clears (the way a client
//     connection's reader stops). The client never has more publishes of
//     a hop on the wire than it holds credit for; the rest wait, in
//     order, for credit. Publish never blocks (the core calls it under a
//     proxy queue's lock). When MaxPending publishes of the same link and
//     hop are queued or unconfirmed, PublishPaced (exchange.PacedRemote)
//     still queues the message and returns the wait for room, which the
//     core runs once it has released the queue's lock: that is the owning
//     node's back-pressure reaching the publisher (its connection's
//     reader), as a blocked AMQP connection would, with no core lock held
//     (STYLE 14). Each waiting publisher takes its hop past the budget by
//     the one publish it waits for. The wait's owner is the link: it ends
//     when a publish is settled (its confirm, the stuck check below within
//     30 s, the connection's end) or the link closes, and by its own
//     deadline (35 s) in any case. Slots are released before the done
//     callbacks run.
//   - A queue that moves does not hold its publishers (inflight.go):
//     while a Remote has publishes awaiting their confirm it asks its
//     Locator every 100 ms where the queue is; those sent to an address
//     the queue has left for 500 ms (or to anywhere, 500 ms after the
//     Remote was closed because the queue became local or went away) fail
//     with ErrMoved, and the core nacks them. This is what a frozen
//     leader needs (a SIGSTOPped process, a stuck disk): its connection
//     stays open and nothing confirms. The outcome of a failed one is
//     unknown (the old node may still commit it when it goes on): the
//     publisher republishes, at least once, as RabbitMQ's clients do after
//     a nack. A confirm that comes after the publish failed is ignored:
//     done runs once.
//   - Hops: a message the owning node forwards again (it holds a proxy
//     there: a quorum queue's member that is not the leader, or a view of
//     the queue's home that is a moment behind) carries its hop count and
//     takes the budget and credit of that hop; a message forwarded MaxHops
//     (3) times is refused (ErrTooManyHops), never passed on. Confirms
//     come in any order, so none waits behind another; the per-hop
//     budgets keep a full budget from waiting for room its own next hop
//     needs (publisher.go), so no wait can close a circle.
//   - A connection whose oldest publish has waited 30 s for its confirm is
//     closed with an error in the log (its publishes fail with
//     ErrConnectionLost), so that nothing can hold a link for good.
//   - Consume keeps one upstream consumer (manual acks; prefetch as a
//     window the owner resizes when Consume is called again with another
//     value, or with ConsumeWith the consumer's own prefetch and
//     arguments, a stream's offset) and pushes its deliveries in order.
//     When the connection dies, the owner ends the consumer (its queue
//     was deleted), or the Locator (asked every 500 ms) names another
//     address, the consumer is cancelled (the owner requeues what was
//     unacked), reset is called at once, and the consumer is restarted
//     where the Locator says, with backoff while that fails. Tags carry a
//     generation: a tag pushed before a reset or StopConsuming is ignored
//     by Ack and Nack.
//   - Ack and Nack never block: they are queued and sent by the Remote's
//     goroutine, each run of the same kind as one Settle frame. Unknown or
//     repeated tags are dropped, here and on the owner.
//   - Get, Purge and Count block (the core calls them without locks) for
//     at most 5 s, then return ErrTimeout and drop the connection. A Get's
//     unacked message is its connection's until settled: the owner
//     requeues it when the connection ends.
//
// # The Server
//
// The transport is the authentication (the cluster multiplexer checks the
// cookie, or mutual TLS): a peer acts with every permission on every
// vhost, is not counted against connection or rate limits, and has no
// consumer timeout (the node its client is connected to times out the
// client). Its reader never waits on the core's behalf: publishes go to
// their hop's worker (a queue that can never fill, as it holds at most
// the credit granted), consumes, window changes, cancels and settles to
// the connection's consumers' goroutine, in order (a stream consumer's
// cancel writes its offset through the metadata log, which waits on the
// network), Get, Purge and Count to goroutines of their own (64 at once
// at most).
// The core's callbacks (confirms, deliveries, under core locks) only
// append to the connection's writer; a consumer whose deliveries find
// 4 MiB queued pauses until the writer drains. A worker waits for the
// metadata index (briefly) and may wait in the core: a publish to a queue
// that is a proxy here too waits for its own next hop's budget, which is
// what carries back-pressure along the hops.
//
// # What changed from the AMQP transport
//
// Until issue 16 this package was an amqp091-go client of a hidden AMQP
// listener (protocol/amqp ServeInternal, headers x-trident-*). Every
// guarantee above held there too, with these differences:
//
//   - Confirms come in any order (AMQP released a channel's in order),
//     so the per-hop budgets are what breaks wait circles, no longer
//     per-hop channels.
//   - One connection per peer, not per (peer, vhost): MaxPending is per
//     peer and hop, the stuck check per connection (they were per vhost
//     and channel). A connection stuck for 30 s fails all its publishes.
//   - Back-pressure is explicit credit, withheld during a resource alarm
//     (it was TCP back-pressure from a blocked AMQP reader).
//   - Acks go as Settle frames of delivery ids (they were one
//     multiple=true basic.ack per run from the oldest unacked).
//
// # Limits
//
//   - Expiration is passed on as it was set, so the per-message TTL
//     restarts on the owning node.
//
// # Locks
//
// Client: remote.getMu → remote.mu → Forwarder.mu → link.mu → conn.mu;
// remote.mu → publisher.mu; remote.mu → the Locator's locks; the wait
// for room holds only publisher.mu (in its sync.Cond);
// pubFlights.mu, session.mu and the writer's are leaves (conn.mu is never
// held while taking publisher.mu). Server: the core's
// queue lock → scons.mu → sconn.mu, sconn.pmu → the writer's; no core call
// is made with a lock of this package held. No callback (done, push,
// reset) runs with a lock of this package held.
package forward
