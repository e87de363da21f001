package exchange

import (
	"time"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// A stream's consumer that only re-encodes what it reads into its own
// protocol (the stream protocol: ConsumeOpts.StoredRuns) takes what the
// cursor read from this node's log as it is: runs of stored records, each
// handed over in one call (RunSink.DeliverRun) and settled in one
// (Queue.SettleRun), rather than a Delivery per message. The core neither
// decodes nor checks the records: the front end reads each in place
// (ViewStoredMessage, which refuses what decodeMessage refuses; a record it
// refuses it decodes with DecodeStoredMessage or, corrupt, skips and
// reports with Queue.NoteUnreadable). The protocol's unit of delivery is a
// chunk of messages, and so is the core's here: per message, nothing is
// called, locked or counted.
//
// While two or more such consumers read this node's log, a run without a
// gap comes with what they share of it (RecordRun.Shared), found by its
// first offset and length: the first front end to encode the run caches
// its encoding there and the others write those bytes, so that ten
// subscribers reading from the first offset encode each message once.
// Readers that read from the same offset cut the same runs (the cursor's
// read-ahead: readAheadMsgs records from where it is, within
// readAheadBytes), unless their prefetch cuts them shorter.

// runRecs is the usual length of a run: a reader of runs' read-ahead
// (within readAheadBytes and its prefetch). A run is a chunk on the wire
// and the unit the cursor and the front end hand over: with runs of 256,
// a lone reader's writer wrote each chunk alone (one system call per 256
// messages, ~70 ns a message of 16 bytes).
const runRecs = 1024

// RunSink is the Sink of a consumer that asked for stored runs
// (ConsumeOpts.StoredRuns): the stream's cursor hands it runs; the
// deliveries of a clustered stream read from another member still come
// one by one to Deliver, as Messages.
type RunSink interface {
	Sink
	// DeliverRun hands the consumer a run of records, as Deliver does a
	// message (false: pause until Consumer.Resume).
	DeliverRun(r RecordRun) bool
}

// RecordRun is a run of a stream's stored records handed to a RunSink.
type RecordRun struct {
	Queue    *Queue
	Consumer *Consumer
	// Recs are the records in offset order (a gap in the offsets is a
	// crash's or retention's: the log goes on past it). The slice is the
	// sink's; the records' bytes are immutable and may be kept.
	Recs []streamlog.Rec
	// Seq is the handle of the last record, for SettleRun.
	Seq uint64
	// Shared, if not nil, is what the stream's readers of runs share of
	// this one (Recs then has no gap).
	Shared *SharedRun
}

// SharedRun is what the readers of a stream's runs share of one stretch:
// the first front end to encode it caches its encoding (AddEncoding) and
// the others write those bytes.
type SharedRun struct{ enc encodings }

// Encoding returns the bytes cached for k, or nil (safe for concurrent
// use, as Message.Encoding).
func (r *SharedRun) Encoding(k *EncodingKey) []byte { return r.enc.get(k) }

// AddEncoding caches e, or returns the bytes of the one another writer
// cached first (as Message.AddEncoding).
func (r *SharedRun) AddEncoding(e *Encoding) []byte { return r.enc.add(e) }

// SettleRun acknowledges n deliveries of a stream's consumer ending with
// the one whose handle is seq: a run's (RecordRun.Seq, len(Recs)), or the
// part of one a front end has written. A named consumer's offset moves to
// seq's.
func (q *Queue) SettleRun(seq uint64, n int) {
	if q.st == nil || n <= 0 {
		return
	}
	q.st.settleRun(seq, n)
}

// NoteUnreadable counts n of the stream's stored records a front end could
// not read (RecordRun: it logged and skipped them), as the core counts
// those it cannot (Broker.UnreadableMessages).
func (q *Queue) NoteUnreadable(n int) { q.vh.b.noteUnreadable(q, n) }

// full reports whether cur may deliver nothing more now: its consumer has
// prefetch deliveries out, or (a reader of runs) its read-ahead does not
// fit in what is left. A reader of runs hands over each read-ahead whole
// (cut only if it alone is over the prefetch), so that readers reading
// the same stretch cut the same runs, which is what they share
// (streamshare.go's run): cut where each one's credit ran out, ten
// readers would share almost nothing.
func (cur *cursor) full() bool {
	return cur.out >= cur.c.prefetch ||
		(cur.runs != nil && cur.out > 0 && cur.out+len(cur.buf) > cur.c.prefetch)
}

// deliverRunLocked hands cur's read-ahead to its RunSink as one run (or
// what the consumer's prefetch allows of it). st.mu held, !cur.full().
func (st *stream) deliverRunLocked(cur *cursor, rs RunSink) {
	n := min(len(cur.buf), cur.c.prefetch-cur.out)
	recs := make([]streamlog.Rec, n)
	copy(recs, cur.buf)
	clear(cur.buf[:n])
	cur.buf = cur.buf[n:]
	if len(cur.buf) == 0 {
		cur.buf = nil
	}
	last := recs[n-1].Off
	cur.next = last + 1
	cur.out += n
	var sr *SharedRun
	if st.share.raw >= 2 && last == recs[0].Off+uint64(n)-1 {
		sr = st.share.run(recs)
	}
	st.q.countDeliver(false, false, uint32(n))
	if !rs.DeliverRun(RecordRun{Queue: st.q, Consumer: cur.c, Recs: recs, Seq: uint64(cur.id)<<cursorShift | last, Shared: sr}) {
		cur.c.blocked = true
	}
}

// settleRun is SettleRun (a cursor on this node's log: runs never come
// from another member).
func (st *stream) settleRun(seq uint64, n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	cur := st.cursors[uint32(seq>>cursorShift)]
	if cur == nil {
		return
	}
	cur.out = max(cur.out-n, 0)
	st.q.counters.ack.Add(uint64(n))
	st.q.vh.counters.ack.Add(uint64(n))
	if st.ackedLocked(cur, int64(seq&offsetMask)) && st.flushT == nil {
		st.flushT = time.AfterFunc(offsetFlushEvery, st.flushOffsets)
	}
	if cur.waiting {
		cur.signal()
	}
}

// SeqOf is the handle of r.Recs[i] (SettleRun of a run's first i+1
// records).
func (r RecordRun) SeqOf(i int) uint64 { return r.Seq&^offsetMask | r.Recs[i].Off }
