package mqtt

import "github.com/trident-broker/trident/exchange"

// inflight is an outbound QoS 1 or 2 PUBLISH awaiting its acknowledgement.
type inflight struct {
	q        *exchange.Queue // nil for a retained message
	seq      uint64
	released bool // QoS 2: PUBREC received, PUBREL sent, awaiting PUBCOMP
	used     bool // the slot holds a packet (pidTable)
}

// pidTable holds a connection's outbound packets awaiting acknowledgement,
// indexed by packet id (under conn.infMu). It replaces a map: ids are
// handed out in turn from a slice kept at most three quarters full, so
// allocation finds a free id at once and lookups are an index, with no
// hashing and no tombstones from the constant churn of a busy
// subscriber. It grows with the largest number of packets in flight
// (bounded by the receive maximum, plus retained messages) and is nil on
// an idle connection.
type pidTable struct {
	slots []inflight // by packet id; slots[0] is unused
	n     uint16     // packet ids in use (at most 65535)
	next  uint16
}

func (t *pidTable) len() int { return int(t.n) }

func (t *pidTable) get(pid uint16) (inflight, bool) {
	if int(pid) >= len(t.slots) || !t.slots[pid].used {
		return inflight{}, false
	}
	return t.slots[pid], true
}

// set stores f at pid (a packet id restored from the session).
func (t *pidTable) set(pid uint16, f inflight) {
	if pid == 0 {
		return
	}
	if int(pid) >= len(t.slots) {
		t.grow(int(pid) + 1)
	}
	if !t.slots[pid].used {
		t.n++
	}
	f.used = true
	t.slots[pid] = f
}

func (t *pidTable) del(pid uint16) {
	if int(pid) < len(t.slots) && t.slots[pid].used {
		t.slots[pid] = inflight{}
		t.n--
	}
}

// alloc stores f under the next free packet id.
func (t *pidTable) alloc(f inflight) (uint16, bool) {
	if t.n >= 65535 {
		return 0, false
	}
	if (int(t.n)+1)*4 > (len(t.slots)-1)*3 && len(t.slots) < 65536 {
		t.grow(min(max(2*len(t.slots), 16), 65536))
	}
	for {
		t.next++
		if t.next == 0 || int(t.next) >= len(t.slots) {
			t.next = 1
		}
		if !t.slots[t.next].used {
			t.set(t.next, f)
			return t.next, true
		}
	}
}

func (t *pidTable) grow(n int) {
	if n <= len(t.slots) {
		return
	}
	s := make([]inflight, n)
	copy(s, t.slots)
	t.slots = s
}

// each calls fn for every packet in flight.
func (t *pidTable) each(fn func(pid uint16, f inflight)) {
	for i := 1; i < len(t.slots); i++ {
		if t.slots[i].used {
			fn(uint16(i), t.slots[i])
		}
	}
}

// settle acknowledges a delivery to its queue with the next batch
// (reader goroutine only): acknowledgements read in one go reach the core
// in one call per queue, not one lock round per PUBACK.
func (c *conn) settle(q *exchange.Queue, seq uint64) {
	rd := c.readerState()
	if q != rd.ackQ && len(rd.ackSeqs) > 0 {
		c.flushSettles()
	}
	rd.ackQ = q
	rd.ackSeqs = append(rd.ackSeqs, seq)
	if len(rd.ackSeqs) >= 256 {
		c.flushSettles()
	}
}

// flushSettles hands the batched acknowledgements to the core; the reader
// calls it before it would block on the socket, and before cleanup.
func (c *conn) flushSettles() {
	rd := c.rd
	if rd == nil {
		return
	}
	if len(rd.ackSeqs) > 0 {
		rd.ackQ.AckMany(rd.ackSeqs)
		rd.ackSeqs = rd.ackSeqs[:0]
	}
	rd.ackQ = nil
}
