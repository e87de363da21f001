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
//	magic "TRMX" | version 1 | len name | name | len cookie | cookie | len addr | addr
//
// each length one byte (so a header is at most 773 bytes), name non-empty,
// addr the dialer's advertised mux address (how this node is known to the
// others: its Raft ServerAddress). The acceptor answers one status byte
// (Status) and, unless it is StatusOK, closes the connection. After
// StatusOK the connection is the stream's: the mux reads and writes
// nothing more on it.
//
// # What it guarantees
//
//   - A header is read under a deadline (HandshakeTimeout) into a buffer of
//     at most MaxHeaderLen bytes: a silent or hostile peer costs one
//     goroutine for at most that long and no more memory.
//   - The cookie (the cluster's shared secret, RabbitMQ's Erlang cookie)
//     is compared in constant time; a wrong cookie gets StatusBadCookie.
//     Without TLS the cookie authenticates, it does not encrypt: the mux
//     is then for a trusted network, like Erlang distribution without TLS.
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
