package exchange

import (
	"errors"
	"maps"

	"github.com/trident-broker/trident/exchange/headers"
)

// ErrNoStreamCopy: QueryPublisherSequence on a node that holds no copy of
// a clustered stream (not one of its members). It has nothing to read the
// answer from, and a wrong one (0) would make a client number new
// messages as duplicates, which the leader would drop.
var ErrNoStreamCopy = errors.New("exchange: this node holds no copy of the stream")

// errStreamClosed fails a duplicate's confirm still waiting when its
// stream closes.
var errStreamClosed = errors.New("exchange: stream closed")

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

// streamWriter is what a stream protocol publish carries besides the
// message: its named producer's reference and publishing id (ref "" for
// an unnamed one) and its filter value (publish version 2, "" none).
type streamWriter struct {
	ref    string
	seq    uint64
	filter string
}

// named reports whether w is a named producer's (deduplicated).
func (w *streamWriter) named() bool { return w != nil && w.ref != "" }

// SetStreamWriter marks m as publishing id seq of the stream producer
// named ref (RabbitMQ's stream protocol, a publisher with a reference): a
// stream that already appended an id of ref as high or higher does not
// append it again (it confirms it). Other queues ignore it. An empty ref
// clears it.
func (m *Message) SetStreamWriter(ref string, seq uint64) {
	m.setStream(ref, seq, m.StreamFilter())
}

// SetStreamFilter sets m's filter value (RabbitMQ 3.13's stream
// filtering: publish version 2), kept in its stream record; "" clears it.
func (m *Message) SetStreamFilter(v string) {
	var ref string
	var seq uint64
	if m.writer != nil {
		ref, seq = m.writer.ref, m.writer.seq
	}
	m.setStream(ref, seq, v)
}

// StreamFilter returns m's filter value, "" if none.
func (m *Message) StreamFilter() string {
	if m.writer == nil {
		return ""
	}
	return m.writer.filter
}

func (m *Message) setStream(ref string, seq uint64, filter string) {
	if ref == "" && filter == "" {
		m.writer = nil
		return
	}
	if ref == "" {
		seq = 0
	}
	m.writer = &streamWriter{ref: ref, seq: seq, filter: filter}
}

// decodeWriter reads what a stream record carries besides the message
// (version 2), ok false for a record without it (version 1) or one that
// does not decode.
func decodeWriter(data []byte) (w streamWriter, ok bool) {
	if len(data) == 0 || data[0] != 2 {
		return w, false
	}
	d := headers.Decoder{B: data[1:], Format: headers.Stored}
	w.ref = string(d.Raw(d.Uvarint()))
	w.seq = d.Uvarint()
	w.filter = string(d.Raw(d.Uvarint()))
	if d.Err != nil {
		return streamWriter{}, false
	}
	return w, true
}

// writerTable is a stream log's named producers (guarded by streamLog.mu).
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
func (l *streamLog) scanWriters(segs []segment, from, limit uint64, seqs map[string]uint64) error {
	for _, s := range segs {
		if s.next <= from || s.first >= limit {
			continue
		}
		end := min(s.next, limit)
		err := l.scanSeg(s, max(from, s.first), func(seq uint64, data []byte) bool {
			if seq >= end {
				return false
			}
			if dw, ok := decodeWriter(data); ok && dw.ref != "" {
				noteSeq(seqs, dw.ref, dw.seq)
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
// preloadWriters reads the bulk first).
func (l *streamLog) scanWritersLocked(limit uint64) error {
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
	segs := make([]segment, 0, len(l.segs))
	for _, s := range l.segs {
		segs = append(segs, *s)
	}
	if err := l.scanWriters(segs, w.next, limit, w.seqs); err != nil {
		return err
	}
	w.next = limit
	return nil
}

// preloadWriters reads the bulk of the log's producers into the table
// without holding l.mu (publishers and readers of the stream go on
// meanwhile), up to the durable watermark: what is left for the locked
// part (ownWritersLocked, writerSeq) is at most about preloadSlack
// records. A no-op once the table is live.
func (l *streamLog) preloadWriters() {
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
		var segs []segment
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
func (l *streamLog) ownWritersLocked() error {
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

// duplicateLocked reports whether w's id was appended already (l.mu held,
// on the log's owner). An error (the store could not be read) is not a
// duplicate: the message is appended (at least once rather than lost).
func (l *streamLog) duplicateLocked(w *streamWriter) bool {
	if !w.named() {
		return false
	}
	if err := l.ownWritersLocked(); err != nil {
		return false
	}
	seq, ok := l.writers.seqs[w.ref]
	return ok && w.seq <= seq
}

// noteWriterLocked records an append of w's id (l.mu held).
func (l *streamLog) noteWriterLocked(w *streamWriter) {
	if !l.writers.live {
		return
	}
	if w.named() {
		noteSeq(l.writers.seqs, w.ref, w.seq)
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

// forgetWritersLocked drops the table (l.mu held): a leader that stops
// leading may hold appends the group never committed.
func (l *streamLog) forgetWritersLocked() {
	l.writers = writerTable{gen: l.writers.gen + 1}
	l.writersLive.Store(false)
}

// writerSeq returns ref's highest publishing id in the log, 0 if none:
// the live table on the owner, what the node's store holds elsewhere.
func (l *streamLog) writerSeq(ref string) (uint64, error) {
	l.preloadWriters()
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

// streamWritersFlag is the cluster feature flag of stream records with
// a named producer or a filter value (cluster/featureflags.StreamWriters).
const streamWritersFlag = "stream_writers"

// ErrStreamWritersDisabled is StreamPublisherSequence's answer while the
// cluster has not enabled the stream_writers feature flag: a node of an
// older release could not read a named producer's records.
var ErrStreamWritersDisabled = errorf(KindPreconditionFailed, "stream deduplication needs the feature flag %s enabled (every node of the cluster upgraded)", streamWritersFlag)

// StreamWritersEnabled reports whether messages may carry a stream
// producer or filter value (SetStreamWriter, SetStreamFilter): always on
// a node alone, in a cluster once stream_writers is enabled.
func (v *VHost) StreamWritersEnabled() bool {
	g, ok := v.b.cluster.(featureGate)
	return !ok || g.FeatureEnabled(streamWritersFlag)
}

// StreamPublisherSequence returns the highest publishing id of the stream
// producer named ref that stream q holds (RabbitMQ's
// QueryPublisherSequence), 0 if none. On a member of a clustered stream
// that does not lead it, what its copy holds (which lags the leader's by
// the time its group takes to apply a commit here); on a node without a
// copy, ErrNoStreamCopy.
func (q *Queue) StreamPublisherSequence(ref string) (uint64, error) {
	if q.st == nil {
		return 0, errorf(KindPreconditionFailed, "queue '%s' in vhost '%s' is not a stream", q.name, q.vh.name)
	}
	if !q.vh.StreamWritersEnabled() {
		return 0, ErrStreamWritersDisabled
	}
	if q.st.readsRemotely() {
		return 0, ErrNoStreamCopy
	}
	return q.st.log.writerSeq(ref)
}

// --- confirming a duplicate ---

// durableWaiter is a duplicate's confirm, called once every offset below
// off is durable.
type durableWaiter struct {
	off  uint64
	done func(error)
}

// afterTailLocked calls done once everything appended so far is durable
// (l.mu held): a duplicate's first copy may still be on its way to the
// disk or the group's majority. The caller runs fireWaiters after it
// unlocks.
func (l *streamLog) afterTailLocked(done func(error)) {
	l.wmu.Lock()
	l.waiters = append(l.waiters, durableWaiter{off: l.next, done: done})
	l.nwaiters.Store(int32(len(l.waiters)))
	l.wmu.Unlock()
}

// fireWaiters calls the waiters whose offsets are durable, or all of them
// with err.
func (l *streamLog) fireWaiters(err error) {
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

// --- across nodes ---

// writerHeader carries a named producer's reference and publishing id
// (and the filter value) on a publish a follower forwards to the stream's
// leader (the inter-node codec has no field for them): a table {"ref":
// string, "seq": int64 (the id's bits), "filter": string}. The leader takes it off a forwarded message (Hops > 0)
// only; a follower takes it off a message of its own clients before it
// forwards one, so no client can name another's producer through it.
const writerHeader = "x-trident-stream-writer"

// forwardable returns m as it goes to the leader: with its producer in
// writerHeader, or without a writerHeader a client set. m itself is not
// changed (other queues may hold it).
func forwardable(m *Message) *Message {
	_, forged := m.Props.Headers[writerHeader]
	if m.writer == nil && (!forged || m.Hops > 0) {
		return m
	}
	c := &Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body, Hops: m.Hops,
		ts: m.ts, expiresAt: m.expiresAt, writer: m.writer}
	h := make(Table, len(m.Props.Headers)+1)
	for k, v := range m.Props.Headers {
		if k != writerHeader {
			h[k] = v
		}
	}
	if w := m.writer; w != nil {
		h[writerHeader] = Table{"ref": w.ref, "seq": int64(w.seq), "filter": w.filter}
	}
	if len(h) == 0 {
		h = nil
	}
	c.Props.Headers = h
	return c
}

// takeForwardedWriter moves writerHeader of a forwarded message (Hops >
// 0) into m.writer, or drops it from a copy forwardable made that came
// back to this node (a proxy's held publishes, handed back when this node
// took the lead: m.writer is set), and reports whether it changed m (the
// caller encodes it again). Such a message is this node's own copy,
// published to this stream alone. A client's own header on a message
// published here stays as the client sent it, meaning nothing.
func takeForwardedWriter(m *Message) bool {
	if len(m.Props.Headers) == 0 {
		return false
	}
	v, ok := m.Props.Headers[writerHeader]
	if !ok || (m.Hops == 0 && m.writer == nil) {
		return false
	}
	h := make(Table, len(m.Props.Headers))
	for k, x := range m.Props.Headers {
		if k != writerHeader {
			h[k] = x
		}
	}
	if len(h) == 0 {
		h = nil
	}
	m.Props.Headers = h
	if m.writer != nil {
		return true
	}
	var t map[string]any
	switch x := v.(type) {
	case headers.Table: // as the inter-node codec decodes it
		t = x
	case map[string]any:
		t = x
	}
	ref, _ := t["ref"].(string)
	seq, _ := t["seq"].(int64)
	filter, _ := t["filter"].(string)
	m.setStream(ref, uint64(seq), filter)
	return true
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
func (l *streamLog) durableWriter(w *streamWriter) *streamWriter {
	if l.repl || !l.writers.live || !w.named() {
		return nil
	}
	return w
}

// noteDurable records a named append that is durable, from its store
// callback, before the durable watermark moves past it.
func (l *streamLog) noteDurable(w *streamWriter) {
	l.dmu.Lock()
	if l.dseqs == nil {
		l.dseqs = map[string]uint64{}
	}
	noteSeq(l.dseqs, w.ref, w.seq)
	l.dmu.Unlock()
}

// snapshotLocked is the snapshot a new segment record carries (l.mu
// held): with the table live, the durable table and the watermark read
// before it (every record below the watermark noted its producer before
// moving it; a record above it in the copy is durable too); otherwise
// the last one, carried on (the records after it are read at the next
// start, as now). nil for a clustered stream.
func (l *streamLog) snapshotLocked() *writerSnapshot {
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
		return encodeRecord(Table{"v": segmentVersion(chunked), "id": id, "first": first})
	}
	ws := make(Table, len(snap.seqs))
	for ref, seq := range snap.seqs {
		ws[ref] = seq
	}
	return encodeRecord(Table{"v": segmentVersion(chunked), "id": id, "first": first, "writers": ws, "wnext": snap.next})
}

// decodeSegmentWriters reads a segment record's snapshot, ok false if it
// has none.
func decodeSegmentWriters(b []byte) (*writerSnapshot, bool) {
	r, err := decodeRecord(b)
	if err != nil {
		return nil, false
	}
	ws, okW := r["writers"].(Table)
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
