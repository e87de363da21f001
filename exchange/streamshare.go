package exchange

import "bytes"

// Raw readers of a stream share what they read. Each cursor decodes the
// records it reads into messages; with the header a cursor adds
// (x-stream-offset) every delivery needs a message of its own, but the
// deliveries of consumers that take the offset from the delivery
// (ConsumeOpts.NoOffsetHeader: the stream protocol) can share one. While
// two or more such cursors read a stream, the messages they decode are
// kept in a small ring by offset, so that ten subscribers reading from
// the first offset decode each message once rather than ten times, and
// the front end encodes it once (SharedDelivery: it caches its encoding
// on the message). A slot holds the record's bytes it was decoded from:
// a message is taken from the ring only for equal bytes (the same bytes
// when the log's read cache handed both cursors the same chunk, else
// compared), never for another record at the offset.
//
// Readers of stored records (ConsumeOpts.StoredRecords: the stream
// protocol's subscriptions) decode nothing: while two or more read, a
// slot holds a SharedRecord instead of a message, on which the first
// front end to encode the record caches its encoding (Delivery.Shared),
// so that ten subscribers encode each record once and write those bytes.

// shareRingSize is how many decoded messages a stream shares: readers
// further apart than this decode for themselves. Ten stream-protocol
// subscribers reading from the first offset (2,048 prefetch each, chunks
// of up to 1,000) drifted more than 4,096 offsets apart and decoded each
// message about six times with a ring of 4,096; with 16,384 about once.
// While two or more raw readers read, the ring holds up to that many
// decoded messages (~6 MB of 16-byte ones), which their deliveries share
// rather than each holding its own.
const shareRingSize = 16384

// shareMaxBytes bounds what the ring holds in bytes besides its count:
// 16,384 messages of 1 KiB are ~50 MiB with the records their slots keep
// and the encodings front ends cache on them. A message that would take
// the ring past it is decoded for its reader alone (not shared); messages
// of up to ~600 bytes never reach it. shareSlotBytes is what a slot is
// counted for: the record, the body twice (the decoded copy and an
// encoding of it) and shareSlotOverhead for the message's struct and
// properties.
const (
	shareMaxBytes     = 16 << 20
	shareSlotOverhead = 256
)

func shareSlotBytes(data []byte, m *Message) int {
	return len(data) + 2*len(m.Body) + shareSlotOverhead
}

type shareSlot struct {
	off   uint64
	data  []byte // the record's bytes the message was decoded from
	m     *Message
	sr    *SharedRecord // or, for readers of stored records, the record's
	bytes int           // shareSlotBytes, shareRecordBytes
}

// sharing is a stream's ring (guarded by stream.mu).
type sharing struct {
	raw   int // cursors with noOffsetHeader reading this node's log
	ring  []shareSlot
	bytes int // the slots' shareSlotBytes, at most shareMaxBytes
	// Records to share seen and found in the ring in the current window
	// (of shareWindow records), and the last window's verdict: readers
	// further apart than the ring never find what the others put, and a
	// record shared for nobody costs its reader more (an encoding made
	// to be kept, then copied) than one it encodes in place; meanwhile
	// only one record in shareSample is shared, to see whether they
	// came together again.
	seen, found int
	useless     bool
}

const (
	shareWindow = 4096
	shareSample = 16
)

// addRaw and dropRaw count a raw cursor coming and going; the ring goes
// once fewer than two remain.
func (s *sharing) addRaw() { s.raw++ }

func (s *sharing) dropRaw() {
	if s.raw--; s.raw < 2 {
		s.ring, s.bytes = nil, 0
		s.seen, s.found, s.useless = 0, 0, false
	}
}

// decode is decodeMessage of the record (off, data), shared when two or
// more raw cursors read (raw: the caller is one of them).
func (s *sharing) decode(off uint64, data []byte, raw bool) (*Message, bool, error) {
	if !raw || s.raw < 2 || len(data) == 0 {
		m, _, err := decodeMessage(data)
		return m, false, err
	}
	if s.ring == nil {
		s.ring = make([]shareSlot, shareRingSize)
	}
	sl := &s.ring[off%shareRingSize]
	if sl.m != nil && sl.off == off && bytes.Equal(sl.data, data) {
		return sl.m, true, nil
	}
	m, _, err := decodeMessage(data)
	if err != nil {
		return nil, false, err
	}
	s.bytes -= sl.bytes
	*sl = shareSlot{}
	n := shareSlotBytes(data, m)
	if s.bytes+n > shareMaxBytes {
		return m, false, nil // the ring is full in bytes: this reader's own
	}
	m.shared = true
	*sl = shareSlot{off: off, data: data, m: m, bytes: n}
	s.bytes += n
	return m, true, nil
}

// SharedRecord is what the readers of a stream's stored records
// (ConsumeOpts.StoredRecords) share of one record while two or more read
// (Delivery.Shared): the first front end to encode it caches its encoding
// here (AddEncoding) and the others write those bytes, so that each
// record is encoded once, and decoded never.
type SharedRecord struct{ enc encodings }

// Encoding returns the bytes cached for k, or nil (safe for concurrent
// use, as Message.Encoding).
func (r *SharedRecord) Encoding(k *EncodingKey) []byte { return r.enc.get(k) }

// AddEncoding caches e, or returns the bytes of the one another writer
// cached first (as Message.AddEncoding).
func (r *SharedRecord) AddEncoding(e *Encoding) []byte { return r.enc.add(e) }

// shareRecordBytes is what a shared record's slot is counted for: the
// record, an encoding of about its size, shareSlotOverhead.
func shareRecordBytes(data []byte) int { return 2*len(data) + shareSlotOverhead }

// record is the shared record at off for a reader of stored records
// (two or more read), nil if the ring has none for these bytes.
func (s *sharing) record(off uint64, data []byte) *SharedRecord {
	if s.ring == nil {
		return nil
	}
	sl := &s.ring[off%shareRingSize]
	if sl.sr != nil && sl.off == off && bytes.Equal(sl.data, data) {
		return sl.sr
	}
	return nil
}

// note counts a record a reader wanted to share (wantsRecord), found in
// the ring or not, and at the end of a window says whether sharing pays:
// a record put once and found by k other readers is k+1 records seen, k
// found; it pays while they are found by one other reader in two or more
// (3 found >= seen).
func (s *sharing) note(found bool) {
	s.seen++
	if found {
		s.found++
	}
	window := shareWindow
	if s.useless {
		window /= shareSample // as many records read
	}
	if s.seen >= window {
		s.useless = 3*s.found < s.seen
		s.seen, s.found = 0, 0
	}
}

// wantsRecord reports whether the record at off is to be shared: while
// sharing pays, every one; else one in shareSample.
func (s *sharing) wantsRecord(off uint64) bool { return !s.useless || off%shareSample == 0 }

// putRecord shares the record at off (checked: it reads in place), nil
// if the ring is full in bytes.
func (s *sharing) putRecord(off uint64, data []byte) *SharedRecord {
	if s.ring == nil {
		s.ring = make([]shareSlot, shareRingSize)
	}
	sl := &s.ring[off%shareRingSize]
	s.bytes -= sl.bytes
	*sl = shareSlot{}
	n := shareRecordBytes(data)
	if s.bytes+n > shareMaxBytes {
		return nil
	}
	*sl = shareSlot{off: off, data: data, sr: &SharedRecord{}, bytes: n}
	s.bytes += n
	return sl.sr
}

// ringBytes is what the ring holds (stream.mu held).
func (s *sharing) ringBytes() int { return s.bytes }

// SharedDelivery reports whether d's message may be delivered to other
// consumers too (a stream's raw readers share it): a front end then caches
// its encoding on the message (AddEncoding) rather than encoding it for
// each.
func SharedDelivery(d Delivery) bool { return d.Msg != nil && d.Msg.shared }
