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
// The buffer is flushed (its appends issued to the Store, oldest first)
// before every state record, so a record covers only ops the Store has
// been given, and a crash loses nothing: the Raft log holds every entry
// after the record and they are applied again. It is also flushed, oldest
// first, while it holds more than behindMsgs messages or behindBytes bytes,
// or while all FSMs' buffers together pass behindBudget, before anything
// reads the Store for the FSM's messages (a snapshot sent to a member, the
// queue's takeover, Messages), saveEveryBehind after the last apply of a
// queue that went quiet (a timer: an idle backlog must not stay in memory
// and unpageable), and when the member stops (Close).
//
// What the buffer holds is not yet in the Store, so the leader's queue may
// not page those messages out (it would read them back from the Store):
// the FSM reports through OnStored the key of the last append issued, and
// the queue pages only up to it (exchange.Queue.LogStored).

const (
	behindMsgs   = 8192
	behindBytes  = 4 << 20
	behindBudget = 64 << 20
)

// behindTotal is the bytes buffered by every FSM of the process.
var behindTotal atomic.Int64

// behindEntry is one buffered append; data nil once deleted.
type behindEntry struct {
	key  uint64
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

// add buffers an append of key (data is copied).
func (b *behind) add(key uint64, data []byte) {
	if b.live == nil {
		b.live = make(map[uint64]int)
	}
	if i, ok := b.live[key]; ok {
		// Applied again (a replay): the later data wins, in place.
		b.account(int64(len(data)) - int64(len(b.q[i].data)))
		b.q[i].data = append(b.q[i].data[:0], data...)
		return
	}
	b.live[key] = len(b.q)
	b.q = append(b.q, behindEntry{key: key, data: append([]byte(nil), data...)})
	b.account(int64(len(data)))
}

// del drops key if it is buffered and reports whether it was.
func (b *behind) del(key uint64) bool {
	i, ok := b.live[key]
	if !ok {
		return false
	}
	delete(b.live, key)
	b.account(-int64(len(b.q[i].data)))
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

// flush issues buffered appends to st, oldest first, until the buffer is
// back under its limits (all of them if all).
func (b *behind) flush(st Store, qid uint64, all bool) {
	for b.head < len(b.q) && (all || b.over()) {
		e := &b.q[b.head]
		b.head++
		b.done = e.key
		if e.data == nil {
			continue
		}
		st.PutMessage(qid, e.key, e.data, nil) // copies data
		delete(b.live, e.key)
		b.account(-int64(len(e.data)))
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
