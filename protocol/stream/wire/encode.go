package wire

import (
	"encoding/binary"
)

// The Append functions append one whole frame (size included) to b.

func be16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func be32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func be64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

func appendStr(b []byte, s string) []byte {
	if len(s) > 1<<15-1 {
		s = s[:1<<15-1]
	}
	return append(be16(b, uint16(len(s))), s...)
}

func appendBytes(b []byte, p []byte) []byte {
	if p == nil {
		return be32(b, 0xffffffff)
	}
	return append(be32(b, uint32(len(p))), p...)
}

func appendKVs(b []byte, kvs []KV) []byte {
	b = be32(b, uint32(len(kvs)))
	for _, kv := range kvs {
		b = appendStr(appendStr(b, kv.Key), kv.Value)
	}
	return b
}

// begin starts a frame: a size placeholder, key and version. end fills
// the size in.
func begin(b []byte, key, ver uint16) ([]byte, int) {
	at := len(b)
	b = be32(b, 0)
	return be16(be16(b, key), ver), at
}

func end(b []byte, at int) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// AppendResponse appends the response to request key that carries only a
// code (declare publisher, delete publisher, subscribe, unsubscribe,
// create, delete, sasl authenticate, close, create/delete super stream).
func AppendResponse(b []byte, key uint16, corr uint32, code Code) []byte {
	b, at := begin(b, key|ResponseBit, 1)
	b = be16(be32(b, corr), uint16(code))
	return end(b, at)
}

// AppendPeerPropertiesResponse answers PeerProperties.
func AppendPeerPropertiesResponse(b []byte, corr uint32, code Code, props []KV) []byte {
	b, at := begin(b, KeyPeerProperties|ResponseBit, 1)
	b = be16(be32(b, corr), uint16(code))
	return end(appendKVs(b, props), at)
}

// AppendSaslHandshakeResponse lists the mechanisms.
func AppendSaslHandshakeResponse(b []byte, corr uint32, code Code, mechs []string) []byte {
	b, at := begin(b, KeySaslHandshake|ResponseBit, 1)
	b = be16(be32(b, corr), uint16(code))
	b = be32(b, uint32(len(mechs)))
	for _, m := range mechs {
		b = appendStr(b, m)
	}
	return end(b, at)
}

// AppendTune is the server's Tune proposal.
func AppendTune(b []byte, frameMax, heartbeat uint32) []byte {
	b, at := begin(b, KeyTune, 1)
	return end(be32(be32(b, frameMax), heartbeat), at)
}

// AppendOpenResponse answers Open; the connection properties (advertised
// host and port) go with OK, an empty list with a refusal.
func AppendOpenResponse(b []byte, corr uint32, code Code, props []KV) []byte {
	b, at := begin(b, KeyOpen|ResponseBit, 1)
	b = be16(be32(b, corr), uint16(code))
	return end(appendKVs(b, props), at)
}

// AppendClose is a close request.
func AppendClose(b []byte, corr uint32, code Code, reason string) []byte {
	b, at := begin(b, KeyClose, 1)
	b = be16(be32(b, corr), uint16(code))
	return end(appendStr(b, reason), at)
}

// AppendHeartbeat is a heartbeat.
func AppendHeartbeat(b []byte) []byte {
	b, at := begin(b, KeyHeartbeat, 1)
	return end(b, at)
}

// AppendPublishConfirm confirms publishing ids of publisher id.
func AppendPublishConfirm(b []byte, id uint8, ids []uint64) []byte {
	b, at := begin(b, KeyPublishConfirm, 1)
	b = be32(append(b, id), uint32(len(ids)))
	for _, v := range ids {
		b = be64(b, v)
	}
	return end(b, at)
}

// PublishingError is one refused message.
type PublishingError struct {
	ID   uint64
	Code Code
}

// AppendPublishError refuses publishing ids of publisher id.
func AppendPublishError(b []byte, id uint8, errs []PublishingError) []byte {
	b, at := begin(b, KeyPublishError, 1)
	b = be32(append(b, id), uint32(len(errs)))
	for _, e := range errs {
		b = be16(be64(b, e.ID), uint16(e.Code))
	}
	return end(b, at)
}

// AppendQueryPublisherSequenceResponse answers QueryPublisherSequence.
func AppendQueryPublisherSequenceResponse(b []byte, corr uint32, code Code, seq uint64) []byte {
	b, at := begin(b, KeyQueryPublisherSequence|ResponseBit, 1)
	b = be16(be32(b, corr), uint16(code))
	return end(be64(b, seq), at)
}

// AppendCreditResponse reports a problem with a Credit (only then).
func AppendCreditResponse(b []byte, code Code, id uint8) []byte {
	b, at := begin(b, KeyCredit|ResponseBit, 1)
	return end(append(be16(b, uint16(code)), id), at)
}

// AppendQueryOffsetResponse answers QueryOffset.
func AppendQueryOffsetResponse(b []byte, corr uint32, code Code, off uint64) []byte {
	b, at := begin(b, KeyQueryOffset|ResponseBit, 1)
	b = be16(be32(b, corr), uint16(code))
	return end(be64(b, off), at)
}

// Broker is a node in a Metadata answer.
type Broker struct {
	Ref  uint16
	Host string
	Port uint32
}

// StreamMetadata is one stream in a Metadata answer (Leader 0xffff and no
// replicas when Code is not OK).
type StreamMetadata struct {
	Stream   string
	Code     Code
	Leader   uint16
	Replicas []uint16
}

// AppendMetadataResponse answers Metadata.
func AppendMetadataResponse(b []byte, corr uint32, brokers []Broker, streams []StreamMetadata) []byte {
	b, at := begin(b, KeyMetadata|ResponseBit, 1)
	b = be32(be32(b, corr), uint32(len(brokers)))
	for _, br := range brokers {
		b = be32(appendStr(be16(b, br.Ref), br.Host), br.Port)
	}
	b = be32(b, uint32(len(streams)))
	for _, s := range streams {
		b = be16(be16(appendStr(b, s.Stream), uint16(s.Code)), s.Leader)
		b = be32(b, uint32(len(s.Replicas)))
		for _, r := range s.Replicas {
			b = be16(b, r)
		}
	}
	return end(b, at)
}

// AppendMetadataUpdate tells the client that stream changed (code
// StreamNotAvailable: it went away or moved).
func AppendMetadataUpdate(b []byte, code Code, stream string) []byte {
	b, at := begin(b, KeyMetadataUpdate, 1)
	return end(appendStr(be16(b, uint16(code)), stream), at)
}

// AppendExchangeCommandVersionsResponse lists the server's versions.
func AppendExchangeCommandVersionsResponse(b []byte, corr uint32, code Code, cmds []CommandVersion) []byte {
	b, at := begin(b, KeyExchangeCommandVersions|ResponseBit, 1)
	b = be32(be16(be32(b, corr), uint16(code)), uint32(len(cmds)))
	for _, c := range cmds {
		b = be16(be16(be16(b, c.Key), c.Min), c.Max)
	}
	return end(b, at)
}

// Stat is one statistic of a StreamStats answer.
type Stat struct {
	Key   string
	Value int64
}

// AppendStreamStatsResponse answers StreamStats.
func AppendStreamStatsResponse(b []byte, corr uint32, code Code, stats []Stat) []byte {
	b, at := begin(b, KeyStreamStats|ResponseBit, 1)
	b = be32(be16(be32(b, corr), uint16(code)), uint32(len(stats)))
	for _, s := range stats {
		b = be64(appendStr(b, s.Key), uint64(s.Value))
	}
	return end(b, at)
}

// AppendStreamsResponse answers Route and Partitions (key) with streams.
func AppendStreamsResponse(b []byte, key uint16, corr uint32, code Code, streams []string) []byte {
	b, at := begin(b, key|ResponseBit, 1)
	b = be32(be16(be32(b, corr), uint16(code)), uint32(len(streams)))
	for _, s := range streams {
		b = appendStr(b, s)
	}
	return end(b, at)
}
