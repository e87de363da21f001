// Package stomp is Trident's STOMP 1.0, 1.1 and 1.2 front end, over TCP and
// over WebSocket (subprotocols v12.stomp, v11.stomp, v10.stomp), behaving
// as RabbitMQ's STOMP and Web-STOMP plugins do.
//
// A connection is a session state machine on one reader goroutine that
// turns frames into calls on the core (exchange) and core errors into
// ERROR frames, after which the connection is closed. One writer goroutine
// batches output and flushes only when there is nothing more to write;
// deliveries are encoded straight into the output buffer by the
// subscription's Sink.
//
// Login: a CONNECT logs in with its login/passcode headers, a verified
// TLS client certificate (CertLogin) or an OAuth 2 token as passcode.
// Without any of them it is refused ("Bad CONNECT") unless AllowAnonymous
// maps it to DefaultUser; the user's loopback restriction holds either
// way. Until a login succeeds a frame may hold at most
// MaxFrameSizeUnauthenticated bytes (headers and body), checked while
// reading; after it a frame's buffer grows as its bytes arrive, never to
// a declared content-length up front. A WebSocket upgrade from a browser
// on another origin is refused with 403 unless AllowedOrigins lists it.
//
// Destinations (as RabbitMQ):
//
//	/queue/q         SEND and SUBSCRIBE declare durable queue q (default exchange)
//	/amq/queue/q     existing queue q, never declared
//	/topic/key       amq.topic; each SUBSCRIBE binds its own queue, durable
//	                 with durable:true (or persistent:true) and an id
//	/exchange/x/key  exchange x with routing key (SEND) or binding pattern (SUBSCRIBE)
//	/temp-queue/t    in reply-to: a private queue, reply-to rewritten to its name
//	/reply-queue/q   a temp queue by its real name, for repliers
//
// Transactions: SEND, ACK and NACK frames naming a transaction are
// buffered (their receipts are sent when buffered) and run in order by
// COMMIT, whose RECEIPT waits for the store to confirm the transaction's
// persistent messages. Buffering is bounded per connection.
//
// Durability: a persistent SEND (persistent:true, delivery mode 2) with a
// receipt header gets its RECEIPT only once the store has confirmed the
// message (exchange.Confirmer); receipts leave in frame order.
//
// Errors: every ERROR frame is followed by closing the connection, as
// the 1.2 specification requires; RabbitMQ keeps the connection open after
// some (unknown subscription, unknown destination, missing header), and
// closes without an ERROR frame on a malformed one. The ERROR frame for a
// frame that had a receipt header carries receipt-id. The one ERROR that
// does not close is "Server cancelled subscription" (its queue was
// deleted), as in RabbitMQ.
//
// In a cluster nothing here is node-specific: /queue destinations and
// durable topic subscriptions are durable queues, which live on the node
// that declared them and are reached from every other node through the
// core's proxy queues, so a durable subscription made on one node resumes
// on another with the same id (and destination, or x-queue-name) and gets
// what was sent meanwhile through any node. A non-durable topic
// subscription's queue is node-local (as every non-durable queue in the
// core), so it gets only what is sent through its own node.
//
// Where Trident differs from RabbitMQ otherwise: ACK in ack mode client
// is cumulative per subscription (the STOMP spec), where RabbitMQ acks
// every earlier message of the connection; UNSUBSCRIBE requeues the
// subscription's unacknowledged messages at once (a later ACK of one is an
// error); the receipt header of a SEND is not copied into the message; a
// durable topic subscription's queue is not auto-delete unless
// auto-delete:true is given.
package stomp
