// Package placement decides where a durable queue's messages live in a
// cluster and keeps them there: it is the node's exchange.Cluster.
//
//   - A classic queue lives on its home node, the node it was declared
//     on. Every other node holds a proxy to it (Remotes: cluster/forward).
//   - A quorum queue (or a clustered stream) is a Raft group ("q/<id>")
//     over the members chosen when it was declared (QuorumMembers). This
//     node runs its member of the group while the queue's recorded
//     members include it (Groups: cluster/groups), bootstrapping the group
//     from the seed members the first time. The member that leads holds
//     the live queue (Queue.BecomeLocal over a quorum.Log); every other
//     node, member or not, holds a proxy to the leader.
//   - While it leads, a member reconciles the group with membership: a
//     member that left the cluster (discovery.StatusLeft, or forgotten)
//     is removed, and while the group is smaller than declared an alive
//     node is added, recorded cluster-wide first (Topology) so that the
//     new member starts its side of the group.
//   - Forgetter, on the node that leads the metadata group, removes the
//     transient queues and exchanges of nodes that are gone.
//   - The cluster operations are records of the metadata group
//     (records.go): ForgetRecord and RebalanceRecord decide what the node
//     an operator asked writes, OpsApplier what every node does once the
//     record is committed (forget the member, hand over leaderships).
//   - Owner (owner.go) chooses the one node that runs a cluster-wide
//     singleton (a shovel or bridge).
//
// # Events, not polling
//
// Leadership comes from raft observations (quorum.Watch). Membership
// changes come in through Placer.Notify (wired to discovery's OnEvent):
// each wakes every reconciler, every bootstrap waiting for a seed's
// address and the Forgetter. A group's first leader is awaited through a
// raft observer. What is still timed: a reconcile pass that failed
// (a metadata write or a Raft configuration change) is retried after
// RetryEvery, and every loop also runs every ResyncEvery, a slow safety
// resync for an event this package could not see (one dispatched before
// Notify was wired, or a change that no event names, such as the
// metadata group's leadership moving, which the Forgetter observes when
// given that group's Raft). Compaction (FSM.SnapshotDue) stays a timer.
//
// # Guarantees
//
// Calls for one queue's group (start, stop, leave) are serialised; a
// queue deleted (Detach) has its group stopped and its log and messages
// dropped; Close stops every group and keeps their data. Attach never
// blocks: it is called with core locks held.
//
// # Lock order
//
// quorumQueue.run (serialises follow and stop) is taken before
// quorumQueue.mu; Placer.mu is never held with another lock. No Raft
// call, core call or network wait is made under Placer.mu or
// quorumQueue.mu.
package placement
