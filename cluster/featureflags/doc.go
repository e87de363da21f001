// Package featureflags is the registry of the cluster's feature flags, as
// RabbitMQ has them: a flag names a change of what nodes write to each
// other (a Raft entry kind, a record version) that a node of an older
// release cannot read. A writer uses the new kind or version only once
// the flag is enabled, and a flag is enabled only once every member of
// the metadata group supports it, by one record committed through the
// metadata group (cluster/meta), so every node agrees.
//
// # What it guarantees
//
//   - The registry (registry.go) is this release's: each flag with its
//     description, stability and the release that brought it. A node
//     supports exactly the flags of its registry, and says so in its
//     gossiped metadata under GossipKey; a node of v0.1.0, which knows no
//     flags, gossips nothing there and so supports none of them.
//   - Required flags are the formats of v0.1.0: every node supports them
//     and they are always enabled.
//   - A Set is the enabled flags of this node's cluster as the metadata
//     group applied them (the records under RecordPrefix, replicated,
//     kept in the node's local store and in the group's snapshots). It is
//     safe for concurrent use; it only grows.
//
// This package is pure: no network, no store; cluster/meta proposes and
// applies the enable command and answers which members support what.
package featureflags
