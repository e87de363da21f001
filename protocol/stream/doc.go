// Package stream is the front end of RabbitMQ's stream protocol (port
// 5552, TLS 5551), over the core's streams (x-queue-type stream): the same
// log, offsets and named positions that AMQP and STOMP consumers of a
// stream use, so a message published by one protocol is read by all.
//
// A connection shakes hands (peer properties, SASL PLAIN or EXTERNAL,
// tune, open) within InitialFrameMax bytes a frame, then declares
// publishers and subscriptions on streams. Every permission is the core's
// one check (auth.Actor, exchange.Authorize): create and delete need
// configure on the stream, a publisher write, a subscription, stored
// offsets and stats read. Bad frames get a Close with the protocol's code
// (frame too large, unknown frame) and the connection ends.
//
// Deduplication: a publisher declared with a reference is a named
// producer; the stream stores a message of it only if its publishing id
// is above the highest the stream holds of that reference, and confirms
// the others without storing them (once their first copy is durable).
// The reference and id are written with the message, in its stream
// record, and the stream rebuilds its table from its own log after a
// start or on a new leader (exchange/streamlog/writers.go), so a client that
// reconnects, asks QueryPublisherSequence and resends from its buffer
// stores nothing twice, after a killed connection, kill -9 or a leader
// change alike (a new leader reads its store after the group's barrier,
// so it holds every committed message). In a cluster a member that does
// not lead answers QueryPublisherSequence from its own copy, which lags
// the leader by the time a commit takes to be applied there; a node with
// no copy of the stream answers stream not available. Over AMQP nothing
// is deduplicated (as in RabbitMQ).
//
// Filtering (RabbitMQ 3.13): Publish version 2 is announced in
// ExchangeCommandVersions, which is what clients enable filtering by;
// each message's filter value is kept in its stream record.
// Subscriptions may carry filter.N and match-unfiltered: every chunk is
// sent and the client's post-filter (which RabbitMQ's clients require
// whenever they filter) selects the messages.
//
// Super streams (exchange/superstream.go): Route and Partitions answer
// from the core's lookups (with the response bit, as 3.11+); Create- and
// DeleteSuperStream (RabbitMQ 3.13, which is why Config.Version is
// 3.13.0: the only thing 3.13 unlocks in rabbitmq-stream-go-client
// v1.8.3) declare and delete the exchange, partitions and bindings
// through the core's one check. A subscription with the property
// super-stream=<name> on one of that super stream's partitions passes
// its index to the core, so a single-active group spreads the
// partitions over its members.
//
// What is not here yet (issue 41): the broker-side half of filtering
// (RabbitMQ's per-chunk Bloom filter lets it skip chunks without a
// wanted value: this
// log has no chunks at rest, one store record per message, and chunks
// are cut per subscription at delivery, so a skip here would be a
// per-message check of the stored filter value at delivery; until then
// a filtering consumer receives, and its client drops, the rest), and,
// for a clustered stream, a bound on the deduplication table's rebuild:
// a standalone stream's segment records carry a snapshot of its
// producers (as osiris's segments do), so a start reads only the records
// after the last one, but a clustered stream's segments have no records,
// so its new leader reads its whole retained log once, and forgets a
// producer whose messages all went with retention.
package stream
