// Package cluster is the root of Trident's clustering (issue 7). This
// directory holds the parts that turn single nodes into one broker; the
// package itself holds only this documentation.
//
// # What exists and what it guarantees
//
//   - cluster/discovery: membership and failure detection over
//     hashicorp/memberlist. Start(Config, *slog.Logger) joins or founds a
//     cluster; Members() lists every node seen with its gossip address,
//     metadata (a small string map: the node's Raft and AMQP addresses) and
//     status alive/dead/left; Config.OnEvent gets join/leave/update events in
//     order, off memberlist's locks; seeds that are down are retried in the
//     background; a node that restarts under the same name is alive again.
//     Its doc.go lists the guarantees and memberlist's limits (no suspect
//     state is observable).
//   - cluster/raftstore: raft.LogStore and raft.StableStore over Badger v4.
//     One Badger DB per node (<data_dir>/raft/badger), one keyspace per
//     Raft group (DB.Group(name)), so thousands of quorum-queue groups share
//     one write pipeline and one fsync stream. StoreLogs is one batch and
//     durable when it returns. Checked by a contract table, hashicorp/raft's
//     own store benchmarks (raft/bench) and a real three-node raft cluster
//     with leader failover and restart from disk.
//   - cluster/logbridge: memberlist's, raft's and Badger's loggers into slog.
//
// Nothing here is wired into cmd/trident/node yet.
//
// # How a node starts it (conf-independent; example_test.go compiles it)
//
//	db, err := raftstore.Open(filepath.Join(dataDir, "raft", "badger"), raftstore.Options{}, log)
//	members, err := discovery.Start(discovery.Config{
//		NodeName: name, BindAddr: "0.0.0.0", BindPort: discovery.DefaultPort,
//		Join: seeds, // "host:25672", ...
//		Meta: map[string]string{"raft": raftAddr, "amqp": amqpAddr},
//		OnEvent: reconcile, // leader: AddVoter on join, RemoveServer on left
//	}, log.With("component", "cluster"))
//	trans, err := raft.NewTCPTransportWithLogger(raftBind, raftAdvertise, 3, 10*time.Second,
//		logbridge.NewHCLogger(log, "raft-net"))
//	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dataDir, "raft", "snapshots", "meta"), 2,
//		logbridge.NewHCLogger(log, "raft-snap"))
//	meta := db.Group("meta")
//	rc := raft.DefaultConfig()
//	rc.LocalID, rc.Logger = raft.ServerID(name), logbridge.NewHCLogger(log, "raft")
//	r, err := raft.NewRaft(rc, fsm, meta, meta, snaps, trans)
//	// shutdown, in this order: members.Leave(t); r.Shutdown().Error();
//	// trans.Close(); members.Shutdown(); db.Close()
//
// # The rest of issue 7, in order
//
//  1. Config and wiring: conf gains cluster.node_name, cluster.join (and
//     --join), cluster.gossip_listen/advertise (default :25672),
//     cluster.raft_listen/advertise (default :25673),
//     cluster.bootstrap_expect; cmd/trident/node starts the above when
//     cluster.join or bootstrap_expect is set; /api/nodes reports
//     Members() plus, per node, which Raft groups it leads.
//  2. Bootstrap: every node with no Raft state waits until discovery shows
//     bootstrap_expect alive members, then all call raft.BootstrapCluster
//     with the same sorted server list (identical configurations are
//     allowed). Afterwards the metadata leader reconciles on discovery
//     events: EventJoin of a node not in the configuration → AddVoter(name,
//     meta["raft"]); StatusLeft → RemoveServer; StatusDead → nothing
//     (it may come back; an operator command forgets it).
//  3. Metadata group ("meta"): every topology write the core already makes
//     through exchange.Store.PutMeta/DeleteMeta/DeleteMetaPrefix (vhosts,
//     users, permissions, exchanges, bindings, queue definitions,
//     policies) becomes a Raft command. A replicated Store wrapper proposes
//     it (forwarded to the leader if needed) and returns once committed;
//     the FSM writes it into the node's local store and calls a core hook
//     (to be added to exchange: apply a declaration that originated
//     elsewhere) so every node's in-memory topology follows. Snapshot =
//     LoadMeta of everything; Restore = replace.
//  4. Quorum queues (x-queue-type: quorum): one Raft group per queue,
//     named "q/<vhost>/<queue>" in raftstore (DB.DropGroup on delete), over
//     x-quorum-initial-group-size members chosen from Members(). The core
//     is already built for this: a Queue changes only through its cmd*
//     methods (exchange/queue.go: cmdEnqueue, cmdTake, cmdSettle,
//     cmdReturn, cmdExpire, cmdPurge), deterministic given the time as an
//     input. Needed in exchange: an exported, serialisable Command type
//     for each cmd* (the leader stamps "now" into it), an interface the
//     core defines for "propose this command and tell me when it is
//     committed" (a classic queue applies locally; a quorum queue proposes
//     to its group), and an Apply entry the FSM calls. Consumer attach and
//     detach are commands too (as in RabbitMQ's Ra-based queues), so a new
//     leader knows who holds which unacked message. The publisher confirm
//     is sent when the enqueue's ApplyFuture completes (majority commit).
//     x-delivery-limit: cmdTake already counts deliveries; past the limit,
//     dead-letter with reason delivery_limit. Snapshots: ready + unacked
//     entries serialised; SnapshotThreshold bounds the log.
//  5. Transport for many groups: hashicorp/raft's NetworkTransport takes
//     a StreamLayer; one listener (cluster.raft_listen) whose connections
//     start with a group-name header demultiplexes to per-group
//     transports, instead of a port per queue.
//  6. Forwarding: publishes and consumes for a queue led elsewhere go to
//     its leader over an internal RPC; classic queues are reachable the
//     same way from every node.
//  7. Tests and figures from the issue: three trident processes (the
//     test/cluster_discovery_test.go pattern, with the real binary),
//     kill -9 of a quorum leader under load with the failover time
//     measured, a partition test with network namespaces or a
//     fault-injecting transport, a Jepsen-style history checker, and
//     make bench for quorum queues against RabbitMQ.
package cluster
