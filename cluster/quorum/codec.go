package quorum

import (
	"encoding/binary"
	"fmt"
	"math"
)

// A Raft log entry of a quorum queue's group is one batch of operations:
//
//	entry   = version:byte op*
//	op      = kind:byte seq:uvarint [len:uvarint data:len bytes]  (len and data for opAppend and opHold only)
//	        | kind:byte(6) from:uvarint to:uvarint count:uvarint bytes:uvarint  (opDeleteRange)
//
// The ops run to the end of the entry; there is no count, so a batch can
// be built by appending ops to a buffer as they are queued.

// entryVersion is the first byte of the entries this package writes,
// but for those that hold an opDeleteRange: those are of version 3
// (rangeEntryVersion), the same encoding with that op besides, so that a
// member not yet upgraded reads every other entry and refuses those by
// their version. Entries of version 1 (before the messages moved to the
// store) keyed messages by seq alone; they are still read, their seqs
// taken as the core's key of that seq in priority level 0 (seq<<1), and
// have no hold or release ops.
const (
	entryVersion       byte = 2
	rangeEntryVersion  byte = 3
	legacyEntryVersion byte = 1
)

// opKind says what an op does to the state.
type opKind byte

const (
	opAppend opKind = 1 // put message seq (replacing it if present)
	opDelete opKind = 2 // remove message seq
	opReturn opKind = 3 // count one return (delivery + requeue) of seq
	// opHold keeps a message aside under key seq (a retry waiting for its
	// delay, exchange/retry.go) and opRelease forgets it (it went back
	// into the queue): held messages are replicated like the queue's own.
	opHold    opKind = 4
	opRelease opKind = 5
	// opDeleteRange removes every message whose key is in [seq, to), all
	// in one key group (the same top byte), which held count messages of
	// bytes bytes when the op was proposed (see Log.DeleteRange): a
	// stream's retention dropping its head. Only in version 3 entries.
	opDeleteRange opKind = 6
)

// hasData reports whether ops of kind k carry data.
func (k opKind) hasData() bool { return k == opAppend || k == opHold }

func (k opKind) String() string {
	switch k {
	case opAppend:
		return "append"
	case opDelete:
		return "delete"
	case opReturn:
		return "return"
	case opHold:
		return "hold"
	case opRelease:
		return "release"
	case opDeleteRange:
		return "delete range"
	}
	return fmt.Sprintf("op(%d)", byte(k))
}

// op is one decoded operation. For opAppend, data aliases the decoded
// entry: the FSM copies it. to, count and bytes are opDeleteRange's
// (its range is [seq, to)).
type op struct {
	kind  opKind
	seq   uint64
	data  []byte
	to    uint64
	count uint64
	bytes uint64
}

// validRange reports whether [from, to) is a range opDeleteRange may
// carry: not empty, within one key group, holding at most its width.
func validRange(from, to, count uint64) bool {
	return from < to && from>>56 == (to-1)>>56 && count <= to-from
}

// newEntry returns an empty entry (just the version byte) with room for
// size more bytes.
func newEntry(size int) []byte {
	b := make([]byte, 1, 1+size)
	b[0] = entryVersion
	return b
}

// appendOp appends one encoded op to an entry started by newEntry; an
// opDeleteRange makes it a version 3 entry.
func appendOp(dst []byte, o op) []byte {
	dst = append(dst, byte(o.kind))
	dst = binary.AppendUvarint(dst, o.seq)
	switch {
	case o.kind.hasData():
		dst = binary.AppendUvarint(dst, uint64(len(o.data)))
		dst = append(dst, o.data...)
	case o.kind == opDeleteRange:
		dst[0] = rangeEntryVersion
		dst = binary.AppendUvarint(dst, o.to)
		dst = binary.AppendUvarint(dst, o.count)
		dst = binary.AppendUvarint(dst, o.bytes)
	}
	return dst
}

// opSize is the encoded size of an op, as appendOp writes it.
func opSize(o op) int {
	n := 1 + uvarintLen(o.seq)
	switch {
	case o.kind.hasData():
		n += uvarintLen(uint64(len(o.data))) + len(o.data)
	case o.kind == opDeleteRange:
		n += uvarintLen(o.to) + uvarintLen(o.count) + uvarintLen(o.bytes)
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// decodeEntry decodes an entry, appending its ops to ops[:0]. Append data
// alias b. Any malformed input is an error wrapping ErrCorrupt; nothing is
// allocated beyond the ops slice, which holds at most len(b)/2 ops.
func decodeEntry(b []byte, ops []op) ([]op, error) {
	ops = ops[:0]
	err := walkEntry(b, func(o op) { ops = append(ops, o) })
	return ops, err
}

// walkEntry decodes an entry and calls fn (if not nil) for each op in
// turn, stopping at the first malformed one (an error wrapping
// ErrCorrupt). It allocates nothing; append data alias b.
func walkEntry(b []byte, fn func(op)) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty entry", ErrCorrupt)
	}
	legacy := b[0] == legacyEntryVersion
	ranges := b[0] == rangeEntryVersion
	if b[0] != entryVersion && !legacy && !ranges {
		return fmt.Errorf("%w: entry version %d, want %d or %d", ErrCorrupt, b[0], entryVersion, rangeEntryVersion)
	}
	for i := 1; i < len(b); {
		kind := opKind(b[i])
		i++
		if kind < opAppend || kind > opDeleteRange || (legacy && kind > opReturn) || (!ranges && kind == opDeleteRange) {
			return fmt.Errorf("%w: unknown op kind %d at offset %d of a version %d entry", ErrCorrupt, byte(kind), i-1, b[0])
		}
		seq, n := binary.Uvarint(b[i:])
		if n <= 0 {
			return fmt.Errorf("%w: bad seq at offset %d", ErrCorrupt, i)
		}
		i += n
		if legacy {
			if seq >= 1<<63 {
				return fmt.Errorf("%w: legacy seq %d out of range", ErrCorrupt, seq)
			}
			seq <<= 1
		}
		o := op{kind: kind, seq: seq}
		if kind.hasData() {
			l, n := binary.Uvarint(b[i:])
			if n <= 0 {
				return fmt.Errorf("%w: bad data length at offset %d", ErrCorrupt, i)
			}
			i += n
			if l > uint64(len(b)-i) {
				return fmt.Errorf("%w: data length %d past the end of the entry", ErrCorrupt, l)
			}
			o.data = b[i : i+int(l) : i+int(l)]
			i += int(l)
		}
		if kind == opDeleteRange {
			var f [3]uint64
			for j, what := range [3]string{"range end", "range count", "range bytes"} {
				v, n := binary.Uvarint(b[i:])
				if n <= 0 {
					return fmt.Errorf("%w: bad %s at offset %d", ErrCorrupt, what, i)
				}
				f[j], i = v, i+n
			}
			o.to, o.count, o.bytes = f[0], f[1], f[2]
			if !validRange(o.seq, o.to, o.count) || o.bytes > math.MaxInt64 {
				return fmt.Errorf("%w: range [%d, %d) of %d messages, %d bytes", ErrCorrupt, o.seq, o.to, o.count, o.bytes)
			}
		}
		if fn != nil {
			fn(o)
		}
	}
	return nil
}
