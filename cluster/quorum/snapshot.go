package quorum

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
)

// A snapshot of the FSM is written as one stream:
//
//	snapshot = version:byte count:uvarint message{count} crc:uint32be
//	message  = seqDelta:uvarint returns:uvarint len:uvarint data:len bytes
//
// Messages are in increasing seq order; seqDelta is the first message's
// seq, then the (non-zero) difference from the previous one. crc is the
// CRC-32C (Castagnoli) of every byte before it. Nothing may follow it.

// snapshotVersion is the first byte of every snapshot this package writes.
const snapshotVersion byte = 1

// maxMessageBytes bounds one message in a snapshot. Data is read in
// chunks, so a lying length costs at most what the stream really holds;
// this bound only rejects the absurd.
const maxMessageBytes = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeSnapshot streams ents (sorted by seq, all live) to w.
func writeSnapshot(w io.Writer, ents []entry) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var tmp [3 * binary.MaxVarintLen64]byte
	b := append(tmp[:0], snapshotVersion)
	b = binary.AppendUvarint(b, uint64(len(ents)))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	var prev uint64
	for i, e := range ents {
		if i > 0 && e.seq <= prev {
			return fmt.Errorf("quorum: snapshot out of order: seq %d after %d", e.seq, prev)
		}
		b = binary.AppendUvarint(tmp[:0], e.seq-prev)
		b = binary.AppendUvarint(b, uint64(e.returns))
		b = binary.AppendUvarint(b, uint64(len(e.data)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		if _, err := bw.Write(e.data); err != nil {
			return err
		}
		prev = e.seq
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(tmp[:0], crc.Sum32()))
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

// readSnapshot decodes a whole snapshot stream. Malformed input is an
// error wrapping ErrCorrupt, never a panic; memory grows with the bytes
// actually read, whatever the counts and lengths claim.
func readSnapshot(rd io.Reader) ([]entry, error) {
	r := &snapReader{br: bufio.NewReaderSize(rd, 64<<10)}
	v, err := r.ReadByte()
	if err != nil {
		return nil, readErr("version", err)
	}
	if v != snapshotVersion {
		return nil, corruptf("snapshot version %d, want %d", v, snapshotVersion)
	}
	count, err := r.uvarint("count")
	if err != nil {
		return nil, err
	}
	ents := make([]entry, 0, min(count, 1<<12))
	var seq uint64
	for i := uint64(0); i < count; i++ {
		d, err := r.uvarint("seq")
		if err != nil {
			return nil, err
		}
		if i > 0 && d == 0 || d > math.MaxUint64-seq {
			return nil, corruptf("seq delta %d after seq %d", d, seq)
		}
		seq += d
		ret, err := r.uvarint("returns")
		if err != nil {
			return nil, err
		}
		if ret > math.MaxUint32 {
			return nil, corruptf("returns %d", ret)
		}
		n, err := r.uvarint("length")
		if err != nil {
			return nil, err
		}
		data, err := r.data(n)
		if err != nil {
			return nil, err
		}
		ents = append(ents, entry{seq: seq, data: data, returns: uint32(ret)})
	}
	want := r.crc
	var sum [4]byte
	if _, err := io.ReadFull(r.br, sum[:]); err != nil {
		return nil, readErr("checksum", err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return nil, corruptf("checksum %08x, computed %08x", got, want)
	}
	if _, err := r.br.ReadByte(); err != io.EOF {
		if err == nil {
			return nil, corruptf("data after the checksum")
		}
		return nil, err
	}
	return ents, nil
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
