package quorum

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// A snapshot of the FSM is written as one stream:
//
//	snapshot = version:byte stateLen:uvarint state:stateLen bytes record* end:byte(0) crc:uint32be
//	record   = kind:byte(1 message, 2 held) key:uvarint len:uvarint data:len bytes
//
// state is the FSM's state encoding (state.go). Records are the queue's
// messages in increasing key order, then its held messages (opHold) in
// increasing key order. crc is the CRC-32C (Castagnoli) of
// every byte before it. Nothing may follow it.

// snapshotVersion is the first byte of a full snapshot: the stream a
// member is sent (SnapshotStore.Open).
const snapshotVersion byte = 2

// A snapshot as a member keeps it on disk holds only the state (its
// messages are in the node's Store already):
//
//	stateSnapshot = version:byte(3) stateLen:uvarint state:stateLen bytes crc:uint32be
//
// SnapshotStore.Open turns it into a full snapshot when Raft sends it.
const stateSnapshotVersion byte = 3

// writeStateSnapshot writes s as a state-only snapshot.
func writeStateSnapshot(w io.Writer, s *state) error {
	enc := s.encode(nil)
	b := append([]byte{stateSnapshotVersion}, binary.AppendUvarint(nil, uint64(len(enc)))...)
	b = append(b, enc...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	_, err := w.Write(b)
	return err
}

// readStateSnapshot decodes what writeStateSnapshot wrote; malformed input
// is an error wrapping ErrCorrupt.
func readStateSnapshot(rd io.Reader) (state, error) {
	r := &snapReader{br: bufio.NewReaderSize(rd, 4<<10)}
	v, err := r.ReadByte()
	if err != nil {
		return state{}, readErr("version", err)
	}
	if v != stateSnapshotVersion {
		return state{}, corruptf("state snapshot version %d, want %d", v, stateSnapshotVersion)
	}
	return r.stateOnly()
}

// stateOnly reads the rest of a state-only snapshot.
func (r *snapReader) stateOnly() (state, error) {
	s, err := r.state()
	if err != nil {
		return state{}, err
	}
	if err := r.finish(); err != nil {
		return state{}, err
	}
	return s, nil
}

// maxMessageBytes bounds one message in a snapshot. Data is read in
// chunks, so a lying length costs at most what the stream really holds;
// this bound only rejects the absurd.
const maxMessageBytes = 1 << 30

// maxStateBytes bounds a snapshot's state (its return counts dominate).
const maxStateBytes = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeSnapshot streams s and the messages walk yields (in key order) to w.
func writeSnapshot(w io.Writer, s *state, walk func(fn func(held bool, key uint64, data []byte) error) error) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	enc := s.encode(nil)
	var tmp [3 * binary.MaxVarintLen64]byte
	b := append(tmp[:0], snapshotVersion)
	b = binary.AppendUvarint(b, uint64(len(enc)))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	if _, err := bw.Write(enc); err != nil {
		return err
	}
	first, prev, inHeld := true, uint64(0), false
	err := walk(func(held bool, key uint64, data []byte) error {
		if held != inHeld {
			if !held {
				return fmt.Errorf("quorum: snapshot out of order: a message after held ones")
			}
			inHeld, first = true, true
		}
		if !first && key <= prev {
			return fmt.Errorf("quorum: snapshot out of order: key %d after %d", key, prev)
		}
		first, prev = false, key
		kind := byte(1)
		if held {
			kind = 2
		}
		b := append(tmp[:0], kind)
		b = binary.AppendUvarint(b, key)
		b = binary.AppendUvarint(b, uint64(len(data)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		_, err := bw.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	if err := bw.WriteByte(0); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(binary.BigEndian.AppendUint32(tmp[:0], crc.Sum32()))
	return err
}

// snapReader reads a snapshot stream through a buffer, keeping the CRC of
// what it consumed (not of what it buffered ahead).
type snapReader struct {
	br  *bufio.Reader
	crc uint32
	err error // the last error of br.ReadByte
}

func (r *snapReader) ReadByte() (byte, error) {
	c, err := r.br.ReadByte()
	if err != nil {
		r.err = err
		return 0, err
	}
	r.crc = crc32.Update(r.crc, castagnoli, []byte{c})
	return c, nil
}

func (r *snapReader) uvarint(what string) (uint64, error) {
	v, err := binary.ReadUvarint(r)
	if err != nil {
		if r.err == nil { // not the stream's error: the varint overflows
			return 0, corruptf("%s: %v", what, err)
		}
		return 0, readErr(what, err)
	}
	return v, nil
}

// data reads n bytes, growing the buffer in chunks so that a length the
// stream does not back allocates no more than the stream holds.
func (r *snapReader) data(n uint64) ([]byte, error) {
	const chunk = 64 << 10
	if n > maxMessageBytes {
		return nil, corruptf("message of %d bytes", n)
	}
	buf := make([]byte, 0, min(n, chunk))
	for uint64(len(buf)) < n {
		k := int(min(n-uint64(len(buf)), chunk))
		buf = slices.Grow(buf, k)
		if _, err := io.ReadFull(r.br, buf[len(buf):len(buf)+k]); err != nil {
			return nil, readErr("message data", err)
		}
		buf = buf[:len(buf)+k]
	}
	r.crc = crc32.Update(r.crc, castagnoli, buf)
	return buf, nil
}

// readSnapshot decodes a snapshot stream, calling put for each message
// (data is only valid during the call) and returning the state. Malformed
// input is an error wrapping ErrCorrupt, never a panic; memory grows with
// the bytes actually read, whatever the counts and lengths claim. Messages
// are handed to put before the checksum is checked: the caller must treat
// what it got as void on error.
func readSnapshot(rd io.Reader, put func(held bool, key uint64, data []byte)) (state, error) {
	r := &snapReader{br: bufio.NewReaderSize(rd, 64<<10)}
	v, err := r.ReadByte()
	if err != nil {
		return state{}, readErr("version", err)
	}
	if v == legacySnapshotVersion {
		return readLegacySnapshot(r, put)
	}
	if v == stateSnapshotVersion {
		// Well formed or not, it cannot be installed: its messages are
		// in the Store of the member that took it.
		if _, err := r.stateOnly(); err != nil {
			return state{}, err
		}
		return state{}, ErrStateOnly
	}
	if v != snapshotVersion {
		return state{}, corruptf("snapshot version %d, want %d", v, snapshotVersion)
	}
	s, err := r.state()
	if err != nil {
		return state{}, err
	}
	first, prev, inHeld := true, uint64(0), false
	for {
		kind, err := r.ReadByte()
		if err != nil {
			return state{}, readErr("record", err)
		}
		if kind == 0 {
			break
		}
		switch {
		case kind == 2 && !inHeld:
			inHeld, first = true, true
		case kind == 1 && !inHeld, kind == 2:
		default:
			return state{}, corruptf("record kind %d", kind)
		}
		key, err := r.uvarint("key")
		if err != nil {
			return state{}, err
		}
		if !first && key <= prev {
			return state{}, corruptf("key %d after %d", key, prev)
		}
		first, prev = false, key
		l, err := r.uvarint("length")
		if err != nil {
			return state{}, err
		}
		data, err := r.data(l)
		if err != nil {
			return state{}, err
		}
		put(inHeld, key, data)
	}
	if err := r.finish(); err != nil {
		return state{}, err
	}
	return s, nil
}

// state reads a snapshot's length-prefixed state.
func (r *snapReader) state() (state, error) {
	n, err := r.uvarint("state length")
	if err != nil {
		return state{}, err
	}
	if n > maxStateBytes {
		return state{}, corruptf("state of %d bytes", n)
	}
	enc, err := r.data(n)
	if err != nil {
		return state{}, err
	}
	return decodeState(enc)
}

// legacySnapshotVersion is the snapshot format of the builds that kept a
// quorum queue's messages in memory:
//
//	snapshot = version:byte(1) count:uvarint message{count} crc:uint32be
//	message  = seqDelta:uvarint returns:uvarint len:uvarint data:len bytes
//
// with messages keyed by seq alone. It is still read (an upgraded member
// restores its last snapshot from it, and a member may receive one from
// a leader not yet upgraded); each seq becomes the core's key of that seq
// in priority level 0 (seq<<1).
const legacySnapshotVersion byte = 1

func readLegacySnapshot(r *snapReader, put func(held bool, key uint64, data []byte)) (state, error) {
	count, err := r.uvarint("count")
	if err != nil {
		return state{}, err
	}
	var s state
	var seq uint64
	for i := uint64(0); i < count; i++ {
		d, err := r.uvarint("seq")
		if err != nil {
			return state{}, err
		}
		if i > 0 && d == 0 || d > (1<<63-1)-seq {
			return state{}, corruptf("seq delta %d after seq %d", d, seq)
		}
		seq += d
		ret, err := r.uvarint("returns")
		if err != nil {
			return state{}, err
		}
		if ret > 1<<32-1 {
			return state{}, corruptf("returns %d", ret)
		}
		n, err := r.uvarint("length")
		if err != nil {
			return state{}, err
		}
		data, err := r.data(n)
		if err != nil {
			return state{}, err
		}
		key := seq << 1
		put(false, key, data)
		s.add(key, len(data))
		if ret > 0 {
			if s.returns == nil {
				s.returns = map[uint64]uint32{}
			}
			s.returns[key] = uint32(ret)
		}
	}
	s.appended = 0
	if err := r.finish(); err != nil {
		return state{}, err
	}
	return s, nil
}

// finish reads the checksum that ends a stream and checks it against what
// was consumed, and that nothing follows it.
func (r *snapReader) finish() error {
	want := r.crc
	var sum [4]byte
	if _, err := io.ReadFull(r.br, sum[:]); err != nil {
		return readErr("checksum", err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return corruptf("checksum %08x, computed %08x", got, want)
	}
	if _, err := r.br.ReadByte(); err != io.EOF {
		if err == nil {
			return corruptf("data after the checksum")
		}
		return err
	}
	return nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// readErr reports a failed read of what: a stream that ends early is
// corrupt (truncated); any other error is the reader's, passed on.
func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptf("%s: truncated", what)
	}
	if errors.Is(err, ErrCorrupt) {
		return err
	}
	return fmt.Errorf("quorum: snapshot: reading %s: %w", what, err)
}
