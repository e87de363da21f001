// Package mux carries many named byte streams over one TCP listener
// (cluster.raft_listen, default port 25673), so that every Raft group of a
// node — the metadata group and one group per quorum queue — and the
// node-to-node RPCs share one port instead of a port per group.
//
// # Wire protocol
//
// A connection belongs to one stream for its whole life. The dialer opens
// it (after the TLS handshake, with WithTLS) with a header (header.go):
//
//	magic "TRMX" | version 2 | len name | name | len nonce | nonce | len addr | addr
//
// each length one byte (so a header is at most 773 bytes), name non-empty,
// nonce NonceLen (32) fresh random bytes, addr the dialer's advertised mux
// address (how this node is known to the others: its Raft ServerAddress).
// Then each side proves it knows the cluster's cookie without sending it
// (auth.go):
//
//	acceptor → dialer: StatusChallenge | nonce' (32) | HMAC(cookie, "trmx2 acceptor", stream, target, addr, nonce, nonce')
//	dialer → acceptor: HMAC(cookie, "trmx2 dialer", stream, target, addr, nonce, nonce')
//	acceptor → dialer: status
//
// where target is the address the dialer dialled, which must be the
// acceptor's advertised address. A dialer that cannot verify the
// acceptor's proof sends a proof that fails and hangs up; the acceptor
// answers a proof that fails with StatusBadCookie. Any status but
// StatusOK is followed by the acceptor closing the connection (a header
// it cannot read gets a status instead of the challenge). After StatusOK
// the connection is the stream's: the mux reads and writes nothing more
// on it.
//
// # What it guarantees
//
//   - A header is read under a deadline (HandshakeTimeout) into a buffer of
//     at most MaxHeaderLen bytes: a silent or hostile peer costs one
//     goroutine for at most that long and no more memory.
//   - There is no mux without a cookie (Listen refuses an empty one). The
//     cookie (the cluster's shared secret, RabbitMQ's Erlang cookie)
//     never crosses the wire: a node outside the cluster that is dialled
//     (the metadata leader probes every node in the gossip ring) learns
//     nothing it could log in with; proofs are compared in constant time,
//     hold for one handshake (both nonces fresh) and one address (a
//     member's handshake cannot be relayed to a third node). A refusal is
//     logged at WARN on both ends, at most once a minute per peer.
//     Without TLS the cookie authenticates, it does not encrypt: the
//     stream's bytes are then in clear and not integrity-protected, so
//     production clusters use WithTLS (cluster.tls) as well.
//   - With WithTLS (tls.go) every connection is mutual TLS before the
//     header: both ends present a node certificate and verify the other's
//     against the cluster's CA (NodeTLS; no host name check), the TLS
//     configuration is asked for anew for each connection (a reloaded
//     certificate applies from the next one), and a failed handshake is
//     logged and closes the connection before any header is read. The
//     cookie is still checked, inside TLS: a second factor.
//   - A stream's connections go to the Listener registered for its name;
//     a name with no listener gets StatusUnknownStream, so a dialer that is
//     early (the group is not started yet on the peer) fails fast and
//     retries, as Raft does.
//   - SetBlocked (fault injection for partition tests) is immediate: once
//     it returns, dials to a blocked address fail with ErrBlocked, headers
//     from a blocked address get StatusBlocked, and every connection made
//     with a blocked address, in either direction, is closed. A peer is
//     identified by the address it advertises in its header, not by its
//     TCP source address.
package mux
