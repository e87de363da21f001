package exchange

// unackedSet holds a queue's unacknowledged deliveries by seq. A queue
// delivers in seq order and consumers mostly settle in that order, so the
// live seqs are a dense run: the set is a ring indexed by seq for the run
// [base, hi) and a map for the few seqs outside it (a requeued message
// delivered again behind the run, or one left unacked far behind while
// the rest flows on). The ring never grows past four times its live
// entries (plus a minimum): a sparse run evicts its oldest entries to the
// map instead. put, take and len are O(1) amortised and allocate only when
// the ring grows or the map is used.
type unackedSet struct {
	ring  []unackedSlot // len a power of two, or nil
	base  uint64        // the lowest seq the ring may hold; ring[base&mask] is live if n > 0
	hi    uint64        // one past the highest seq in the ring
	n     int           // live entries in the ring
	other map[uint64]unackedEntry
}

type unackedSlot struct {
	u  unackedEntry
	ok bool
}

// minUnackedRing is the slack the ring may span beyond four times its
// live entries before it evicts to the map instead of growing.
const minUnackedRing = 64

// firstUnackedRing is the ring's size when it is first used: small, for
// the many queues that have a message or two unacked at a time (an MQTT
// session's); a busy queue grows it by doubling, once.
const firstUnackedRing = 4

func (s *unackedSet) len() int { return s.n + len(s.other) }

// put adds seq, which is not in the set.
func (s *unackedSet) put(seq uint64, u unackedEntry) {
	switch {
	case s.n == 0:
		if s.ring == nil {
			s.ring = make([]unackedSlot, firstUnackedRing)
		}
		s.base, s.hi = seq, seq+1
	case seq < s.base:
		s.putOther(seq, u)
		return
	case seq >= s.base+uint64(len(s.ring)):
		if !s.makeRoom(seq) {
			s.putOther(seq, u)
			return
		}
	}
	s.ring[seq&uint64(len(s.ring)-1)] = unackedSlot{u: u, ok: true}
	s.n++
	if seq >= s.hi {
		s.hi = seq + 1
	}
}

func (s *unackedSet) putOther(seq uint64, u unackedEntry) {
	if s.other == nil {
		s.other = map[uint64]unackedEntry{}
	}
	s.other[seq] = u
}

// makeRoom makes the ring reach seq (> every seq in it): by evicting its
// oldest entries to the map while it is sparse, else by growing it. It
// reports false if seq is out of reach (then seq goes to the map).
func (s *unackedSet) makeRoom(seq uint64) bool {
	for s.n > 0 && seq-s.base >= uint64(len(s.ring)) && s.n*4 < len(s.ring) {
		i := s.base & uint64(len(s.ring)-1)
		s.putOther(s.base, s.ring[i].u)
		s.ring[i] = unackedSlot{}
		s.n--
		s.advance()
	}
	if s.n == 0 {
		s.base, s.hi = seq, seq
		return true
	}
	span := seq - s.base + 1
	if span <= uint64(len(s.ring)) {
		return true
	}
	if span > uint64(4*(s.n+1)+minUnackedRing) {
		return false // too sparse to grow for
	}
	size := len(s.ring)
	for uint64(size) < span {
		size *= 2
	}
	ring := make([]unackedSlot, size)
	for q := s.base; q < s.hi; q++ {
		if sl := s.ring[q&uint64(len(s.ring)-1)]; sl.ok {
			ring[q&uint64(size-1)] = sl
		}
	}
	s.ring = ring
	return true
}

// advance moves base past settled seqs to the next live one.
func (s *unackedSet) advance() {
	if s.n == 0 {
		s.base = s.hi
		return
	}
	mask := uint64(len(s.ring) - 1)
	for !s.ring[s.base&mask].ok {
		s.base++
	}
}

// take removes seq and returns its entry, if it is in the set.
func (s *unackedSet) take(seq uint64) (unackedEntry, bool) {
	if s.n > 0 && seq >= s.base && seq < s.hi {
		i := seq & uint64(len(s.ring)-1)
		if sl := s.ring[i]; sl.ok {
			s.ring[i] = unackedSlot{}
			s.n--
			if seq == s.base {
				s.advance()
			}
			return sl.u, true
		}
		// Not in the ring: it may be in the map still, put there before
		// the ring's run moved over it (an entry behind the run when the
		// ring emptied and began again lower).
	}
	if u, ok := s.other[seq]; ok {
		delete(s.other, seq)
		return u, true
	}
	return unackedEntry{}, false
}

// each calls fn for every entry, in no particular order.
func (s *unackedSet) each(fn func(seq uint64, u *unackedEntry)) {
	if s.n > 0 {
		mask := uint64(len(s.ring) - 1)
		for q := s.base; q < s.hi; q++ {
			if sl := &s.ring[q&mask]; sl.ok {
				fn(q, &sl.u)
			}
		}
	}
	for seq, u := range s.other {
		fn(seq, &u)
	}
}

// clear removes every entry, calling fn for each first.
func (s *unackedSet) clear(fn func(u *unackedEntry)) {
	s.each(func(_ uint64, u *unackedEntry) { fn(u) })
	clear(s.ring)
	s.n = 0
	s.base = s.hi
	s.other = nil
}
