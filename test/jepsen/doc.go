// Package jepsen is a Jepsen-style safety checker for Trident's AMQP 0-9-1
// queues: a workload of publishers and consumers records a History of what
// every client did and saw while a nemesis kills, restarts or partitions
// nodes, and Check tells from that history alone whether a message was lost,
// duplicated without the redelivered flag, or invented.
//
// # History
//
// Each Op has a Seq (the order of recording, consistent with real time), a
// wall-clock Time and a monotonic Mono. Publishers record publish-invoke
// before a message is written and then exactly one outcome: publish-ok (a
// confirm), publish-fail (a nack), or publish-fail with Indeterminate set
// (the connection died, or the run ended, before the confirm). Consumers
// record every deliver, with its redelivered flag and consumer tag, before
// acking it, then ack-sent. The nemesis records kill, restart, partition,
// heal and info events. Run ends the history with drained once the queue
// has been empty for a while. Every message carries a unique id
// ("p<publisher>-<n>") as both its message-id property and its body.
//
// History.WriteJSONL and ReadJSONL store a history one Op per line, so a
// failing run can be kept and checked or inspected later.
//
// # What Check guarantees
//
// Check reports, and Result.Err fails on:
//   - lost: confirmed and never delivered;
//   - bad duplicates: delivered again without the redelivered flag;
//   - phantoms: delivered and never published;
//   - corrupt: a body that is not the message-id;
//   - a history without a final drain (lost cannot be judged).
//
// It allows and counts: duplicates flagged redelivered (at-least-once,
// including after an ack that the broker lost with a crash), first
// deliveries flagged redelivered, and deliveries of nacked or indeterminate
// publishes. It does not check ordering.
//
// # Running against one node
//
// TestSingleNodeKillRestart starts one trident with test/testbin, kills it
// with SIGKILL and restarts it on the same data directory every ~3 s:
//
//	go test ./test/jepsen -run SingleNode -v
//	JEPSEN_DURATION=5m JEPSEN_KILL_INTERVAL=5s JEPSEN_HISTORY=/tmp/h.jsonl \
//	    go test ./test/jepsen -run SingleNode -v -timeout 20m
//
// It is skipped with -short.
//
// # Running against a cluster
//
// Run knows nothing of how nodes are started. For a cluster, pass the AMQP
// URL of every node in Config.Addrs: each client starts on a node
// (round-robin by index) and moves to the next one whenever its connection
// fails. Give a replicated queue type through QueueArgs
// (amqp.Table{"x-queue-type": "quorum"}). The Nemesis picks any node and
// kills it (or partitions it), recording each fault with its Node index;
// Heal must bring every node back and heal every partition before it
// returns, because the drain that follows needs the whole queue reachable:
//
//	procs := startCluster(t)          // however the cluster test starts nodes
//	cfg := jepsen.Config{
//		Addrs:     urlsOf(procs),
//		Queue:     "jepsen-quorum",
//		QueueArgs: amqp.Table{"x-queue-type": "quorum"},
//		Duration:  time.Minute,
//		Nemesis: func(ctx context.Context, record func(jepsen.Event)) {
//			for sleepCtx(ctx, 5*time.Second) {
//				i := rand.IntN(len(procs))
//				record(jepsen.Event{Kind: jepsen.Kill, Node: i})
//				procs[i].Kill()
//				// ... later, or at once:
//				err := procs[i].Restart()
//				record(jepsen.Event{Kind: jepsen.Restart, Node: i, Err: err})
//			}
//		},
//		Heal: func(ctx context.Context, record func(jepsen.Event)) error {
//			// restart every node that is down; undo partitions
//		},
//	}
//	h, err := jepsen.Run(ctx, cfg)
//	r := jepsen.Check(h)          // r.Err() == nil, or the anomalies
//
// Nemesis and Heal are called from Run's goroutine, not the clients', so
// they may block; Nemesis must return soon after its ctx ends.
package jepsen
