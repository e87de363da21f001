package streamlog

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Store is what the log needs of the node's store, and the part of the
// core's store interface (exchange.Store, which embeds it and which
// store.Badger and store.Memory implement) that the two share: metadata
// records for the segment records, message records keyed by (store id,
// offset) for the messages. Metadata writes are synchronous and durable
// when they return; appends are asynchronous and group-committed, done
// called once durable, in the order they were issued.
type Store interface {
	// PutMeta stores a metadata record (vhost, exchange, queue, binding,
	// user, permission, a stream's segment...) under key, durably.
	PutMeta(key string, val []byte) error
	// DeleteMeta removes a metadata record, durably.
	DeleteMeta(key string) error
	// DeleteMetaPrefix removes every metadata record whose key starts with prefix.
	DeleteMetaPrefix(prefix string) error
	// LoadMeta calls fn for each record whose key starts with prefix, in key order.
	LoadMeta(prefix string, fn func(key string, val []byte) error) error

	// AppendMessage stores message seq of queue qid. done may be nil. The
	// store copies data: the caller may reuse it once AppendMessage returns.
	AppendMessage(qid, seq uint64, data []byte, done func(error))
	// ReadMessages calls fn for each stored message of qid whose seq is at
	// least from, in seq order, until fn returns false: the read path of a
	// queue whose backlog is on disk. fn may keep data. It sees every
	// append and delete issued before it, written or still queued.
	ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error
	// MessageKeys is ReadMessages without reading the messages: fn gets
	// each seq and an estimate of its record's size (exact within a few
	// bytes). Recovery counts a backlog with it.
	MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error
	// DropMessages removes every message of qid.
	DropMessages(qid uint64) error
}

// MessageLog is a clustered stream's Raft group's log, through which its
// leader appends (exchange.MessageLog): done once a majority committed.
type MessageLog interface {
	AppendMessage(qid, seq uint64, data []byte, done func(error))
	DeleteMessage(qid, seq uint64)
}

// Flusher is what the log registers with a Batch: Flush writes its
// pending chunk.
type Flusher interface {
	Flush()
}

// Batch is a run of publishes from one front end's read (exchange.Batch):
// the log registers itself (Defer, once per pending chunk and batch) to
// have its pending chunk written when the run ends. Defer returns false
// when the batch is full (the log then writes the chunk at once).
type Batch interface {
	Defer(f Flusher) bool
}

// Config is what a log is made of.
type Config struct {
	Store Store
	// NewID returns a new store id, for a new segment.
	NewID func() uint64
	// Prefix is the segment records' key prefix.
	Prefix string
	// Chunks reports whether new segments hold chunk records (the
	// stream_chunks feature flag); nil: never.
	Chunks func() bool
	// OnDurable is called (from the store's notifier goroutine, holding
	// none of the log's locks) after the durable watermark moved.
	OnDurable func()
	// TimeOf returns the enqueue time (unix ns) a message record holds,
	// ok false if it does not decode (required): the log reads it for its segments' first
	// and last timestamps (recovery, seekTime), never on the append or
	// read path.
	TimeOf func(rec []byte) (int64, bool)
}

// New returns an empty log; Recover loads a standalone stream's from the
// store, EnterReplicated a clustered stream's.
func New(c Config) *Log {
	return &Log{st: c.Store, newID: c.NewID, prefix: c.Prefix, chunks: c.Chunks, onDurable: c.OnDurable, timeOf: c.TimeOf}
}

// Lock takes the log's lock, for the calls named ...Locked.
func (l *Log) Lock() { l.mu.Lock() }

// Unlock releases the log's lock.
func (l *Log) Unlock() { l.mu.Unlock() }

// SegmentsLocked is how many segments the log has (l.mu held).
func (l *Log) SegmentsLocked() int { return len(l.segs) }

// Segments is how many segments the log has.
func (l *Log) Segments() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs)
}

// Durable is the durable watermark: every offset below it that exists is
// durable, and readers read nothing at or above it.
func (l *Log) Durable() uint64 { return l.durable.Load() }

// SetLeaderLocked makes this node the writer of a clustered stream (ml,
// its group's log) or, ml nil, a follower (l.mu held).
func (l *Log) SetLeaderLocked(ml MessageLog) { l.ml = ml }

// timeAt is the enqueue time of message record data, 0 if unknown.
func (l *Log) timeAt(data []byte) int64 {
	ts, _ := l.timeOf(data)
	return ts
}

// Segment is one key range of a stream's log (of a clustered stream's
// one key range, on its leader: replicated.go).
type Segment struct {
	id      uint64 // store id of its messages
	first   uint64 // its first offset
	next    uint64 // one past its last offset (first if empty)
	count   int64
	bytes   int64
	firstTs int64 // unix ns of its first message, 0 while empty
	lastTs  int64
	// chunked: its record is of version 2, its messages are in chunk
	// records (chunk.go).
	chunked bool
}

// Rec is one message read from the log.
type Rec struct {
	Off  uint64
	Data []byte
}

// Log is the log of one stream. Its own lock (mu) comes after the
// stream's (stream.mu) when both are held; reads take neither while they
// Read the store.
type Log struct {
	st     Store
	newID  func() uint64
	prefix string // segment record key prefix

	mu   sync.Mutex
	segs []*Segment // in offset order; the last is the one appended to
	next uint64     // the next offset to assign

	durable atomic.Uint64 // every offset below it that exists is durable
	cache   chunkCache

	// chunks reports whether new segments hold chunk records (the
	// stream_chunks flag; nil: never); pend is the chunk being collected
	// (chunk.go), under mu.
	chunks func() bool
	pend   *pendChunk

	// A clustered stream (replicated.go): one key range (the stream's
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
	timeOf    func([]byte) (int64, bool)

	// writers: the named producers' publishing ids (writers.go),
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

// ErrNotLeader: a clustered stream's member that does not lead was asked
// to append (the publish is nacked; the front end's next one goes to the
// leader).
var ErrNotLeader = errors.New("exchange: this node does not lead the stream")

// AppendLocked appends data (an encoded message, enqueued at ts, of
// named producer w or nil) and calls done once it is durable. It rolls to
// a new segment first when the current one holds segBytes or more, or
// when chunk records are enabled and the current segment holds message
// records. A standalone stream's append into a segment of chunks waits
// in the pending chunk for batch's flush (chunk.go); batch nil: it
// is written at once. Called with l.mu held.
func (l *Log) AppendLocked(data []byte, ts int64, segBytes int64, w *Writer, done func(error)) (uint64, error) {
	return l.AppendBatchLocked(data, ts, segBytes, w, done, nil)
}

// chunksOn reports whether appends go into chunk records: once the current
// segment holds chunks, without asking the feature flag again (a flag is
// never disabled; asking takes the flags' lock, per append).
func (l *Log) chunksOn(cur *Segment) bool {
	if cur != nil && cur.chunked {
		return true
	}
	return l.chunks != nil && l.chunks()
}

// AppendBatchLocked is appendLocked within a run of publishes that batch
// flushes (nil: none).
func (l *Log) AppendBatchLocked(data []byte, ts int64, segBytes int64, w *Writer, done func(error), batch Batch) (uint64, error) {
	cur := l.current()
	if l.repl {
		if l.ml == nil || cur == nil {
			return 0, ErrNotLeader
		}
		if cur.count > 0 && cur.bytes+int64(len(data)) > segBytes {
			// A clustered stream's segments are the leader's cuts of
			// its one key range (replicated.go): no record.
			cur = &Segment{id: cur.id, first: l.next, next: l.next}
			l.segs = append(l.segs, cur)
		}
	} else if chunks := l.chunksOn(cur); cur == nil || (cur.count > 0 && cur.bytes+int64(len(data)) > segBytes) ||
		(chunks && !cur.chunked) {
		l.FlushLocked()
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
	var app interface {
		AppendMessage(qid, seq uint64, data []byte, done func(error))
	} = l.st
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
		l.FireWaiters(err)
		if done != nil {
			done(err)
		}
	})
	return off, nil
}

func (l *Log) current() *Segment {
	if len(l.segs) == 0 {
		return nil
	}
	return l.segs[len(l.segs)-1]
}

// rollLocked starts a new segment at l.next (of chunk records if
// chunked), its record durable first.
func (l *Log) rollLocked(chunked bool) (*Segment, error) {
	s := &Segment{id: l.newID(), first: l.next, next: l.next, chunked: chunked}
	rec := encodeSegmentWriters(s.id, s.first, l.snapshotLocked(), chunked)
	if err := l.st.PutMeta(segKey(l.prefix, s.first), rec); err != nil {
		return nil, fmt.Errorf("stream segment: %w", err)
	}
	l.segs = append(l.segs, s)
	return s, nil
}

// rewriteChunkedLocked makes the empty segment s one of chunk records,
// its record durable first.
func (l *Log) rewriteChunkedLocked(s *Segment) error {
	rec := encodeSegmentWriters(s.id, s.first, l.snapshotLocked(), true)
	if err := l.st.PutMeta(segKey(l.prefix, s.first), rec); err != nil {
		return fmt.Errorf("stream segment: %w", err)
	}
	s.chunked = true
	return nil
}

// Bounds returns the first retained offset and the next offset.
func (l *Log) Bounds() (first, next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return l.next, l.next
	}
	return l.segs[0].first, l.next
}

// Stats returns the retained message count, bytes and segment count, and
// the first and last timestamps (unix ns, 0 if empty).
func (l *Log) Stats() (msgs, bytes int64, segs int, firstTs, lastTs int64) {
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
