// Package discovery is a node's view of the cluster: which Trident nodes
// exist, how to reach them, and whether they are up. It is
// hashicorp/memberlist (SWIM gossip with suspicion) behind a small API.
//
// # What it guarantees
//
//   - Start binds the gossip port (TCP and UDP) and returns once the local
//     node is alive. If Config.Join is set it tries those seeds once; if none
//     answers, Start still succeeds and keeps retrying in the background
//     (every Config.RetryJoinInterval) until one join succeeds, so nodes of
//     a cluster may be started in any order.
//   - Members lists every node this node has seen since Start, itself
//     included, sorted by name, each with its gossip address, its metadata
//     and a Status: alive, dead (failed: memberlist's suspicion ran out
//     without a refutation) or left (said goodbye with Leave). A dead or
//     left node that comes back with the same name is alive again.
//     StatusSuspect exists for the API but is not reported: memberlist
//     v0.7.0 announces no event for suspicion and does not keep the State
//     of the Node records it hands out (its internal record shadows the
//     field), so everything here is built from its join/leave/update
//     events; a suspected node stays alive until it is declared dead.
//   - memberlist reports a graceful leave exactly like a failure; Leave
//     therefore first tells each live member over TCP that it is leaving,
//     and they record it as left. A member that missed that message
//     records dead.
//   - Config.OnEvent receives join, leave and update (metadata changed)
//     events in the order memberlist saw them, from one goroutine of this
//     package, never under memberlist's locks; a slow handler delays later
//     events, not gossip.
//   - Metadata is a small string map (at most 512 bytes encoded, as
//     memberlist allows); SetMeta changes it and gossips the change.
//   - memberlist's log lines go to the *slog.Logger given to Start
//     (logbridge.NewStdLogger); joins, failures and leaves are logged at
//     Info by this package.
//   - Leave then Shutdown is a graceful exit: peers see "left" at once.
//     Shutdown alone looks like a crash: peers see "dead" after the probe
//     and suspicion timeouts. Both are idempotent and safe in any order.
package discovery
