package stream

// pendingPublish is a publish waiting for its Confirm: its publisher and
// publishing id.
type pendingPublish struct {
	pub  uint8
	id   uint64
	live bool // not answered yet
}

// pendingRing holds a connection's publishes waiting for their Confirm
// (under conn.pmu). Tags are handed out in order (base is the tag of
// recs[head]) and the store confirms mostly in that order, so a slice
// indexed by tag does what a map would without hashing each message; an
// answer out of order only marks its slot, and the head moves past the
// answered slots at the front. A publish that stays unanswered while
// lateAfter later ones come goes to a map (late), so that the slots behind
// it (more than lateAfter answered behind it) do not pile up.
type pendingRing struct {
	recs     []pendingPublish
	head     int
	base     uint64 // the tag of recs[head]
	answered int    // slots of recs[head:] answered already
	late     map[uint64]pendingPublish
}

const lateAfter = 8192

// add reserves the next tag for a publish.
func (r *pendingRing) add(pub uint8, id uint64) uint64 {
	if r.base == 0 {
		r.base = 1 // tags start at 1
	}
	tag := r.base + uint64(len(r.recs)-r.head)
	r.recs = append(r.recs, pendingPublish{pub: pub, id: id, live: true})
	return tag
}

// take answers tag: its publish, and whether it was still waiting (a tag
// answered already, or never handed out, is not).
func (r *pendingRing) take(tag uint64) (pendingPublish, bool) {
	if tag < r.base {
		pp, ok := r.late[tag]
		delete(r.late, tag)
		return pp, ok
	}
	if tag-r.base >= uint64(len(r.recs)-r.head) {
		return pendingPublish{}, false
	}
	i := r.head + int(tag-r.base)
	pp := r.recs[i]
	if !pp.live {
		return pendingPublish{}, false
	}
	r.recs[i].live = false
	r.answered++
	for r.head < len(r.recs) && (!r.recs[r.head].live || r.answered > lateAfter) {
		if pp := r.recs[r.head]; pp.live {
			if r.late == nil {
				r.late = map[uint64]pendingPublish{}
			}
			r.late[r.base] = pp
		} else {
			r.answered--
		}
		r.head++
		r.base++
	}
	switch {
	case r.head == len(r.recs):
		// Every publish answered: base is the next tag; start over at
		// the front, without a burst's memory.
		r.recs, r.head = r.recs[:0], 0
		if cap(r.recs) > 1<<16 {
			r.recs = nil
		}
	case r.head >= 1024 && r.head*2 >= len(r.recs):
		// A publish long unanswered holds the front: move the rest down.
		n := copy(r.recs, r.recs[r.head:])
		clear(r.recs[n:])
		r.recs, r.head = r.recs[:n], 0
	}
	return pp, true
}

// waiting is how many publishes wait for their Confirm.
func (r *pendingRing) waiting() int {
	n := len(r.late)
	for _, pp := range r.recs[r.head:] {
		if pp.live {
			n++
		}
	}
	return n
}
