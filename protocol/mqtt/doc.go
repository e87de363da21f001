// Package mqtt is Trident's MQTT 3.1, 3.1.1 and 5 front end, over TCP and
// WebSocket. Each connection runs its own session state machine and turns
// packets into calls on the protocol-neutral core (package exchange), as
// RabbitMQ's MQTT plugin does:
//
//   - PUBLISH to topic a/b/c goes to the configured topic exchange
//     (amq.topic) with routing key a.b.c; QoS >= 1 makes the message
//     persistent, and PUBACK (QoS 1) or PUBREC (QoS 2) is sent only once the
//     core's Confirmer reports the message durable in every durable queue it
//     reached, in the order the PUBLISH packets arrived.
//   - A session owns one queue, mqtt-subscription-<client id>qos1, that
//     SUBSCRIBE binds to the exchange (+ → *, # → #). The queue is durable
//     for a persistent session (clean session 0, or a session expiry
//     interval), so its bindings and stored messages survive a restart; the
//     session's subscription options are kept in the store (PutMeta).
//   - Shared subscriptions $share/g/f consume from a queue
//     mqtt-shared-<g>-<f> shared by every member of the group.
//   - Retained messages live in the store, per vhost, indexed in memory
//     by a topic trie of references (retainedindex.go), and are delivered
//     to matching (also wildcard) subscriptions on SUBSCRIBE, each body
//     read from the store as it is sent.
//   - Mosquitto's $SYS/broker/... topics (sys.go) are this node's, sent
//     every Config.SysInterval outside the core to subscriptions whose
//     filter begins with "$"; "#" and "+" never match a "$" topic, and a
//     client's PUBLISH to one is refused.
//   - Auth: a CONNECT without credentials logs in as the configured
//     anonymous user (RabbitMQ's mqtt.allow_anonymous) or is refused with
//     bad user name or password; a will needs write permission on the
//     exchange and the topic permission on its topic, checked at CONNECT
//     (refused: not authorized), as RabbitMQ does.
//   - A session belongs to the user who made it (owner.go): another user
//     with its client id is refused while the owner is connected, else
//     gets a fresh session and the owner's is discarded; a resumed
//     session's subscriptions are checked again against the user's
//     permissions before anything is delivered.
//   - Before authentication the CONNECT is bounded (Config.MaxConnectSize,
//     judged from the fixed header, connectlimit.go); a session holds at
//     most Config.MaxSubscriptions filters (SUBACK 0x97 / 0x80 past it).
//   - MQTT 5 flow control: more unacknowledged inbound QoS 1 and 2
//     publishes than the advertised Receive Maximum end the connection
//     (DISCONNECT 0x93); outbound, the client's Receive Maximum bounds the
//     deliveries in flight (the consumers' shared exchange.Limit). Topics
//     go out as topic aliases up to the client's Topic Alias Maximum, and
//     a message carries the expiry interval it has left; one that expired
//     while queued is dropped.
//   - A persistent session's QoS 2 packet ids (inbound awaiting PUBREL,
//     outbound awaiting PUBCOMP) are part of its store record, written by
//     the writer only around QoS 2 acknowledgements (qos2.go).
//   - In a cluster (Config.NodeName set, Config.Replicator writing the
//     records, ApplyMeta wired to the metadata group) retained messages
//     are cluster-wide, and a persistent session
//     resumes on any node, taking it over from a connection on another
//     node (cluster.go says what stays node-local).
//
// Codec: the packets package of github.com/mochi-mqtt/server/v2 through
// protocol/mqtt/wire. mochi's server and hooks are not used: its PUBACK is
// written synchronously inside its publish handler, so waiting for the
// store would serialise a client's QoS 1 publishes on one fsync each, and it
// keeps subscriptions, inflight messages and retained messages in its own
// topic index and storage, a second routing system beside the core.
//
// Per connection there is a reader goroutine while there is input, and a
// writer goroutine while there is output: an idle plain TCP connection
// (the common case for devices) keeps neither, nor a read buffer, its
// buffered reader (pooled) or outbound lists; its descriptor waits in the server's epoll loop, which
// starts a reader when input, a hang-up or the keep-alive's end comes
// (park.go, poller_linux.go), except for PINGREQs and short PUBACKs
// alone, which the loop reads, answers or settles (a non-durable queue's
// deliveries; not a stream of them) and counts itself, refreshing the
// keep-alive, leaving the connection parked (pingfast_linux.go); whatever
// else it read goes to the reader ahead of the socket. TLS and WebSocket connections keep their
// reader goroutine, parked with a small stack and no read buffer
// (readbuf.go). What an idle device keeps is what outlives its bursts:
// the connection (640 bytes; the reader's publish state, readerState, is
// made when used and dropped when it parks), its session, its queue (for
// a clean session too: it has a QoS 1 subscription) with the consumer and
// bindings, and a slot in the event loop; filters with wildcards and their
// binding keys are interned (subscribe.go's shareable), and a wave of
// connections coming or going is followed by a collection that gives
// their garbage and free pages back (giveback.go). The readers and writers
// a burst starts (a broadcast to a fleet, the fleet's acknowledgements)
// run at most 512 at once (128 a processor; runners.go): the runtime
// keeps the descriptor of every goroutine that ever ran at once for good,
// so a burst to 18,000 devices that started one each kept ~6 MB; a start
// past the bound waits for one to end, and the bound grows while those
// alive all run long or wait on the network. A device that only receives
// gives its queues' room back when its writer is done. The connection's
// output is a frontend.Output with writers on demand (writer.go): core
// deliveries (Sink.Deliver, called under the queue's lock) and confirms
// only append an item to its outbound list, counted against the output's
// watermarks, and start a writer if none runs; the writer takes the whole
// list and encodes it on its own goroutine, outside the lock (a
// publisher's goroutine encodes nothing of its subscribers' and writes no
// socket of theirs), into the output's buffer, written in one write (64
// KiB at a time for a long list); it returns when the list stays empty,
// and a parked connection's writer (or a TLS or WebSocket one's, whose
// reader never parks) then gives the output's state (its buffers and
// lists) back to a pool, or, while the core streams to the connection,
// keeps it until a sweep finds the stream over (keptOutputs). A delivery that leaves the output
// over 4 MiB pauses its consumer (the messages stay in the queue) until
// the writer has it under 1 MiB, and the reader stops reading a client
// whose output is over 4 MiB (one that sends PINGREQs or QoS 1 publishes
// without reading the answers). The event loop writes its PINGRESPs in
// the writer's place when no writer runs (Output.WriteAround); what the
// socket does not take goes first in the output's buffer. A PUBLISH is
// encoded once per message, protocol version (3.1 and 3.1.1 alike), QoS and retain flag and cached on the message
// (exchange.Message.AddEncoding), so that a fan-out to many sessions, whose
// queues all deliver the same *Message, writes the same bytes: as they are
// at QoS 0, with each delivery's packet id and DUP flag patched into a copy
// of the head at QoS 1 and 2. A QoS 0 or 1 PUBLISH from an MQTT 3 client
// (or an MQTT 5 one without properties) is that encoding as it came
// (wire.ReadRaw), its payload the message's body, in a pooled buffer. An
// MQTT 5 delivery with something of its own (subscription identifiers, a
// connection with topic aliases, a remaining message expiry) is encoded
// alone. An encoding built at delivery costs its bytes for as long as the
// message is held (a queue's memory budget does not count them); that of
// an MQTT 3 QoS 0 publish costs nothing, the body being part of it. The reader hands PUBACKs to the core in one AckMany per read
// from the socket, and rearms the keep-alive deadline once per read. The
// publishes of one read are a run (exchange.Batch, held by the reader):
// they share a reading of the clock, other protocols' consumers they
// reach wake their writers once at its end, and a stream they reach
// writes them as one chunk; the run ends before any read that may wait
// (connReader.flushBatch).
//
// Lock order: Server.mu → session.mu → conn.ob.Mu (the output's) →
// runners.mu (a writer started under it). None of them is held while
// calling into the core, except that Sink.Deliver takes conn.ob.Mu under
// the core's queue lock (paused consumers are resumed outside it); publishSys (sys.go) takes Server.mu then
// each session.mu, and sysState.mu alone. keptOutputs.mu, retainedStore.mu and
// session.saveMu are never held with another; no lock but saveMu is held across a store
// write, and ApplyMeta (which a store write waits for, in a cluster)
// never takes saveMu.
package mqtt
