package quorum

import "sync/atomic"

// Write-behind: an FSM with it on (EnableWriteBehind) does not write each
// applied append to its Store at once but keeps it in a small buffer, in
// the order applied; a delete of a buffered message drops it there, and
// neither the put nor the delete ever reaches the Store. A quorum queue
// whose consumers keep up acks most messages within milliseconds, so most
// of its messages never touch the node's message store: each member writes
// a message once, to its Raft log, instead of three times (log, put,
// delete).
//
// A state record does not flush the buffer: it holds, beside the counts
// as of the last entry applied, the last entry before the oldest buffered
// append (state.stored), up to which the Store has every op. A crash loses
// only buffered copies: the Raft log holds every entry after the last
// snapshot, and at start the FSM applies the ops of those past stored to
// the Store again (written through: see WriteBehindAfter) and counts only
// those past applied. So that a backlog under a steady stream of applies
// does not keep that span growing, a record first writes out the appends
// buffered for behindAge. (Until 2026-12 every record flushed the whole
// buffer: a queue whose backlog took longer than a record's interval to
// drain had every message written to the Store and deleted again, which
// cost a 3-node cluster 40% of its throughput.)
//
// The buffer is also written out, oldest first, while it holds more than
// behindMsgs messages or behindBytes bytes, or while all FSMs' buffers
// together pass behindBudget; whole before a snapshot (Raft then drops the
// entries before it), before anything reads the Store for the FSM's
// messages (a snapshot sent to a member, the queue's takeover, Messages),
// saveEveryBehind after the last apply of a queue that went quiet (a timer:
// an idle backlog must not stay in memory and unpageable), and when the
// member stops (Close).
//
// What the buffer holds is not yet in the Store, so the leader's queue may
// not page those messages out (it would read them back from the Store):
// the FSM reports through OnStored the key of the last append issued, and
// the queue pages only up to it (exchange.Queue.LogStored).

// The buffer's limits count each message's data and behindOverhead for
// its slot and map entry: memory, not payload. A queue whose backlog
// outgrows them has its oldest buffered messages written out. They are
// sized so that a backlog of ~100,000 small messages (a benchmark's
// publishers 100,000 ahead of its consumers) stays out of the Store, while
// behindBudget bounds what all the node's queues buffer together.
const (
	behindMsgs     = 1 << 18
	behindBytes    = 32 << 20
	behindBudget   = 64 << 20
	behindOverhead = 96
)

// behindTotal is the bytes buffered by every FSM of the process.
var behindTotal atomic.Int64

// behindEntry is one buffered append, of the entry at index idx; data
// nil once deleted.
type behindEntry struct {
	key  uint64
	idx  uint64
	data []byte
}

// behind is an FSM's buffer. Not safe for concurrent use: the FSM holds
// its lock.
type behind struct {
	q     []behindEntry // applied order; deleted ones have data nil
	head  int
	live  map[uint64]int // key → index in q of a live entry
	bytes int64
	// done is the key of the newest append such that it and every
	// append applied before it are in the Store or deleted: the
	// watermark reported through OnStored.
	done uint64
}

func (b *behind) len() int { return len(b.live) }

// add buffers an append of key by the entry at index idx (data is copied).
func (b *behind) add(key, idx uint64, data []byte) {
	if b.live == nil {
		b.live = make(map[uint64]int)
	}
	if i, ok := b.live[key]; ok {
		// Applied again (a replay): the later data wins, in place; the
		// first index stays (oldest is then early, never late).
		b.account(int64(len(data)) - int64(len(b.q[i].data)))
		b.q[i].data = append(b.q[i].data[:0], data...)
		return
	}
	b.live[key] = len(b.q)
	b.q = append(b.q, behindEntry{key: key, idx: idx, data: append([]byte(nil), data...)})
	b.account(int64(len(data)) + behindOverhead)
}

// del drops key if it is buffered and reports whether it was.
func (b *behind) del(key uint64) bool {
	i, ok := b.live[key]
	if !ok {
		return false
	}
	delete(b.live, key)
	b.account(-int64(len(b.q[i].data)) - behindOverhead)
	b.q[i].data = nil
	b.compact()
	return true
}

// delRange drops the buffered keys in [from, to).
func (b *behind) delRange(from, to uint64) {
	for k := range b.live {
		if k >= from && k < to {
			b.del(k)
		}
	}
}

func (b *behind) account(d int64) {
	b.bytes += d
	behindTotal.Add(d)
}

// over reports that the buffer must shrink.
func (b *behind) over() bool {
	return len(b.live) > behindMsgs || b.bytes > behindBytes || (len(b.live) > 0 && behindTotal.Load() > behindBudget)
}

// oldest is the index of the entry of the oldest buffered append, if
// any (compact keeps a live entry at the head).
func (b *behind) oldest() (uint64, bool) {
	if b.head < len(b.q) {
		return b.q[b.head].idx, true
	}
	return 0, false
}

// flush issues buffered appends to st, oldest first, until the buffer is
// back under its limits (all of them if all).
func (b *behind) flush(st Store, qid uint64, all bool) {
	b.flushWhile(st, qid, func() bool { return all || b.over() })
}

// flushThrough issues the buffered appends of entries up to index idx.
func (b *behind) flushThrough(st Store, qid uint64, idx uint64) {
	b.flushWhile(st, qid, func() bool { return b.q[b.head].idx <= idx })
}

func (b *behind) flushWhile(st Store, qid uint64, more func() bool) {
	for b.head < len(b.q) && more() {
		e := &b.q[b.head]
		b.head++
		b.done = e.key
		if e.data == nil {
			continue
		}
		st.PutMessage(qid, e.key, e.data, nil) // copies data
		delete(b.live, e.key)
		b.account(-int64(len(e.data)) - behindOverhead)
		*e = behindEntry{}
	}
	b.compact()
}

// compact drops deleted entries from the front and reclaims the slice
// once it is mostly spent.
func (b *behind) compact() {
	for b.head < len(b.q) && b.q[b.head].data == nil {
		b.done = b.q[b.head].key
		b.q[b.head] = behindEntry{}
		b.head++
	}
	switch {
	case b.head == len(b.q):
		if cap(b.q) > 4*behindMsgs {
			b.q = nil
		} else {
			b.q = b.q[:0]
		}
		b.head = 0
	case b.head > 1024 && b.head*2 > len(b.q):
		n := copy(b.q, b.q[b.head:])
		clear(b.q[n:])
		b.q = b.q[:n]
		for i := range b.q {
			if b.q[i].data != nil {
				b.live[b.q[i].key] = i
			}
		}
		b.head = 0
	}
}

// reset forgets everything buffered (Restore, Drop).
func (b *behind) reset() {
	behindTotal.Add(-b.bytes)
	done := b.done
	*b = behind{done: done}
}
