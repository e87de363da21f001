// Package groups hosts many hashicorp/raft groups on one node: the
// metadata group and one group per quorum queue.
//
// Every group of a node shares the node's mux (cluster/mux: group "g"
// talks on stream "raft/g") and the node's Raft DB (cluster/raftstore:
// log and stable store DB.Group("g")); each has its own file snapshot
// store under Config.Dir. A group's members are nodes: raft.ServerID is
// the node name, raft.ServerAddress the node's advertised mux address.
//
// # What it guarantees
//
//   - Start gives a running *raft.Raft whose transport, log, stable and
//     snapshot stores belong to that group alone; Start of a running name
//     fails with ErrRunning, so one node never runs two instances of a
//     group.
//   - Timings default to sub-second failure detection on a LAN
//     (DefaultTiming, the metadata group's): a leader that dies is
//     replaced within about one to two seconds. A quorum queue's group
//     runs QuorumTiming (below): replaced within about two to four.
//   - A leader whose process dies while its host stays up (kill -9, a
//     crash, a stop) is replaced in well under a second whatever the
//     timers (peerdown.go): its coalesced heartbeat connections close,
//     a dial to it is refused, and one surviving member of each group
//     it led stands for election at once, as a leadership transfer's
//     target does. A peer that is only slow, frozen or cut off is left
//     to raft's timers, so load never causes an election this way.
//   - A group's heartbeats (and only its heartbeats) travel on the node's
//     coalesced heartbeat stream, every other RPC on the group's own
//     stream; a heartbeat is answered by the group's raft heartbeat
//     handler or fails with an error, as over raft.NetworkTransport. With
//     keepalives (QuorumTiming), raft's heartbeat may instead be answered
//     by the follower's answer to the same heartbeat sent by the node
//     less than 800 ms before, over a connection that has not failed
//     since (keepalive.go).
//   - Stop shuts the group down and closes its transport (its mux stream is
//     free again, so the group may be started again). Drop also deletes its
//     log, stable state and snapshots. Close stops every group, in
//     parallel, and must come before the mux and the DB close.
//
// # Many groups
//
// A node runs one hashicorp/raft instance per quorum queue, a thousand
// or more, most of them idle. An idle hashicorp/raft group is not free:
// its leader heartbeats every follower every HeartbeatTimeout/10 (to
// /5, randomised), and, separately, sends each follower an empty
// AppendEntries every CommitTimeout (to ×2) to carry the commit index;
// over raft.NetworkTransport each is a msgpack-encoded RPC with a write
// and a read syscall on each side and a goroutine hand-off, and the
// latter also reads the previous entry from the log store. With the
// metadata group's timers (heartbeat timeout 500 ms, commit timeout
// 20 ms) that was ~46 RPCs a second per follower per group: 100 idle
// quorum queues cost each node of a local 3-node cluster ~38% of a core,
// and 1,000 saturated the machine until the metadata group lost its
// leader (tridentbench --many-quorum, README).
//
// What this package does about it, keeping hashicorp/raft:
//
//   - Coalesced heartbeats (heartbeat.go, hbcodec.go). Each node keeps
//     one connection per peer (mux stream HeartbeatStream) for the
//     heartbeats of all its groups: a sender gathers what its groups
//     queued for 10 ms and writes it at once, the receiver hands each to
//     its group's heartbeat handler straight from the reader goroutine
//     (raft answers a heartbeat synchronously) and writes all the
//     answers of one read at once. A heartbeat's raft semantics are
//     unchanged (term, leader, contact, the same response): only its
//     framing is shared. This is the CockroachDB/TiKV technique (one
//     heartbeat message per node pair per tick, not per range), done
//     below raft, in the transport, because hashicorp/raft's heartbeat
//     loop is per group and per follower and not ours to change.
//   - Per-group timers (Options.Timing, QuorumTiming). A quorum queue's
//     group waits 1 s (to 2 s) before it elects, and carries an idle
//     commit index every 20-40 s instead of every 20-40 ms (while
//     entries flow, each batch carries it at once, so a loaded queue is
//     not slower; a stream keeps the host's 20 ms, as its consumers read
//     their own member's copy). The cost: failover of a quorum queue in
//     2-4 s rather than 1-2 s.
//   - Keepalives (keepalive.go, Timing.Keepalives). With the timers
//     above and coalescing, 1,000 idle quorum queues still cost each
//     node 18% of a core, and the profile put most of it in
//     hashicorp/raft's per-follower heartbeat goroutines (one timer
//     firing every 100-200 ms for each group and follower, ~4,400
//     wake-ups a second per node) and in answering as many heartbeats.
//     So the node keeps its groups' heartbeats going itself: one loop
//     sends, every 400 ms, each group's latest raft heartbeat to each
//     follower again (all of them in one write per peer), and a member
//     that leads switches its raft to a 3 s heartbeat timeout (raft then
//     heartbeats every 300-600 ms, inside its 900 ms lease), whose
//     heartbeats are answered from the keepalives' answers. A follower
//     still hears from a live leader every 400 ms, well inside its 1 s
//     timeout, and still elects on its own when it does not: failure
//     detection stays raft's, per group. A keepalive is only ever a
//     heartbeat raft sent, repeated only while raft keeps sending it.
//     The price: a leader's lease sees a follower's contact up to 800 ms
//     late (the lease only makes a cut-off leader step down; nothing
//     here reads under it), and a member that stops leading without a
//     new term (a removal, a lease step-down) is repeated for up to
//     1 s more.
//   - Campaign: the declaring node of a new group stands for election as
//     soon as a majority runs the group (CampaignWhenReady probes the
//     peers over the heartbeat stream), so a declaration does not wait
//     out a 1-2 s election timer.
//
// The alternative was a multi-group Raft library (go.etcd.io/raft, as
// etcd, CockroachDB and TiKV drive it): one event loop ticks every group
// and batches all their messages per peer, and an idle group can
// quiesce (no heartbeats at all while nothing changes, failure detection
// per node instead, as RabbitMQ's Ra does with aten). It scales further,
// but it means writing the storage, transport, snapshot and membership
// plumbing that hashicorp/raft gives us (and that cluster/raftstore,
// cluster/quorum and cluster/placement are built on), a change of stored
// log format, and migrating every existing group. Coalescing and timers
// keep all of that, need no change of stored data, and change only the
// node-to-node protocol: a node of this build and one of an older build
// do not exchange heartbeats (the older one has no HeartbeatStream), so
// a cluster is upgraded all at once, like every other node-to-node
// change so far.
package groups
