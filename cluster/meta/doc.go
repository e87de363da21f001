// Package meta is the metadata Raft group ("meta"): every node of a
// cluster is a member, and every change of the cluster-wide state goes
// through it, so every node holds the same topology. The core proposes
// its topology changes as commands (Group.ProposeTopology, for
// exchange.TopologyProposer), written as a KindTopology entry once the
// feature flag topology_commands is enabled, else as the records the
// command makes (Config.TopologyRecords: exchange.Broker.RecordsOf) in a
// version 1 entry, which a v0.1.0 member reads. The other records every
// node holds are written by an explicit call of a Replicator, never
// picked out of a store's writes by their key: users and permissions,
// parameters (while the flag is off), MQTT's retained messages and
// sessions, stream offsets, quorum queues' and streams' members records,
// a restarted node's deletes of its stale transient records, the cluster
// name and forget's and rebalance's records. Feature flags are commands
// (KindEnableFlag).
//
// # Pieces
//
//   - Replicator (replicator.go) implements the small interfaces the
//     writers own (exchange.Replicator, auth.Replicator,
//     shovel.Replicator, mqtt.Replicator). Once attached to the Group,
//     each call is proposed as one version 1 entry of its records and
//     returns when committed and applied here; before Attach it writes
//     to the local store (a node's start-up defaults), after Detach it
//     fails with ErrDetached. The writers are given the plain local store
//     for their own records.
//   - Group (group.go) runs the node's member of the group on a
//     groups.Host. Propose applies on the leader or forwards to it over
//     the mux stream "meta-rpc" (rpc.go), retrying across leader changes
//     until its context ends.
//   - The FSM (fsm.go) decodes an entry (codec.go: version 1, a batch of
//     exchange.MetaOp; version 2, a typed Command: a feature flag's
//     enabling, or a topology change, KindTopology, carrying an
//     exchange.TopologyCommand that StoreApplier.ApplyTopology hands to
//     the core, exchange.Broker.ApplyCommitted, writing the records it
//     returns to the local store; a change of the user database,
//     KindUsers, an encoded auth.Command that StoreApplier.ApplyUsers
//     hands to auth.Users.ApplyCommittedEntry; a parameter's change,
//     KindParameters, an encoded shovel.Command for
//     shovel.Manager.ApplyCommittedEntry — those two are opaque here,
//     their packages decode them and report a newer format with an
//     Unreadable() method, on which the FSM halts) and hands the ops of a
//     version 1 entry to an Applier; StoreApplier
//     (applier.go) is the node's: it writes the ops into the local store
//     and calls hooks (Broker.ApplyMeta, Users.ApplyMeta) so memory
//     follows.
//   - BootstrapExpect and Reconcile (reconcile.go) form the group from
//     discovery's members and keep its configuration in line with them.
//
// # What it guarantees
//
//   - A Propose that returns nil was committed by a majority and applied
//     on the leader, on the proposing node and on every other member that
//     answered within a short wait (spread.go): a declaration is visible
//     on every reachable node when it returns. Every member applies it, in
//     log order, once its log catches up. A Propose that fails with ErrNotCommitted may still have
//     been committed (a timeout does not cancel): ops are idempotent
//     records, and a retried batch applied twice changes nothing.
//   - A create (exchange.MetaOp.Create: a declaration's record, written
//     by Group.ProposeTopology while topology commands are off) is a put that
//     every member applies only if the key holds no other record, decided
//     from the replicated records at the entry's index, so alike on every
//     node: of two nodes declaring one queue or exchange at once, the
//     first committed wins everywhere and the other's write changes
//     nothing (the core then adopts the winner, exchange/queuedecl.go).
//   - A put of an ordered key (StoreApplier.Stamp: a stream's named
//     offsets, exchange.MetaStamp) that orders before the stored record
//     is left out on every member alike: several nodes write such a key,
//     each retrying across leader changes, and a write proposed earlier
//     may commit after a later one; the record's order, not the commit
//     order, says which record is the key's.
//   - The local store is the FSM's state: the index of the last applied
//     entry is kept in it under AppliedKey, written after each entry, and
//     entries at or below it are skipped when Raft replays its log at
//     start (the group runs with NoSnapshotRestoreOnStart). A crash
//     between applying an entry and recording its index replays that one
//     entry: Appliers must be idempotent.
//   - A snapshot is every replicated record at the applied index, taken on
//     the FSM goroutine; installing one (a member too far behind) replaces
//     the member's replicated records by the snapshot's.
//   - Membership: with bootstrap_expect N, every node without state waits
//     for N alive members and bootstraps with all of them; afterwards the
//     leader adds alive members that are not voters (on discovery events
//     through Kick and every ReconcileInterval) and removes members that
//     left on purpose. Dead members stay voters.
//   - Feature flags (featureflags.go, cluster/featureflags): a typed
//     command is written only once the flag of its kind is enabled, and a
//     flag is enabled by a KindEnableFlag command proposed only when every
//     server of the configuration is running and gossips support for it.
//     The enabled flags are replicated records (the local store, the
//     snapshots), loaded at Start. The leader adds no member that lacks an
//     enabled flag. An entry of a version or kind this node does not
//     know halts the FSM (ErrUnreadable): it and every later entry stay
//     unapplied, never skipped; a local store with an unknown flag
//     enabled fails Start.
//
// # Limits
//
//   - Records a node wrote locally before Attach (its start-up defaults)
//     are not replicated; nodes started from the same configuration
//     create the same ones.
//   - If a node's local store is lost but its Raft directory is not, the
//     node must drop its Raft state (or be removed and re-added) to get
//     the records again.
//   - Two nodes each bootstrapped alone (bootstrap_expect 0, no join) and
//     then joined by gossip do not merge their metadata: the leader that
//     adds the other overwrites its log.
package meta
