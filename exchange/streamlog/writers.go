package streamlog

import (
	"errors"
	"maps"

	"github.com/trident-broker/trident/exchange/headers"
)

// ErrClosed fails a duplicate's confirm still waiting when its
// stream closes.
var ErrClosed = errors.New("exchange: stream closed")

// Deduplication of a stream's named producers (RabbitMQ's stream
// protocol: a publisher declared with a reference). Each message of such
// a producer carries the reference and its publishing id in its record
// (record version 2, codec.go), written in the same store write as the
// message itself: the log is the only place the sequences live. A
// stream keeps, per reference, the highest publishing id appended
// (writerTable); a message whose id is not above it is not appended again
// but confirmed once everything appended before it is durable, so that a
// client that resends from its buffer after a reconnect stores nothing
// twice and gets every confirm it waits for.
//
// The table is built from the log itself, lazily (the first named
// publish or QueryPublisherSequence after a start reads the log's records
// once, the bulk of them with no lock held, preloadWriters; a stream no
// named producer ever used costs nothing), and kept up to date by every
// append after that. So after kill -9 it is exactly
// what the store holds, and in a cluster a new leader builds it from its
// own store (what the group committed), never from a side table written
// separately. A follower answers QueryPublisherSequence from its store
// (what it has applied, which may lag the leader's by a moment: the
// client then resends a few more, which the leader drops). A leader that
// loses the lead forgets its table (it may hold appends the group never
// committed) and builds it again from its store when it needs it.
//
// A standalone stream's segment record carries a snapshot of the
// producers (as RabbitMQ's osiris writes one at the head of each
// segment): the durable table at the roll and the offset it is complete
// below. A start takes the last one and reads only the records after it,
// and a producer whose messages all went with retention is still known.
// A clustered stream's segments have no records: its new leader reads
// its retained log (what the table does not survive there: a producer
// whose messages all went with retention).

// Writer is what a stream protocol publish carries besides the
// message: its named producer's reference and publishing id (ref "" for
// an unnamed one) and its filter value (publish version 2, "" none).
type Writer struct {
	Ref    string
	Seq    uint64
	Filter string
}

// Named reports whether w is a named producer's (deduplicated).
func (w *Writer) Named() bool { return w != nil && w.Ref != "" }

// DecodeWriter reads what a stream record carries besides the message
// (versions 2 and 4 of the core's message record, exchange/codec.go and
// streamamqp10.go: the version byte, then the reference and the filter
// value each as a uvarint length and its bytes, the publishing id as a
// uvarint between them), ok false for a record without it (version 1)
// or one that does not decode.
func DecodeWriter(data []byte) (w Writer, ok bool) {
	if len(data) == 0 || (data[0] != 2 && data[0] != 4) {
		return w, false
	}
	d := headers.Decoder{B: data[1:], Format: headers.Stored}
	w.Ref = string(d.Raw(d.Uvarint()))
	w.Seq = d.Uvarint()
	w.Filter = string(d.Raw(d.Uvarint()))
	if d.Err != nil {
		return Writer{}, false
	}
	return w, true
}

// writerTable is a stream log's named producers (guarded by Log.mu).
// It reflects the log below next; live, it is also updated by every
// append (on the log's owner: standalone, or the leader). gen counts the
// times it was forgotten (a scan made outside the lock is merged only
// into the table it started from).
type writerTable struct {
	seqs map[string]uint64
	next uint64
	live bool
	gen  uint64
}

// preloadSlack is how many records a scan may leave for the part made
// under the log's lock.
const preloadSlack = 4096

// scanWriters reads the producers of the records in [from, limit) of
// segs into seqs, from the store, with no lock held.
func (l *Log) scanWriters(segs []Segment, from, limit uint64, seqs map[string]uint64) error {
	for _, s := range segs {
		if s.next <= from || s.first >= limit {
			continue
		}
		end := min(s.next, limit)
		err := l.scanSeg(s, max(from, s.first), func(seq uint64, data []byte) bool {
			if seq >= end {
				return false
			}
			if dw, ok := DecodeWriter(data); ok && dw.Ref != "" {
				noteSeq(seqs, dw.Ref, dw.Seq)
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// scanWritersLocked brings the table up to limit by reading the records
// in [w.next, limit) from the store (l.mu held: appends wait, so
// PreloadWriters reads the bulk first).
func (l *Log) scanWritersLocked(limit uint64) error {
	w := &l.writers
	if w.seqs == nil {
		w.seqs = map[string]uint64{}
	}
	if len(l.segs) > 0 && w.next < l.segs[0].first {
		w.next = l.segs[0].first
	}
	if w.next >= limit {
		return nil
	}
	segs := make([]Segment, 0, len(l.segs))
	for _, s := range l.segs {
		segs = append(segs, *s)
	}
	if err := l.scanWriters(segs, w.next, limit, w.seqs); err != nil {
		return err
	}
	w.next = limit
	return nil
}

// PreloadWriters reads the bulk of the log's producers into the table
// without holding l.mu (publishers and readers of the stream go on
// meanwhile), up to the durable watermark: what is left for the locked
// part (ownWritersLocked, writerSeq) is at most about preloadSlack
// records. A no-op once the table is live.
func (l *Log) PreloadWriters() {
	if l.writersLive.Load() {
		return
	}
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	for range 16 {
		l.mu.Lock()
		w := &l.writers
		if len(l.segs) > 0 && w.next < l.segs[0].first {
			w.next = l.segs[0].first
		}
		from, limit, gen := w.next, l.durable.Load(), w.gen
		if w.live || limit <= from+preloadSlack {
			l.mu.Unlock()
			return
		}
		var segs []Segment
		for _, s := range l.segs {
			if s.next > from && s.first < limit {
				segs = append(segs, *s)
			}
		}
		l.mu.Unlock()
		seqs := map[string]uint64{}
		if err := l.scanWriters(segs, from, limit, seqs); err != nil {
			return // the locked part tries again
		}
		l.mu.Lock()
		if w.gen == gen && !w.live && w.next == from {
			if w.seqs == nil {
				w.seqs = map[string]uint64{}
			}
			for ref, seq := range seqs {
				noteSeq(w.seqs, ref, seq)
			}
			w.next = limit
		}
		l.mu.Unlock()
	}
}

// ownWritersLocked makes the table live on the log's owner: every record
// below l.next read, every later append noted (l.mu held). Appends made
// while it was not live carry no producer (a named one makes it live
// first), so records not yet in the store below l.next lose nothing.
func (l *Log) ownWritersLocked() error {
	if l.writers.live {
		return nil
	}
	if err := l.scanWritersLocked(l.next); err != nil {
		return err
	}
	l.writers.live = true
	l.writersLive.Store(true)
	if !l.repl {
		// Every named record below l.next is durable (none was
		// appended while the table was not live): the durable table
		// starts as this one.
		l.dmu.Lock()
		l.dseqs = maps.Clone(l.writers.seqs)
		l.dmu.Unlock()
	}
	return nil
}

// DuplicateLocked reports whether w's id was appended already (l.mu held,
// on the log's owner). An error (the store could not be read) is not a
// duplicate: the message is appended (at least once rather than lost).
func (l *Log) DuplicateLocked(w *Writer) bool {
	if !w.Named() {
		return false
	}
	if err := l.ownWritersLocked(); err != nil {
		return false
	}
	seq, ok := l.writers.seqs[w.Ref]
	return ok && w.Seq <= seq
}

// NoteWriterLocked records an append of w's id (l.mu held).
func (l *Log) NoteWriterLocked(w *Writer) {
	if !l.writers.live {
		return
	}
	if w.Named() {
		noteSeq(l.writers.seqs, w.Ref, w.Seq)
	}
	l.writers.next = l.next
}

// noteSeq raises ref's id in seqs to seq; a first id is kept whatever it
// is (0 included: a second 0 is then a duplicate, as in RabbitMQ).
func noteSeq(seqs map[string]uint64, ref string, seq uint64) {
	if cur, ok := seqs[ref]; !ok || seq > cur {
		seqs[ref] = seq
	}
}

// ForgetWritersLocked drops the table (l.mu held): a leader that stops
// leading may hold appends the group never committed.
func (l *Log) ForgetWritersLocked() {
	l.writers = writerTable{gen: l.writers.gen + 1}
	l.writersLive.Store(false)
}

// WriterSeq returns ref's highest publishing id in the log, 0 if none:
// the live table on the owner, what the node's store holds elsewhere.
func (l *Log) WriterSeq(ref string) (uint64, error) {
	l.PreloadWriters()
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.repl && l.ml == nil {
		err = l.scanWritersLocked(l.durable.Load()) // a follower
	} else {
		err = l.ownWritersLocked()
	}
	if err != nil {
		return 0, err
	}
	return l.writers.seqs[ref], nil
}

// --- confirming a duplicate ---

// durableWaiter is a duplicate's confirm, called once every offset below
// off is durable.
type durableWaiter struct {
	off  uint64
	done func(error)
}

// AfterTailLocked calls done once everything appended so far is durable
// (l.mu held): a duplicate's first copy may still be on its way to the
// disk or the group's majority. The caller runs fireWaiters after it
// unlocks.
func (l *Log) AfterTailLocked(done func(error)) {
	l.wmu.Lock()
	l.waiters = append(l.waiters, durableWaiter{off: l.next, done: done})
	l.nwaiters.Store(int32(len(l.waiters)))
	l.wmu.Unlock()
}

// FireWaiters calls the waiters whose offsets are durable, or all of them
// with err.
func (l *Log) FireWaiters(err error) {
	if l.nwaiters.Load() == 0 {
		return
	}
	durable := l.durable.Load()
	l.wmu.Lock()
	var ready []durableWaiter
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if err != nil || w.off <= durable {
			ready = append(ready, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(l.waiters[len(kept):])
	l.waiters = kept
	l.nwaiters.Store(int32(len(kept)))
	l.wmu.Unlock()
	for _, w := range ready {
		w.done(err)
	}
}

// --- snapshots in segment records (standalone streams) ---

// writerSnapshot is the producers' ids of every record below next.
type writerSnapshot struct {
	seqs map[string]uint64
	next uint64
}

// durableWriter returns w if its append is to be noted in the durable
// table (a standalone stream's named producer, table live), else nil
// (l.mu held).
func (l *Log) durableWriter(w *Writer) *Writer {
	if l.repl || !l.writers.live || !w.Named() {
		return nil
	}
	return w
}

// noteDurable records a named append that is durable, from its store
// callback, before the durable watermark moves past it.
func (l *Log) noteDurable(w *Writer) {
	l.dmu.Lock()
	if l.dseqs == nil {
		l.dseqs = map[string]uint64{}
	}
	noteSeq(l.dseqs, w.Ref, w.Seq)
	l.dmu.Unlock()
}

// snapshotLocked is the snapshot a new segment record carries (l.mu
// held): with the table live, the durable table and the watermark read
// before it (every record below the watermark noted its producer before
// moving it; a record above it in the copy is durable too); otherwise
// the last one, carried on (the records after it are read at the next
// start, as now). nil for a clustered stream.
func (l *Log) snapshotLocked() *writerSnapshot {
	if l.repl {
		return nil
	}
	if !l.writers.live {
		return l.snap
	}
	next := l.durable.Load()
	l.dmu.Lock()
	seqs := maps.Clone(l.dseqs)
	l.dmu.Unlock()
	if seqs == nil {
		seqs = map[string]uint64{}
	}
	l.snap = &writerSnapshot{seqs: seqs, next: next}
	return l.snap
}

// encodeSegmentWriters is a segment record with the producers' snapshot
// (fields "writers" and "wnext", which a build without them ignores).
func encodeSegmentWriters(id, first uint64, snap *writerSnapshot, chunked bool) []byte {
	if snap == nil {
		return encodeRecord(map[string]any{"v": segmentVersion(chunked), "id": id, "first": first})
	}
	ws := make(map[string]any, len(snap.seqs))
	for ref, seq := range snap.seqs {
		ws[ref] = seq
	}
	return encodeRecord(map[string]any{"v": segmentVersion(chunked), "id": id, "first": first, "writers": ws, "wnext": snap.next})
}

// decodeSegmentWriters reads a segment record's snapshot, ok false if it
// has none.
func decodeSegmentWriters(b []byte) (*writerSnapshot, bool) {
	r, err := decodeRecord(b)
	if err != nil {
		return nil, false
	}
	ws, okW := r["writers"].(map[string]any)
	next, okN := r["wnext"].(uint64)
	if !okW || !okN {
		return nil, false
	}
	snap := &writerSnapshot{seqs: make(map[string]uint64, len(ws)), next: next}
	for ref, v := range ws {
		if seq, ok := v.(uint64); ok {
			snap.seqs[ref] = seq
		}
	}
	return snap, true
}
