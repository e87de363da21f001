package exchange

import (
	"bytes"
	"slices"

	"github.com/trident-broker/trident/exchange/streamlog"
)

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
// Readers of runs (ConsumeOpts.StoredRuns: the stream protocol's
// subscriptions) decode nothing: while two or more read, they share a
// SharedRun per stretch of runRecs offsets, on which the first front end
// to encode the run caches its encoding (streamrun.go).

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
	bytes int // shareSlotBytes
}

// sharing is a stream's ring (guarded by stream.mu).
type sharing struct {
	raw   int // cursors with noOffsetHeader reading this node's log
	ring  []shareSlot
	runs  sharedRuns // the runs readers of runs share (run)
	bytes int        // what the slots hold, at most shareMaxBytes
}

// addRaw and dropRaw count a raw cursor coming and going; the ring goes
// once fewer than two remain.
func (s *sharing) addRaw() { s.raw++ }

func (s *sharing) dropRaw() {
	if s.raw--; s.raw < 2 {
		s.ring, s.runs, s.bytes = nil, sharedRuns{}, 0
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

// runSlots is how many shared runs a stream keeps at most (shareMaxBytes
// bounds what they hold), the oldest put going first: readers further
// apart encode for themselves. Readers that subscribe one after the other
// start apart: the first, with credit for many chunks, was 16,384 offsets
// ahead of the last of ten subscriptions of one connection before the
// last one read its first run; 128 runs of 1,024 cover 131,072 offsets.
const runSlots = 128

type runSlot struct {
	n     int
	sr    *SharedRun
	bytes int
}

// sharedRuns are the runs the readers of runs share, by first offset,
// in the order they were put.
type sharedRuns struct {
	m     map[uint64]runSlot
	order []uint64
}

// run is what the readers of runs share of recs (consecutive offsets),
// put there by the first to come; nil if recs alone are over
// shareMaxBytes (each run is counted for its records twice: them and an
// encoding of about their size).
func (s *sharing) run(recs []streamlog.Rec) *SharedRun {
	r := &s.runs
	if r.m == nil {
		r.m = make(map[uint64]runSlot, runSlots)
	}
	first := recs[0].Off
	if sl, ok := r.m[first]; ok && sl.n == len(recs) {
		return sl.sr
	}
	n := shareSlotOverhead
	for _, rec := range recs {
		n += 2 * len(rec.Data)
	}
	if n > shareMaxBytes {
		return nil
	}
	s.dropRun(first) // another cut of the same first offset
	for len(r.order) > 0 && (len(r.m) >= runSlots || s.bytes+n > shareMaxBytes) {
		s.dropRun(r.order[0])
	}
	sl := runSlot{n: len(recs), sr: &SharedRun{}, bytes: n}
	r.m[first] = sl
	r.order = append(r.order, first)
	s.bytes += n
	return sl.sr
}

// dropRun forgets the run shared at first, if any.
func (s *sharing) dropRun(first uint64) {
	r := &s.runs
	sl, ok := r.m[first]
	if !ok {
		return
	}
	delete(r.m, first)
	s.bytes -= sl.bytes
	if i := slices.Index(r.order, first); i >= 0 {
		r.order = slices.Delete(r.order, i, i+1)
	}
}

// ringBytes is what the ring holds (stream.mu held).
func (s *sharing) ringBytes() int { return s.bytes }

// SharedDelivery reports whether d's message may be delivered to other
// consumers too (a stream's raw readers share it): a front end then caches
// its encoding on the message (AddEncoding) rather than encoding it for
// each.
func SharedDelivery(d Delivery) bool { return d.Msg != nil && d.Msg.shared }
