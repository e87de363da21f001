package raftstore

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// ErrCorrupt is returned when a stored log entry cannot be decoded.
var ErrCorrupt = errors.New("raftstore: corrupt log entry")

// codecV1 is the first byte of every encoded log entry.
const codecV1 = 1

// Flags of an encoded entry.
const flagAppendedAt = 1 << 0

// encodeLog appends the encoding of l, less its index (which is the key),
// to dst:
//
//	version(1) flags(1) type(1) term(uvarint) [appendedAt unix ns (varint)]
//	len(data)(uvarint) data len(ext)(uvarint) ext
func encodeLog(dst []byte, l *raft.Log) []byte {
	var flags byte
	if !l.AppendedAt.IsZero() {
		flags |= flagAppendedAt
	}
	dst = append(dst, codecV1, flags, byte(l.Type))
	dst = binary.AppendUvarint(dst, l.Term)
	if flags&flagAppendedAt != 0 {
		dst = binary.AppendVarint(dst, l.AppendedAt.UnixNano())
	}
	dst = binary.AppendUvarint(dst, uint64(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	dst = append(dst, l.Extensions...)
	return dst
}

// decodeLog fills l from b, which decodeLog does not retain.
func decodeLog(b []byte, index uint64, l *raft.Log) error {
	if len(b) < 3 || b[0] != codecV1 {
		return ErrCorrupt
	}
	flags, typ := b[1], b[2]
	if flags&^flagAppendedAt != 0 {
		return ErrCorrupt
	}
	b = b[3:]
	term, n := binary.Uvarint(b)
	if n <= 0 {
		return ErrCorrupt
	}
	b = b[n:]
	var at time.Time
	if flags&flagAppendedAt != 0 {
		ns, n := binary.Varint(b)
		if n <= 0 {
			return ErrCorrupt
		}
		b = b[n:]
		at = time.Unix(0, ns).UTC()
	}
	data, b, ok := decodeBytes(b)
	if !ok {
		return ErrCorrupt
	}
	ext, b, ok := decodeBytes(b)
	if !ok || len(b) != 0 {
		return ErrCorrupt
	}
	*l = raft.Log{
		Index:      index,
		Term:       term,
		Type:       raft.LogType(typ),
		Data:       data,
		Extensions: ext,
		AppendedAt: at,
	}
	return nil
}

// decodeBytes reads a uvarint length and that many bytes (copied; nil when
// the length is 0, as raft's in-memory store gives back what it was given).
func decodeBytes(b []byte) (v, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	b = b[k:]
	if n > 0 {
		v = append([]byte(nil), b[:n]...)
	}
	return v, b[n:], true
}
