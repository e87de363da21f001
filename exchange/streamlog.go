package exchange

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
)

// The stream log: an append-only, segmented log of a stream's messages.
//
// Why Badger and not segment files: the node's message store already gives
// what a log needs and what is hard to get right twice: group commit (one
// write batch and one fsync for the appends of many publishers, with a
// done callback per record once it is durable), ordered range reads that
// bound memory (an iterator with a small prefetch), and crash recovery
// (Badger's own WAL: after kill -9 every record whose done callback ran is
// there, in order). A segment is one key range of the store: it has its
// own store id, its records are keyed by offset under it (a segment of
// version 2 holds chunk records, each the messages of one publish run
// keyed by the first one's offset: streamchunk.go; one of version 1 a
// record per message), so retention deletes a whole segment with one
// DropMessages and never touches a single record. Disk, memory and the
// fsync budget are shared with the queues of the node rather than
// competing with them.
//
// Segment records ("streamseg/<vhost>\x00<queue>\x00<first offset, 20
// digits>") name each segment's store id and first offset; one is written
// (durably, PutMeta) before the first message of its segment is appended,
// so every confirmed message is in a segment the next start finds. A start
// scans the keys of each segment (not the values) for its count, bytes and
// last offset (in a segment of chunks, a record counts the offsets up to
// the next key, the last one what it holds), and reads its first and last
// message for their timestamps.
//
// Offsets are dense from 0 (RabbitMQ's too), except that a crash may leave
// a gap where appends that were never confirmed were lost: a reader skips
// it. Readers see only durable messages (up to the durable watermark): a
// consumer never gets a message that a crash could take back.

// segment is one key range of a stream's log (of a clustered stream's
// one key range, on its leader: streamcluster.go).
type segment struct {
	id      uint64 // store id of its messages
	first   uint64 // its first offset
	next    uint64 // one past its last offset (first if empty)
	count   int64
	bytes   int64
	firstTs int64 // unix ns of its first message, 0 while empty
	lastTs  int64
	// chunked: its record is of version 2, its messages are in chunk
	// records (streamchunk.go).
	chunked bool
}

// streamRec is one message read from the log.
type streamRec struct {
	off  uint64
	data []byte
}

// streamLog is the log of one stream. Its own lock (mu) comes after the
// stream's (stream.mu) when both are held; reads take neither while they
// read the store.
type streamLog struct {
	st     Store
	newID  func() uint64
	prefix string // segment record key prefix

	mu   sync.Mutex
	segs []*segment // in offset order; the last is the one appended to
	next uint64     // the next offset to assign

	durable atomic.Uint64 // every offset below it that exists is durable
	cache   chunkCache

	// chunks reports whether new segments hold chunk records (the
	// stream_chunks flag; nil: never); pend is the chunk being collected
	// (streamchunk.go), under mu.
	chunks func() bool
	pend   *pendChunk

	// A clustered stream (streamcluster.go): one key range (the stream's
	// id; the leader cuts it into segments that share that id, with no
	// records), appended to through ml (the Raft group's log) on the
	// leader, nil elsewhere.
	repl bool
	ml   MessageLog
	// fmu serialises the rebuilds of a clustered stream's index from the
	// store (enterReplicated) with a follower's refreshes (followStore),
	// so that neither installs what it read over what the other read
	// later. Taken before mu, never while holding it.
	fmu sync.Mutex
	// onDurable is called (from the store's notifier goroutine) after the
	// durable watermark moved.
	onDurable func()

	// writers: the named producers' publishing ids (streamdedup.go),
	// under mu. waiters: duplicates' confirms waiting for the durable
	// watermark, under wmu (taken after mu, or alone).
	writers     writerTable
	writersLive atomic.Bool // writers.live, read without mu
	loadMu      sync.Mutex  // one preloadWriters at a time
	wmu         sync.Mutex
	waiters     []durableWaiter
	nwaiters    atomic.Int32
	// A standalone stream's producers as durable (dseqs, under dmu, kept
	// once writers is live) and the snapshot its last segment record
	// holds (snap, under mu): see snapshotLocked.
	dmu   sync.Mutex
	dseqs map[string]uint64
	snap  *writerSnapshot
}

func segKey(prefix string, first uint64) string { return fmt.Sprintf("%s%020d", prefix, first) }

// errNotLeader: a clustered stream's member that does not lead was asked
// to append (the publish is nacked; the front end's next one goes to the
// leader).
var errNotLeader = errors.New("exchange: this node does not lead the stream")

// errBadSegment is a segment record that does not decode.
var errBadSegment = errors.New("exchange: bad stream segment record")

// encodeSegment and decodeSegment are a segment record: a versioned
// table {"v": 1, "id": store id, "first": first offset}; version 2 is a
// segment of chunk records (streamchunk.go), which an older build refuses
// rather than misreading. A record of another version, or without its
// fields, stops the start (errBadSegment) rather than losing the segment.
func encodeSegment(id, first uint64) []byte {
	return encodeRecord(Table{"v": uint64(1), "id": id, "first": first})
}

// segmentVersion is the version a segment record is written with.
func segmentVersion(chunked bool) uint64 {
	if chunked {
		return 2
	}
	return 1
}

// segmentChunked reports whether a segment record (that decodes) is of
// version 2.
func segmentChunked(b []byte) bool {
	r, err := decodeRecord(b)
	if err != nil {
		return false
	}
	v, _ := r["v"].(uint64)
	return v == 2
}

func decodeSegment(b []byte) (id, first uint64, err error) {
	r, err := decodeRecord(b)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", errBadSegment, err)
	}
	v, okV := r["v"].(uint64)
	id, okID := r["id"].(uint64)
	first, okF := r["first"].(uint64)
	if !okV || (v != 1 && v != 2) || !okID || !okF {
		return 0, 0, errBadSegment
	}
	return id, first, nil
}

// appendLocked appends data (an encoded message, enqueued at ts, of
// named producer w or nil) and calls done once it is durable. It rolls to
// a new segment first when the current one holds segBytes or more, or
// when chunk records are enabled and the current segment holds message
// records. A standalone stream's append into a segment of chunks waits
// in the pending chunk for batch's flush (streamchunk.go); batch nil: it
// is written at once. Called with l.mu held.
func (l *streamLog) appendLocked(data []byte, ts int64, segBytes int64, w *streamWriter, done func(error)) (uint64, error) {
	return l.appendBatchLocked(data, ts, segBytes, w, done, nil)
}

// chunksOn reports whether appends go into chunk records: once the current
// segment holds chunks, without asking the feature flag again (a flag is
// never disabled; asking takes the flags' lock, per append).
func (l *streamLog) chunksOn(cur *segment) bool {
	if cur != nil && cur.chunked {
		return true
	}
	return l.chunks != nil && l.chunks()
}

// appendBatchLocked is appendLocked within a run of publishes that batch
// flushes (nil: none).
func (l *streamLog) appendBatchLocked(data []byte, ts int64, segBytes int64, w *streamWriter, done func(error), batch *Batch) (uint64, error) {
	cur := l.current()
	if l.repl {
		if l.ml == nil || cur == nil {
			return 0, errNotLeader
		}
		if cur.count > 0 && cur.bytes+int64(len(data)) > segBytes {
			// A clustered stream's segments are the leader's cuts of
			// its one key range (streamcluster.go): no record.
			cur = &segment{id: cur.id, first: l.next, next: l.next}
			l.segs = append(l.segs, cur)
		}
	} else if chunks := l.chunksOn(cur); cur == nil || (cur.count > 0 && cur.bytes+int64(len(data)) > segBytes) ||
		(chunks && !cur.chunked) {
		l.flushLocked()
		var err error
		if cur != nil && cur.count == 0 && chunks {
			err = l.rewriteChunkedLocked(cur)
		} else {
			cur, err = l.rollLocked(chunks)
		}
		if err != nil {
			return 0, err
		}
	}
	off := l.next
	l.next++
	cur.next = l.next
	cur.count++
	cur.bytes += int64(len(data))
	if cur.firstTs == 0 {
		cur.firstTs = ts
	}
	cur.lastTs = max(cur.lastTs, ts)
	dw := l.durableWriter(w)
	if cur.chunked && !l.repl {
		l.appendChunkLocked(cur, off, data, dw, done, batch)
		return off, nil
	}
	var app MessageLog = l.st
	if l.repl {
		app = l.ml
	}
	app.AppendMessage(cur.id, off, data, func(err error) {
		if err == nil {
			if dw != nil {
				l.noteDurable(dw) // before the watermark passes it (snapshotLocked)
			}
			// The store calls back in issue order (the group commit's
			// notifier): off+1 is a watermark. Raised monotonically, so
			// that a store whose callbacks race cannot lower it.
			for {
				cur := l.durable.Load()
				if cur > off || l.durable.CompareAndSwap(cur, off+1) {
					break
				}
			}
			if l.onDurable != nil {
				l.onDurable()
			}
		}
		l.fireWaiters(err)
		if done != nil {
			done(err)
		}
	})
	return off, nil
}

func (l *streamLog) current() *segment {
	if len(l.segs) == 0 {
		return nil
	}
	return l.segs[len(l.segs)-1]
}

// rollLocked starts a new segment at l.next (of chunk records if
// chunked), its record durable first.
func (l *streamLog) rollLocked(chunked bool) (*segment, error) {
	s := &segment{id: l.newID(), first: l.next, next: l.next, chunked: chunked}
	rec := encodeSegmentWriters(s.id, s.first, l.snapshotLocked(), chunked)
	if err := l.st.PutMeta(segKey(l.prefix, s.first), rec); err != nil {
		return nil, fmt.Errorf("stream segment: %w", err)
	}
	l.segs = append(l.segs, s)
	return s, nil
}

// rewriteChunkedLocked makes the empty segment s one of chunk records,
// its record durable first.
func (l *streamLog) rewriteChunkedLocked(s *segment) error {
	rec := encodeSegmentWriters(s.id, s.first, l.snapshotLocked(), true)
	if err := l.st.PutMeta(segKey(l.prefix, s.first), rec); err != nil {
		return fmt.Errorf("stream segment: %w", err)
	}
	s.chunked = true
	return nil
}

// bounds returns the first retained offset and the next offset.
func (l *streamLog) bounds() (first, next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return l.next, l.next
	}
	return l.segs[0].first, l.next
}

// stats returns the retained message count, bytes and segment count, and
// the first and last timestamps (unix ns, 0 if empty).
func (l *streamLog) stats() (msgs, bytes int64, segs int, firstTs, lastTs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		msgs += s.count
		bytes += s.bytes
		if firstTs == 0 {
			firstTs = s.firstTs
		}
		lastTs = max(lastTs, s.lastTs)
	}
	return msgs, bytes, len(l.segs), firstTs, lastTs
}

// Reads go through a small cache of chunks (chunkRecs consecutive offsets,
// complete and durable ones only), shared by the stream's readers: ten
// consumers reading the same stretch of a stream read the store once.
const (
	chunkRecs     = 256
	chunkCacheMax = 32 << 20 // bytes of records cached per stream
)

type chunk struct {
	recs []streamRec
	end  uint64 // the offset after the chunk (where reading goes on)
	size int
}

type chunkCache struct {
	mu    sync.Mutex
	m     map[uint64]*chunk
	fifo  []uint64
	bytes int
}

func (c *chunkCache) get(i uint64) *chunk {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[i]
}

func (c *chunkCache) put(i uint64, ch *chunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[uint64]*chunk{}
	}
	if _, ok := c.m[i]; ok {
		return
	}
	c.m[i] = ch
	c.fifo = append(c.fifo, i)
	c.bytes += ch.size
	for c.bytes > chunkCacheMax && len(c.fifo) > 1 {
		old := c.fifo[0]
		c.fifo = c.fifo[1:]
		if o := c.m[old]; o != nil {
			c.bytes -= o.size
			delete(c.m, old)
		}
	}
}

// drop forgets every chunk below offset off (retention removed them).
func (c *chunkCache) drop(off uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ch := range c.m {
		if ch.end <= off {
			c.bytes -= ch.size
			delete(c.m, i)
		}
	}
	kept := c.fifo[:0]
	for _, i := range c.fifo {
		if c.m[i] != nil {
			kept = append(kept, i)
		}
	}
	c.fifo = kept
}

// read returns up to n durable messages from offset from on (at most
// maxBytes of them, but at least one), and the offset to read next: past
// a gap or a removed segment it is where the log goes on.
func (l *streamLog) read(from uint64, n int, maxBytes int) ([]streamRec, uint64, error) {
	var out []streamRec
	size := 0
	next := from
	limit := l.durable.Load()
	for len(out) < n && size < maxBytes && next < limit {
		ci := next / chunkRecs
		ch := l.cache.get(ci)
		if ch == nil {
			lo, hi := ci*chunkRecs, (ci+1)*chunkRecs
			if hi > limit {
				// The chunk at the end is not complete yet: read what
				// is asked, uncached.
				recs, nx, err := l.readRange(next, min(n-len(out), int(limit-next)), maxBytes-size)
				return append(out, recs...), nx, err
			}
			recs, nx, err := l.readRange(lo, chunkRecs, 1<<62)
			if err != nil {
				return out, next, err
			}
			ch = &chunk{recs: recs, end: max(nx, lo)}
			for _, r := range recs {
				ch.size += len(r.data) + 32
			}
			if nx >= hi {
				l.cache.put(ci, ch)
			}
		}
		if ch.end <= next {
			// Nothing there (a removed segment): go on where the log does.
			recs, nx, err := l.readRange(next, n-len(out), maxBytes-size)
			return append(out, recs...), nx, err
		}
		for _, r := range ch.recs {
			if r.off < next {
				continue
			}
			if len(out) >= n || size >= maxBytes {
				return out, r.off, nil
			}
			out = append(out, r)
			size += len(r.data)
		}
		next = ch.end
	}
	return out, next, nil
}

// readRange reads from the store, uncached.
func (l *streamLog) readRange(from uint64, n int, maxBytes int) ([]streamRec, uint64, error) {
	limit := l.durable.Load()
	l.mu.Lock()
	if len(l.segs) > 0 && from < l.segs[0].first {
		from = l.segs[0].first // removed by retention
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].next > from })
	var plan []segment
	for ; i < len(l.segs) && len(plan) < 64; i++ {
		plan = append(plan, *l.segs[i])
	}
	l.mu.Unlock()
	var out []streamRec
	size := 0
	next := from
	for _, s := range plan {
		if next >= limit || len(out) >= n || (size >= maxBytes && len(out) > 0) {
			break
		}
		if next < s.first {
			next = s.first
		}
		err := l.scanSeg(s, next, func(seq uint64, data []byte) bool {
			if seq >= limit || seq >= s.next {
				return false
			}
			out = append(out, streamRec{off: seq, data: data})
			size += len(data)
			next = seq + 1
			return len(out) < n && size < maxBytes
		})
		if err != nil {
			return out, next, err
		}
		if len(out) < n && size < maxBytes && next < s.next && next < limit {
			next = min(s.next, limit) // a gap a crash left at the segment's end
		}
	}
	return out, next, nil
}

// readOne returns the message at offset off (or the next one that exists
// in its segment).
func (l *streamLog) readOne(s segment, off uint64) (streamRec, bool) {
	var r streamRec
	ok := false
	_ = l.scanSeg(s, off, func(seq uint64, data []byte) bool {
		r, ok = streamRec{off: seq, data: data}, true
		return false
	})
	return r, ok
}

// seekTime returns the offset of the first message enqueued at or after
// t (unix ns), or the next offset if there is none. Within a segment it
// searches by reading messages (timestamps rise with offsets).
func (l *streamLog) seekTime(t int64) uint64 {
	l.mu.Lock()
	var seg segment
	found := false
	for _, s := range l.segs {
		if s.count > 0 && s.lastTs >= t {
			seg, found = *s, true
			break
		}
	}
	next := l.next
	l.mu.Unlock()
	if !found {
		return next
	}
	if seg.firstTs >= t {
		return seg.first
	}
	// Offsets within a segment are dense: find the first whose message
	// is at or after t. Messages (not the segment's records) may come
	// out of order by a little under concurrent publishers; any boundary
	// found is then within that jitter of t.
	lo, hi := seg.first, seg.next // the answer is in (lo, hi]
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		r, ok := l.readOne(seg, mid)
		if !ok {
			hi = mid
			continue
		}
		if _, ts, err := decodeMessage(r.data); err == nil && ts >= t {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// lastOffset is the offset of the last message, ok false if the log is empty.
func (l *streamLog) lastOffset() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.segs) - 1; i >= 0; i-- {
		if l.segs[i].count > 0 {
			return l.segs[i].next - 1, true
		}
	}
	return 0, false
}

// retain removes whole segments from the head, never the one appended to,
// while the log holds more than maxBytes (0: no limit) or a segment's last
// message is older than cutoff (unix ns, 0: no age limit). It returns the
// removed segments; the caller drops their messages (dropSegments), after
// which their records are gone too.
func (l *streamLog) retain(maxBytes int64, cutoff int64) []segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.repl {
		return nil // the leader's, through the group (retainReplicated)
	}
	var total int64
	for _, s := range l.segs {
		total += s.bytes
	}
	var gone []segment
	for len(l.segs) > 1 {
		s := l.segs[0]
		if !((maxBytes > 0 && total > maxBytes) || (cutoff > 0 && s.lastTs < cutoff)) {
			break
		}
		total -= s.bytes
		gone = append(gone, *s)
		l.segs = l.segs[1:]
	}
	if len(gone) > 0 {
		l.cache.drop(l.segs[0].first)
	}
	return gone
}

// dropSegments deletes removed segments: the record first, so that a
// crash in between leaves at worst messages no segment names (never a
// segment without its messages that a start would count).
func (l *streamLog) dropSegments(gone []segment) error {
	for _, s := range gone {
		if err := l.st.DeleteMeta(segKey(l.prefix, s.first)); err != nil {
			return err
		}
		if err := l.st.DropMessages(s.id); err != nil {
			return err
		}
	}
	return nil
}

// dropAll deletes the whole log (the stream was deleted).
func (l *streamLog) dropAll() error {
	l.mu.Lock()
	segs := make([]segment, len(l.segs))
	for i, s := range l.segs {
		segs[i] = *s
	}
	l.segs = nil
	dones := l.discardPendLocked()
	l.mu.Unlock()
	for _, done := range dones {
		done(errStreamClosed)
	}
	if err := l.dropSegments(segs); err != nil {
		return err
	}
	return l.st.DeleteMetaPrefix(l.prefix)
}

// countSegment sets s's count, bytes and next from its keys: a message
// record counts one; in a segment of chunks, a record counts the offsets
// up to the next record's key, and the last one what its record holds.
func (l *streamLog) countSegment(s *segment) error {
	var last uint64
	any := false
	if err := l.st.MessageKeys(s.id, 0, func(seq uint64, size int64) bool {
		if s.chunked && any {
			s.count += int64(seq - last)
		} else if !s.chunked {
			s.count++
		}
		any, last = true, seq
		s.bytes += size
		s.next = seq + 1
		return true
	}); err != nil {
		return err
	}
	if !s.chunked || !any {
		return nil
	}
	n := uint64(1)
	if err := l.st.ReadMessages(s.id, last, func(seq uint64, data []byte) bool {
		if seq == last {
			n = chunkCount(data)
		}
		return false
	}); err != nil {
		return err
	}
	s.count += int64(n)
	s.next = last + n
	return nil
}

// recover loads the segments from the store: records, then each
// segment's keys and its first and last message. It returns the largest
// store id in use.
func (l *streamLog) recover() (maxID uint64, err error) {
	err = l.st.LoadMeta(l.prefix, func(key string, val []byte) error {
		id, first, err := decodeSegment(val)
		if err != nil {
			return fmt.Errorf("stream segment %q: %w", key, err)
		}
		l.segs = append(l.segs, &segment{id: id, first: first, next: first, chunked: segmentChunked(val)})
		maxID = max(maxID, id)
		if snap, ok := decodeSegmentWriters(val); ok {
			l.snap = snap // the last segment's is the newest
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, s := range l.segs {
		if err := l.countSegment(s); err != nil {
			return 0, err
		}
		if s.count == 0 {
			continue
		}
		if r, ok := l.readOne(*s, s.first); ok {
			_, s.firstTs, _ = decodeMessage(r.data)
		}
		if r, ok := l.readOne(*s, s.next-1); ok {
			_, s.lastTs, _ = decodeMessage(r.data)
		}
	}
	for i, s := range l.segs {
		if i+1 < len(l.segs) && s.next > l.segs[i+1].first {
			return 0, fmt.Errorf("stream segments overlap at offset %d", l.segs[i+1].first)
		}
		l.next = max(l.next, s.next)
	}
	l.durable.Store(l.next)
	if l.snap != nil {
		l.writers.seqs = maps.Clone(l.snap.seqs)
		l.writers.next = l.snap.next
	}
	return maxID, nil
}
