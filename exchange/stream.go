package exchange

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// A stream (x-queue-type stream, RabbitMQ 3.9+) is an append-only log:
// publishing appends, consuming reads from an offset without removing
// anything, retention (x-max-age, x-max-length-bytes) removes whole
// segments from the head. Its state lives in *stream, not in the Queue's
// fields: the Queue is only the handle the rest of the core and the front
// ends hold, and hands each call to the stream (q.st != nil) at its top.
//
// Consumers: each has a cursor with its own goroutine that reads ahead a
// bounded window from the log (outside every lock) and delivers it as the
// consumer's credit allows. Credit is the consumer's prefetch: an ack
// gives one back (nothing is removed). Delivery seqs carry the cursor's id
// and the offset (cursorShift), so that two consumers of a channel that
// both hold offset 5 unacked settle their own.
//
// Named consumers (x-stream-consumer-name, our extension; RabbitMQ has
// it only in its stream protocol): the highest offset the latest
// consumer of a name acked is kept in memory and written to the store at most every
// offsetFlushEvery (and when it cancels, and at a clean stop), under
// "streamoff/<vhost>\x00<queue>\x00<name>". A consumer of that name that
// gives no x-stream-offset resumes after it; after a crash it may see
// again what it acked in the last moment before it (at least once). In a
// cluster the record is the metadata group's, held by every node
// (applyStreamOffset), so a consumer of the name resumes after it through
// any member; a write that fails (no metadata leader for a while) is
// tried again at the next flush. Several nodes may write one name's
// record (see streamremote.go), so each record carries its consumer's
// epoch and records are ordered by (epoch, offset), whatever the commit
// order (namedOffset).
//
// Lock order: Queue.mu is not used by a stream. stream.flushMu →
// stream.mu → streamlog.Log.mu (its own order: exchange/streamlog/doc.go).
// A cursor's Sink is called with stream.mu held.

const (
	cursorShift = 40 // Delivery.Seq = cursor id << cursorShift | offset
	offsetMask  = 1<<cursorShift - 1

	readAheadMsgs  = 256     // a cursor's window, in messages
	readAheadBytes = 1 << 20 // and in bytes

	offsetFlushEvery = 200 * time.Millisecond
)

type stream struct {
	q   *Queue
	a   streamArgs
	log *streamlog.Log

	flushMu sync.Mutex // serializes flushOffsets
	mu      sync.Mutex
	cursors map[uint32]*cursor
	cid     uint32
	nwait   atomic.Int32 // cursors waiting (for a durable message, credit...)
	offsets map[string]namedOffset
	dirty   map[string]bool
	clock   uint64 // the highest epoch taken or seen (namedOffset.epoch)
	flushT  *time.Timer
	retainT *time.Timer
	closed  atomic.Bool
	// followStop ends the store watch of a clustered stream's follower.
	followStop chan struct{}
	// durableC wakes wakeLoop: the store's notifier (which calls every
	// queue's callbacks in turn) never waits for stream.mu.
	durableC chan struct{}
	stopC    chan struct{}
	started  atomic.Bool
	// groups are the single-active groups by name (streamsac.go).
	groups map[string]*sacGroup
	// share is what the raw cursors share (streamshare.go).
	share sharing
}

// cursor is one consumer's position and window.
type cursor struct {
	id      uint32
	c       *Consumer
	name    string // x-stream-consumer-name, "" if none
	next    uint64 // the next offset to deliver
	out     int    // delivered, not yet acked
	acked   int64  // the highest offset it acked, -1 none
	epoch   uint64 // a named one's (namedOffset)
	buf     []streamlog.Rec
	bufNext uint64 // where reading goes on after buf
	// arr is buf's array, read into again once buf is empty (its
	// entries are cleared as they are delivered): run's alone.
	arr     []streamlog.Rec
	waiting bool
	stop    bool
	wake    chan struct{}
	// up, if not nil, is the consumer on a member of a clustered stream
	// this node has no copy of (streamremote.go); no goroutine runs.
	up *upstream
	// A single-active member's group and state (streamsac.go), and its
	// own x-stream-offset, where it starts if its group stored none.
	grp  *sacGroup
	sac  sacState
	spec offsetSpec
	// gen changes when the cursor is moved (activated, stepped down): a
	// read made before is dropped.
	gen uint64
	// runs is the consumer's Sink as a RunSink if ConsumeOpts.StoredRuns
	// asked for runs (streamrun.go), else nil.
	runs RunSink
}

func newStream(q *Queue, a streamArgs) *stream {
	b := q.vh.b
	st := &stream{q: q, a: a, cursors: map[uint32]*cursor{}, offsets: map[string]namedOffset{}, dirty: map[string]bool{}}
	st.log = streamlog.New(streamlog.Config{Store: b.store, NewID: b.nextQueueID,
		Prefix: "streamseg/" + q.vh.name + "\x00" + q.name + "\x00",
		Chunks: q.vh.StreamChunksEnabled, OnDurable: st.onDurable, TimeOf: recordTime})
	st.durableC, st.stopC = make(chan struct{}, 1), make(chan struct{})
	// wakeLoop and the retention timer start with the first consumer or
	// append (started): a Queue built from a record and dropped at once
	// (a record of a queue the node holds already) leaves nothing running.
	return st
}

func (st *stream) offsetPrefix() string {
	return "streamoff/" + st.q.vh.name + "\x00" + st.q.name + "\x00"
}

// recover loads the log and the named offsets.
func (st *stream) recover() (uint64, error) {
	maxID, err := st.log.Recover()
	if err != nil {
		return 0, err
	}
	if st.log.Segments() > 0 {
		st.start()
	}
	pfx := st.offsetPrefix()
	err = st.q.vh.b.store.LoadMeta(pfx, func(key string, val []byte) error {
		r, err := decodeRecord(val)
		if err != nil {
			return err
		}
		if off, ok := r["offset"].(uint64); ok {
			epoch, _ := r["epoch"].(uint64)
			st.offsets[key[len(pfx):]] = namedOffset{off: off, epoch: epoch}
			st.clock = max(st.clock, epoch)
		}
		return nil
	})
	return maxID, err
}

// enqueue appends a routed message (data is its encoded record).
func (st *stream) enqueue(m *Message, data []byte, done func(error), now int64, batch *Batch) (accepted, stored, refused bool) {
	q := st.q
	if st.closed.Load() {
		return false, false, false
	}
	if st.log.Following() {
		return st.forward(forwardable(m), done)
	}
	if takeForwardedWriter(m) {
		data = nil // encoded again, with its producer in the record
	}
	if data == nil {
		data = encodeMessage(m, now, nil)
	}
	if m.writer.Named() {
		st.log.PreloadWriters() // once after a start, with no lock held
	}
	st.log.Lock()
	segs := st.log.SegmentsLocked()
	dup, err := st.appendLocked(data, m.writer, done, now, batch)
	rolled := st.log.SegmentsLocked() != segs
	st.log.Unlock()
	if dup {
		st.log.FireWaiters(nil)
		return true, done != nil, false
	}
	if err != nil {
		q.vh.b.log.Error("stream append failed", "queue", q.name, "err", err)
		return false, false, true
	}
	q.counters.publish.Add(1)
	st.appended(rolled, segs)
	return true, true, false
}

// appendLocked appends the record of one routed message (st.log
// locked; enqueue's and PublishRun's one path): a named producer's resend
// (streamlog/writers.go) is not appended but answered, through done, once
// its first copy is surely durable; dup reports it, and the caller then
// fires the log's waiters once unlocked.
func (st *stream) appendLocked(data []byte, w *streamlog.Writer, done func(error), now int64, batch *Batch) (dup bool, err error) {
	if w != nil && st.log.DuplicateLocked(w) {
		if done != nil {
			st.log.FlushLocked() // the tail it waits for is written
			st.log.AfterTailLocked(done)
		}
		return true, nil
	}
	if _, err = st.log.AppendBatchLocked(data, now, st.a.segBytes, w, done, logBatchOf(batch)); err == nil {
		st.log.NoteWriterLocked(w)
	}
	return false, err
}

// appended follows appends made under one lock of the log: the stream's
// loops run, and a roll past the first segment (segs, before the appends)
// lets retention look.
func (st *stream) appended(rolled bool, segs int) {
	st.start()
	if rolled && segs > 0 {
		go st.applyRetention()
	}
}

// recordTime is the enqueue time a stream's message record holds (the
// log's TimeOf).
func recordTime(data []byte) (int64, bool) {
	if _, _, ts, _, ok := amqp10Record(data); ok {
		return ts, true
	}
	_, ts, err := decodeMessage(data)
	return ts, err == nil
}

// start runs the stream's wake loop and retention timer, once.
func (st *stream) start() {
	if st.started.Load() || !st.started.CompareAndSwap(false, true) {
		return
	}
	go st.wakeLoop()
	st.armRetention()
}

// onDurable wakes cursors waiting at the end of the log.
func (st *stream) onDurable() {
	if st.nwait.Load() == 0 {
		return
	}
	select {
	case st.durableC <- struct{}{}:
	default: // a wake is pending already
	}
}

// wakeLoop signals the cursors waiting for durable messages.
func (st *stream) wakeLoop() {
	for {
		select {
		case <-st.stopC:
			return
		case <-st.durableC:
		}
		st.wakeWaiting()
	}
}

func (st *stream) wakeWaiting() {
	st.mu.Lock()
	for _, c := range st.cursors {
		if c.waiting {
			c.signal()
		}
	}
	st.mu.Unlock()
}

func (c *cursor) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// logBatchOf is b as the log's streamlog.Batch (the log registers with it
// once per pending chunk, not per message), nil for none: a nil *Batch
// would be a non-nil interface.
func logBatchOf(b *Batch) streamlog.Batch {
	if b == nil {
		return nil
	}
	return b
}
