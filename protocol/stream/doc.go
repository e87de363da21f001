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
// What is not here yet (issue 41): deduplication of named producers
// (query publisher sequence answers 0), super streams (route and
// partitions answer stream does not exist), single active consumer
// (refused with precondition failed), filtering (publish version 2 is not
// announced).
package stream
