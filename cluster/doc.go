// Package cluster is the root of Trident's clustering (issue 7): several
// trident processes act as one broker. This directory holds the parts;
// cmd/trident/node wires them (cluster.go, raft.go, cluster_queues.go).
//
// # Running a cluster
//
//	trident --cluster-node-name a@host1 --cluster-gossip-listen 10.0.0.1:25672 \
//	        --cluster-bootstrap-expect 3 --cluster-cookie SECRET \
//	        --join 10.0.0.2:25672,10.0.0.3:25672
//
// The Raft/inter-node port is cluster.raft_listen (default: the gossip
// port + 1). Every node of a cluster needs the same cookie: without
// cluster.cookie a node reads cluster.cookie_file (default
// <data_dir>/cluster.cookie), generating it (32 random bytes, mode 0600)
// on its first start, as RabbitMQ does its Erlang cookie (package cookie).
// A node with another cookie, certificate or gossip key is never let into
// the metadata group, never gets a record, and is never placed as a
// member of anything (meta.Group.Admitted, Placeable). Three nodes on one
// machine need distinct names and ports (test/cluster_harness_test.go).
//
// # The parts
//
//   - discovery: membership and failure detection over hashicorp/memberlist;
//     each node gossips its AMQP, HTTP and Raft ("raft") addresses.
//   - mux: one TCP listener carrying named streams (every Raft group, the
//     metadata RPCs, the forwarding RPC "fwd"), both ends proving the
//     cookie without sending it, mutual TLS with node certificates of the cluster's CA when
//     cluster.tls is set (tls.go); SetBlocked injects partitions for tests
//     (cluster.fault_injection, PUT /api/cluster/partition). Gossip is
//     encrypted with cluster.gossip_key (discovery's keyring) and its
//     failure detection set by cluster.failure_detection (Preset).
//   - raftstore: raft.LogStore/StableStore over one Badger DB per node,
//     one keyspace per group. groups: starts and stops hashicorp/raft
//     groups over raftstore and mux with snapshot stores per group.
//   - meta: the metadata group. Every change of the cluster-wide state is
//     proposed — topology, users and parameters as commands, the other
//     shared records through meta.Replicator, an explicit call — and
//     committed before the change returns, and applied on every node
//     (local store, then memory through Broker.ApplyCommitted,
//     Users.ApplyCommitted and the ApplyMeta hooks). bootstrap_expect
//     forms the group; its leader adds joining nodes and removes nodes
//     that left.
//   - quorum: a quorum queue's replicated state machine (its messages and
//     their return counts), the exchange.MessageLog that batches a
//     leader's appends, deletes and returns into Raft entries, and the
//     leadership watcher.
//   - placement: the node's exchange.Cluster. Runs this node's members of
//     the quorum queues' and streams' groups, switches a queue between
//     local and proxy as its group's leadership moves, and, on a group's
//     leader, reconciles the group with membership; membership events
//     (discovery) and raft observations drive it. Its Forgetter removes
//     the transient objects of nodes that are gone.
//   - forward: exchange.Remote over the cluster's own forwarding RPC (the
//     mux's "fwd" stream into the owning node's forward.Server, which
//     calls the core directly; codec in forward/frame): a proxy queue
//     publishes with confirms under per-hop credit, consumes with a
//     prefetch window, acks, gets, purges and counts on the node that
//     owns the queue. Publishes awaiting a confirm from a node the queue
//     has left (a frozen leader) fail and are nacked once the Locator
//     names another node.
//
// # Where queues live
//
// A durable classic queue lives on the node it was declared on (its
// "node" in the API); every other node holds a proxy to it. A quorum queue
// (x-queue-type: quorum) is a Raft group over x-quorum-initial-group-size
// members (default 3) chosen when it is declared; its leader holds the live
// queue and keeps its messages through the group's log, so a publisher
// confirm means a majority has the message; every other node proxies to
// the leader. A new leader rebuilds the queue from its replica (every
// message flagged redelivered, as after a crash). The leader shrinks the
// group when a member leaves the cluster and grows it onto alive nodes
// up to its declared size. x-delivery-limit dead-letters a message
// returned too often (reason delivery_limit). Exclusive and non-durable
// queues and exchanges stay on their node.
//
// # Tests
//
// test/cluster_*_test.go run three or four real processes: topology
// declared on one node used from the others; a quorum queue's leader
// killed with SIGKILL under load (failover time logged); the leader
// isolated by fault injection (the minority stops confirming); random
// kills and restarts checked by test/jepsen; group shrink and grow.
package cluster
