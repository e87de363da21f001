package quorum

import (
	"math"
	"sort"
)

// entry is one message slot of the state. Slots are kept in one slice
// sorted by seq; a deleted message's slot stays (dead, data released)
// until the slice is compacted, so a delete is a binary search and a
// flag, and the common FIFO pattern (append at the tail, delete at the
// head) never shifts the slice. 40 bytes a slot on 64-bit platforms plus
// the message bytes.
type entry struct {
	seq     uint64
	data    []byte // never modified after it is stored: snapshots share it
	returns uint32
	dead    bool
}

// messages is the ordered message set of one queue. Not safe for
// concurrent use: the FSM holds its lock.
type messages struct {
	ents  []entry // sorted by seq; ents[:head] are dead and forgotten
	head  int     // first slot that may be live
	live  int     // live slots
	dead  int     // dead slots in ents[head:]
	bytes int64   // sum of len(data) over live slots
}

// compactMin is the slice length below which dead slots are never
// compacted away (a small slice is cheap to keep).
const compactMin = 64

// find returns the index in ents of the slot for seq, or where it would
// be inserted, and whether a slot (live or dead) exists.
func (m *messages) find(seq uint64) (int, bool) {
	tail := m.ents[m.head:]
	i := m.head + sort.Search(len(tail), func(j int) bool { return tail[j].seq >= seq })
	return i, i < len(m.ents) && m.ents[i].seq == seq
}

// put stores data (owned by m from now on) as message seq, replacing
// the message if it exists; a replaced message keeps its return count.
func (m *messages) put(seq uint64, data []byte) {
	if n := len(m.ents); n == m.head || m.ents[n-1].seq < seq {
		if n == m.head && n > 0 {
			m.ents, m.head = m.ents[:0], 0 // all dead: reuse the array from the start
		}
		m.ents = append(m.ents, entry{seq: seq, data: data})
		m.live++
		m.bytes += int64(len(data))
		return
	}
	i, ok := m.find(seq)
	if ok {
		e := &m.ents[i]
		if e.dead {
			*e = entry{seq: seq, data: data}
			m.dead--
			m.live++
		} else {
			m.bytes -= int64(len(e.data))
			e.data = data
		}
		m.bytes += int64(len(data))
		return
	}
	if i == m.head && m.head > 0 {
		// Before every slot, with room left by forgotten slots.
		m.head--
		m.ents[m.head] = entry{seq: seq, data: data}
	} else {
		m.ents = append(m.ents, entry{})
		copy(m.ents[i+1:], m.ents[i:])
		m.ents[i] = entry{seq: seq, data: data}
	}
	m.live++
	m.bytes += int64(len(data))
}

// del removes message seq; an unknown seq is ignored.
func (m *messages) del(seq uint64) {
	i, ok := m.find(seq)
	if !ok || m.ents[i].dead {
		return
	}
	e := &m.ents[i]
	m.bytes -= int64(len(e.data))
	e.data, e.returns, e.dead = nil, 0, true
	m.live--
	m.dead++
	for m.head < len(m.ents) && m.ents[m.head].dead {
		m.head++
		m.dead--
	}
	if m.head == len(m.ents) {
		// Empty: keep a small array for reuse, drop a big one.
		if cap(m.ents) > 4*compactMin {
			m.ents = nil
		}
		m.ents, m.head, m.dead = m.ents[:0], 0, 0
	}
	if garbage := m.head + m.dead; len(m.ents) >= compactMin && garbage > len(m.ents)/2 {
		m.compact()
	}
}

// compact copies the live slots into a new slice with a quarter spare.
// It runs when more than half the slice is garbage, so its cost is at
// most the number of deletes since the last one.
func (m *messages) compact() {
	ents := make([]entry, 0, m.live+m.live/4+8)
	for _, e := range m.ents[m.head:] {
		if !e.dead {
			ents = append(ents, e)
		}
	}
	m.ents, m.head, m.dead = ents, 0, 0
}

// ret counts one return of message seq; an unknown seq is ignored. The
// count saturates at the largest uint32.
func (m *messages) ret(seq uint64) {
	i, ok := m.find(seq)
	if !ok || m.ents[i].dead {
		return
	}
	if e := &m.ents[i]; e.returns < math.MaxUint32 {
		e.returns++
	}
}

// apply runs one decoded op. data of an append is copied.
func (m *messages) apply(o op) {
	switch o.kind {
	case opAppend:
		m.put(o.seq, append(make([]byte, 0, len(o.data)), o.data...))
	case opDelete:
		m.del(o.seq)
	case opReturn:
		m.ret(o.seq)
	}
}

// from appends to dst up to max live slots with seq >= seq, in order.
func (m *messages) from(seq uint64, max int, dst []entry) []entry {
	i, _ := m.find(seq)
	for ; i < len(m.ents) && len(dst) < max; i++ {
		if e := m.ents[i]; !e.dead {
			dst = append(dst, e)
		}
	}
	return dst
}

// liveSlots returns a copy of every live slot, in order.
func (m *messages) liveSlots() []entry {
	out := make([]entry, 0, m.live)
	for _, e := range m.ents[m.head:] {
		if !e.dead {
			out = append(out, e)
		}
	}
	return out
}

// reset replaces the whole state with ents (sorted, live, owned by m).
func (m *messages) reset(ents []entry) {
	*m = messages{ents: ents, live: len(ents)}
	for _, e := range ents {
		m.bytes += int64(len(e.data))
	}
}
