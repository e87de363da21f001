// Package wire is the codec of RabbitMQ's stream protocol (the binary
// protocol of port 5552, deps/rabbitmq_stream/docs/PROTOCOL.adoc): bytes
// in, typed frames or a typed error out, and Append functions for what a
// server sends. It opens no socket, takes no lock and knows no queue.
//
// A frame is a uint32 size followed by that many bytes: a uint16 key (the
// top bit set on responses), a uint16 version and the command's fields,
// big-endian. ReadFrame bounds the size before it reads (FrameTooLarge);
// Decode checks every length against what is left, so that no field can
// make it allocate more than the frame holds.
//
// chunk.go builds the OsirisChunk a Deliver frame carries; message.go is
// the AMQP 1.0 message format the stream clients put in a publish.
package wire
