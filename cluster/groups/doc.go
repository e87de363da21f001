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
//     (DefaultTiming): a leader that dies is replaced within about one to
//     two seconds.
//   - Stop shuts the group down and closes its transport (its mux stream is
//     free again, so the group may be started again). Drop also deletes its
//     log, stable state and snapshots. Close stops every group, in
//     parallel, and must come before the mux and the DB close.
package groups
