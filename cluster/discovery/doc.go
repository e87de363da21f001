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
//   - With Config.DNS set (dns.go, seeds.go), seeds also come from DNS: a
//     name's A/AAAA records (each address with DNSConfig.Port, or the
//     node's own gossip port) or an SRV name's records (each target's
//     addresses with the record's port), asked of DNSConfig.Server or the
//     system's resolver, never cached. Start returns without waiting for
//     DNS; a goroutine resolves at once, then every Interval while fewer
//     than max(Expect, 2) members are alive and every SettledInterval
//     afterwards, for as long as the node runs. Each round joins the
//     resolved seeds and Config.Join's, leaving out this node's own
//     addresses (the advertised one, and the bound address or, bound to
//     every address, each local IP, at its gossip port) and alive
//     members' addresses. A failed lookup (NXDOMAIN, no address, a
//     server that does not answer within 5s) is retried at the next
//     round; it is logged when the outcome changes, not every round.
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
