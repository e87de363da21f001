package exchange

import (
	"github.com/trident-broker/trident/exchange/headers"
	"github.com/trident-broker/trident/exchange/streamlog"
)

// A stream keeps a message the stream protocol published as the client
// encoded it: the AMQP 1.0 sections, in a record of version 4 (below),
// not decoded into a Message and encoded again, as RabbitMQ's streams keep
// them. Its stream-protocol readers send those bytes as they are (no
// conversion per message, and what a client published is what another
// reads, byte for byte); the core decodes one into a Message only for a
// reader of another protocol (AMQP 0-9-1, STOMP, a shovel, the management
// API), through the codec the node is built with (WithAMQP10Codec): the
// core holds no protocol codec of its own.
//
// Record version 4 (3 is a chunk record's: streamlog/chunk.go; the
// versions share one byte): the byte 4, the producer's reference,
// publishing id and filter value (as version 2: streamlog.DecodeWriter
// reads both), the exchange and routing key as strings, the enqueue time
// as a varint, then the AMQP 1.0 encoding to the end of the record.

// amqp10Version is the version byte of such a record.
const amqp10Version = 4

// AMQP10Decoder converts a message's AMQP 1.0 encoding into m (a zero
// Message), as the stream protocol's front end does a publish, copying
// what it keeps of data.
type AMQP10Decoder func(data []byte, m *Message) error

// WithAMQP10Codec gives the core the decoder of AMQP 1.0 messages; without
// one, streams store every message decoded (versions 1 and 2), as a node
// that could not read version 4 back must.
func WithAMQP10Codec(dec AMQP10Decoder) Option {
	return func(b *Broker) { b.amqp10 = dec }
}

// streamAMQP10Flag is the cluster feature flag of records of version 4
// (cluster/featureflags.StreamAMQP10).
const streamAMQP10Flag = "stream_amqp10_records"

// StreamAMQP10Enabled reports whether streams may store messages as their
// AMQP 1.0 encoding (PublishRun's amqp10): the node has the codec to read
// them back, and, in a cluster, every member reads them
// (stream_amqp10_records enabled).
func (v *VHost) StreamAMQP10Enabled() bool {
	if v.b.amqp10 == nil {
		return false
	}
	g, ok := v.b.cluster.(featureGate)
	return !ok || g.FeatureEnabled(streamAMQP10Flag)
}

// appendAMQP10Record appends the record of version 4 of a message given as
// its AMQP 1.0 encoding, with m's producer, exchange and routing key.
func appendAMQP10Record(buf []byte, m *Message, enqueuedAt int64, amqp10 []byte) []byte {
	e := headers.Encoder{B: buf, Format: headers.Stored}
	e.B = append(e.B, amqp10Version)
	var w streamlog.Writer
	if m.writer != nil {
		w = *m.writer
	}
	e.Str(w.Ref)
	e.Uvarint(w.Seq)
	e.Str(w.Filter)
	e.Str(m.Exchange)
	e.Str(m.RoutingKey)
	e.Varint(enqueuedAt)
	return append(e.B, amqp10...)
}

// amqp10Record reads a record of version 4: its exchange, routing key,
// enqueue time and AMQP 1.0 encoding (aliasing rec); ok false for a
// record of another version or one whose head does not decode.
func amqp10Record(rec []byte) (exchange, key []byte, enqueuedAt int64, amqp10 []byte, ok bool) {
	if len(rec) == 0 || rec[0] != amqp10Version {
		return nil, nil, 0, nil, false
	}
	// On every message's path of a stream-protocol reader: the local
	// reader's inline one-byte lengths (viewMessage's), not a Decoder's
	// calls.
	r := reader{b: rec, i: 1}
	var ref, filter []byte
	r.raws(&ref)
	r.uvarint()
	r.raws(&filter, &exchange, &key)
	enqueuedAt = r.varint()
	if r.bad {
		return nil, nil, 0, nil, false
	}
	return exchange, key, enqueuedAt, rec[r.i:], true
}

// StoredAMQP10 returns the AMQP 1.0 encoding a stream's record holds as it
// was published (version 4), aliasing rec; ok false for a record the core
// encoded (ViewStoredMessage reads those).
func StoredAMQP10(rec []byte) (amqp10 []byte, ok bool) {
	_, _, _, amqp10, ok = amqp10Record(rec)
	return amqp10, ok
}

// decodeRecord is decodeMessage for every version of a stream's record:
// one of version 4 goes through the node's AMQP 1.0 codec.
func (b *Broker) decodeRecord(rec []byte) (*Message, int64, error) {
	if len(rec) == 0 || rec[0] != amqp10Version {
		return decodeMessage(rec)
	}
	x, key, ts, amqp10, ok := amqp10Record(rec)
	if !ok || b.amqp10 == nil {
		return nil, 0, errCorrupt
	}
	m := &Message{}
	if err := b.amqp10(amqp10, m); err != nil {
		return nil, 0, errCorrupt
	}
	m.Exchange, m.RoutingKey, m.ts = string(x), string(key), ts
	return m, ts, nil
}
