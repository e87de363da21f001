package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// A Deliver frame carries one chunk in osiris's format: a 48-byte header
// (magic and version, type, entry and record counts, timestamp, epoch,
// first offset, CRC32 of the data, data and trailer lengths, bloom filter
// size, reserved) followed by the data: simple entries, each a uint32 size
// (top bit clear) and the message's bytes. Clients check the CRC (IEEE)
// over the data.

// ChunkMagicVersion is osiris's magic (5) and chunk version (0).
const ChunkMagicVersion = 0x50

// MaxChunkEntries is the most entries one chunk holds (a uint16 count).
const MaxChunkEntries = 1<<16 - 1

// Chunk is a chunk being built into a Deliver frame (BeginDeliver, Add,
// End): the messages are copied once, into the frame.
type Chunk struct {
	at, hdr, data int
	n             int
}

// BeginDeliver starts a Deliver (version 1) of a chunk to subscription
// id whose first message has offset first and was written at ts (ms since
// the epoch).
func BeginDeliver(b []byte, id uint8, first uint64, ts int64) ([]byte, Chunk) {
	b, at := begin(b, KeyDeliver, 1)
	b = append(b, id)
	c := Chunk{at: at, hdr: len(b)}
	b = append(b, ChunkMagicVersion, 0)
	b = be16(b, 0) // entries
	b = be32(b, 0) // records
	b = be64(b, uint64(ts))
	b = be64(b, 0) // epoch
	b = be64(b, first)
	b = be32(b, 0)         // crc
	b = be32(b, 0)         // data length
	b = be32(b, 0)         // trailer length
	b = append(b, 0)       // bloom size
	b = append(b, 0, 0, 0) // reserved
	c.data = len(b)
	return b, c
}

// Add appends one message.
func (c *Chunk) Add(b []byte, msg []byte) []byte {
	c.n++
	return append(be32(b, uint32(len(msg))&0x7fffffff), msg...)
}

// BeginEntry starts a message appended in place, after b (the frame so
// far): append the message's bytes to what it returns, then EndEntry.
func (c *Chunk) BeginEntry(b []byte) ([]byte, int) { return be32(b, 0), len(b) }

// EndEntry completes the message begun at at (BeginEntry's).
func (c *Chunk) EndEntry(b []byte, at int) []byte {
	c.n++
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4)&0x7fffffff)
	return b
}

// Len is the number of messages added.
func (c *Chunk) Len() int { return c.n }

// End fills in the counts, the data length and the CRC.
func (c *Chunk) End(b []byte) []byte {
	h := b[c.hdr:]
	binary.BigEndian.PutUint16(h[2:], uint16(c.n))
	binary.BigEndian.PutUint32(h[4:], uint32(c.n))
	data := b[c.data:]
	binary.BigEndian.PutUint32(h[32:], crc32.ChecksumIEEE(data))
	binary.BigEndian.PutUint32(h[36:], uint32(len(data)))
	return end(b, c.at)
}

// ParsedChunk is a chunk as a client reads it (tests and tools).
type ParsedChunk struct {
	Sub       uint8
	Timestamp int64
	First     uint64
	Messages  [][]byte
}

// ParseDeliver reads a Deliver payload (as ReadFrame returns it), checking
// the CRC.
func ParseDeliver(p []byte) (ParsedChunk, error) {
	d := &dec{b: p}
	if d.u16() != KeyDeliver || d.u16() != 1 {
		return ParsedChunk{}, ErrMalformed
	}
	pc := ParsedChunk{Sub: d.u8()}
	if d.u8() != ChunkMagicVersion {
		return pc, ErrMalformed
	}
	d.u8()
	d.u16()
	nrec := d.u32()
	pc.Timestamp = int64(d.u64())
	d.u64()
	pc.First = d.u64()
	crc := d.u32()
	dlen := d.u32()
	d.u32()
	d.u32()
	if d.err != nil || uint32(len(d.b)) != dlen || crc32.ChecksumIEEE(d.b) != crc {
		return pc, ErrMalformed
	}
	for i := uint32(0); i < nrec && d.err == nil; i++ {
		n := d.u32()
		if n&0x80000000 != 0 || uint32(len(d.b)) < n {
			return pc, ErrMalformed
		}
		pc.Messages = append(pc.Messages, d.b[:n])
		d.b = d.b[n:]
	}
	if d.err != nil || len(d.b) != 0 {
		return pc, ErrMalformed
	}
	return pc, nil
}

// AppendChunk appends a Deliver (version 1) of a chunk whose n messages'
// entries (each a 4-byte size and the message, as Add appends them) are
// already encoded: data, with its CRC crc (crc32.ChecksumIEEE(data)).
func AppendChunk(b []byte, id uint8, first uint64, ts int64, n int, crc uint32, data []byte) []byte {
	b, c := BeginDeliver(b, id, first, ts)
	h := b[c.hdr:]
	binary.BigEndian.PutUint16(h[2:], uint16(n))
	binary.BigEndian.PutUint32(h[4:], uint32(n))
	binary.BigEndian.PutUint32(h[32:], crc)
	binary.BigEndian.PutUint32(h[36:], uint32(len(data)))
	return end(append(b, data...), c.at)
}
