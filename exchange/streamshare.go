package exchange

import (
	"slices"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// Readers of runs (ConsumeOpts.StoredRuns: the stream protocol's
// subscriptions) decode nothing: while two or more read this node's log,
// they share a SharedRun per run, on which the first front end to encode
// the run caches its encoding (streamrun.go), so that ten subscribers
// reading from the first offset encode each message once.

// shareMaxBytes bounds what a stream's shared runs hold (each counted for
// its records twice, them and an encoding of about their size, and
// shareSlotOverhead).
const (
	shareMaxBytes     = 16 << 20
	shareSlotOverhead = 256
)

// sharing is what a stream's readers of runs share (guarded by
// stream.mu).
type sharing struct {
	raw   int        // cursors with noOffsetHeader reading this node's log
	runs  sharedRuns // the runs they share (run)
	bytes int        // what the runs hold, at most shareMaxBytes
}

// addRaw and dropRaw count a raw cursor coming and going; the shared runs
// go once fewer than two remain.
func (s *sharing) addRaw() { s.raw++ }

func (s *sharing) dropRaw() {
	if s.raw--; s.raw < 2 {
		s.runs, s.bytes = sharedRuns{}, 0
	}
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
