// Package exchange is Trident's protocol-neutral core: vhosts, exchanges,
// bindings, queues, consumers, deliveries and acknowledgements.
//
// Guarantees:
//   - A queue's state changes only by applying a command to its queueState
//     (qstate.go, qcommands.go): enqueue, deliver, settle, requeue, expire,
//     trim, purge, and the commands by which the world outside sets it:
//     restore (recovery, a log becoming local), forget (a switch of role),
//     gate and release (a log's commits), set args (a policy), buffer (a
//     proxy's remote deliveries). A command changes the state and records
//     what it does outside it as ordered effects (store writes, dead
//     letters, credit), which the Queue carries out; the state reads the
//     store only through its env, after its queued writes are issued. The
//     state runs alone in TestQueueStateAlone, a map for a store.
//   - The Queue is the handle the vhost, the front ends and the API hold;
//     where its messages live is its role (role.go): the node's store
//     (localRole), a Raft log led here (leaderRole) or another node
//     (proxyRole). A classic queue's and a quorum queue's leader apply the
//     same commands; a leader's writes go to the log, so the log is the
//     sequence of the commands' effects on the durable state as the leader
//     applied them, and every member's FSM applies that sequence to its
//     store (cluster/quorum). Deliveries are not logged (no per-delivery
//     consensus round): the leader decides drop-head, expiry and
//     dead-lettering, which depend on what it has delivered, and the log
//     carries the outcome; a new leader redelivers what was unacked.
//   - No protocol type crosses into this package. Front ends translate their
//     frames into calls on VHost, Queue and Consumer, and translate *Error
//     values back into their protocol's error.
//   - A persistent message routed to a durable queue is handed to the Store
//     before Publish returns; PublishOpts.Confirmer is told ok=true only
//     after the Store reports it durable (group commit). A publish whose
//     result is not Pending is final when Publish returns.
//   - Routing a message allocates nothing; a vhost's topology is read under
//     a shared lock, and each queue has its own lock.
//   - Resource alarms (Alarms) are raised by the node and honoured by the
//     front ends: publishers wait, consumers drain.
//   - Policies (policy.go) change a queue's effective settings only under
//     its lock, through the same commands; a queue's declared arguments
//     never change.
//   - Events (events.go, exchange/event) go to amq.rabbitmq.event, an
//     internal topic exchange of the event vhost, and are built only while
//     something is bound to it: topology events from VHost.Do (once, on the
//     node the command was made on), consumer events from Consume and
//     Cancel, vhost, policy and alarm events where those change. The bus
//     takes no core lock and may be called under any (its own mutex is a
//     leaf); it publishes from its own goroutine.
//
// Lock order: VHost.metaMu → VHost.mu → Queue.mu → Limit.mu (a leaf).
// Policy re-evaluation holds VHost.mu (shared) and Queue.mu together and
// dead-letters after releasing both.
// Store writes for topology changes happen under metaMu only, never under
// VHost.mu, so routing never waits for an fsync.
// A quorum queue led here (commit.go) appends to its log under Queue.mu
// (Queue.mu → the log's locks); the log reports commits through
// Queue.LogApplied from its own goroutine holding none of its locks, and
// only committed messages are delivered, got, browsed, expired or dropped.
// A Sink is called with Queue.mu held and must not block or call back into
// the core synchronously.
// Delayed exchanges and retries (delayed.go, retry.go; the delay queue in sched): a sched.Delayer's mu
// comes after Queue.mu (a retry is scheduled under the queue's lock) and
// after VHost.mu (start and stop); a delayer routes due messages holding
// no lock of its own. It holds messages in the store, keyed by due time,
// with a bounded window in memory; a held persistent message of a durable
// delayed exchange survives a crash and is routed at least once.
// Streams (stream.go, streamcluster.go, the log in streamlog) keep their state in a
// *stream behind the Queue handle and take no Queue.mu on their paths but
// the cluster switch (BecomeLocal/BecomeProxy): stream.mu → streamlog.Log.mu;
// streamlog.Log.fmu (a clustered stream's index rebuilt from the store, or a
// follower's refreshed) → streamlog.Log.mu, fmu never taken under either;
// a stream's Sink calls run with stream.mu held; the store's callbacks
// never take stream.mu (a wake loop does). A confirmed message of a stream
// is durable in its log (or committed by a majority, clustered) and
// consumers read only durable messages.
package exchange
