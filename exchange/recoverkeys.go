package exchange

import (
	"sync"
	"sync/atomic"
)

// Recovery counts each queue's stored messages from their keys alone
// (recoverKeys): every lane becomes mid. A lane with many keys is split
// into ranges counted in parallel, and queues are counted in parallel, so
// that a restart takes a key scan divided by the cores.

// splitSpan is the key span (two keys a seq) past which a lane's count is
// split into parallel ranges.
var splitSpan uint64 = 2 * 200_000 // a variable for tests

// keyRange is a part of one lane's keys: [from, to), to 0 for the lane's end.
type keyRange struct {
	q        *Queue
	lane     int
	from, to uint64
}

// keyCount is what counting a keyRange found.
type keyCount struct {
	n      int
	bytes  int64
	first  uint64 // key of the first message, valid if n > 0
	maxSeq uint64
}

// firstKey is the first stored key of q at or after k, if any.
func (q *Queue) firstKey(k uint64) (uint64, bool) {
	var got uint64
	found := false
	_ = q.vh.b.store.MessageKeys(q.id, k, func(seq uint64, _ int64) bool {
		got, found = seq, true
		return false
	})
	return got, found
}

// keyRanges plans the count of q's lanes, splitting a big lane in parts.
func (q *Queue) keyRanges(parts int) []keyRange {
	var out []keyRange
	for ln := range q.ready.nLevels() {
		start := storeKey(ln, 0, false)
		first, ok := q.firstKey(start)
		if !ok {
			break // no key in this lane or any above
		}
		if l, _, _ := splitStoreKey(first); l != ln {
			continue
		}
		inLane := func(k uint64) bool {
			got, ok := q.firstKey(k)
			if !ok {
				return false
			}
			l, _, _ := splitStoreKey(got)
			return l == ln
		}
		laneEnd := start + 1<<laneShift - 1
		if parts <= 1 || !inLane(first+splitSpan) {
			out = append(out, keyRange{q: q, lane: ln, from: first})
			continue
		}
		// The last key of the lane, by bisection: lo has a key at or
		// after it within the lane, hi has none.
		lo, hi := first+splitSpan, laneEnd
		for hi-lo > 1 {
			m := lo + (hi-lo)/2
			if inLane(m) {
				lo = m
			} else {
				hi = m
			}
		}
		step := (hi - first) / uint64(parts)
		for p := 0; p < parts; p++ {
			r := keyRange{q: q, lane: ln, from: first + uint64(p)*step, to: first + uint64(p+1)*step}
			if p == parts-1 {
				r.to = 0
			}
			out = append(out, r)
		}
	}
	return out
}

// smallQueueKeys is how many keys a queue may have to be counted in one
// pass at start (countSmall) rather than planned and split.
var smallQueueKeys = 4096 // a variable for tests

// countSmall counts q's stored messages per lane in one pass over its
// keys, deleting pages of transient messages, if it has at most limit
// keys; ok is false, and nothing is deleted, if it has more. A restart
// with many small queues then opens one iterator a queue instead of
// three (keyRanges' seeks, then the count).
func (q *Queue) countSmall(limit int) (lanes []keyCount, ok bool, err error) {
	st := q.vh.b.store
	lanes = make([]keyCount, q.ready.nLevels())
	var pages []uint64
	seen := 0
	ok = true
	err = st.MessageKeys(q.id, 0, func(k uint64, size int64) bool {
		if seen++; seen > limit {
			ok = false
			return false
		}
		ln, seq, page := splitStoreKey(k)
		switch {
		case ln >= len(lanes):
			q.unknownLane(ln, seq)
			return false
		case page:
			pages = append(pages, k)
		default:
			lanes[ln].add(k, seq, size)
		}
		return true
	})
	if err != nil || !ok {
		return nil, false, err
	}
	for _, k := range pages {
		st.DeleteMessage(q.id, k)
	}
	return lanes, true, nil
}

// count counts the keys of r, deleting pages of transient messages.
func (r keyRange) count() (keyCount, error) {
	var c keyCount
	st := r.q.vh.b.store
	err := st.MessageKeys(r.q.id, r.from, func(k uint64, size int64) bool {
		if r.to != 0 && k >= r.to {
			return false
		}
		ln, seq, page := splitStoreKey(k)
		switch {
		case ln != r.lane:
			if ln >= r.q.ready.nLevels() {
				r.q.unknownLane(ln, seq)
			}
			return false
		case page:
			st.DeleteMessage(r.q.id, k)
		default:
			c.add(k, seq, size)
		}
		return true
	})
	return c, err
}

// add counts the message with key k, seq seq and a record of size bytes.
func (c *keyCount) add(k, seq uint64, size int64) {
	if c.n == 0 {
		c.first = k
	}
	c.n++
	c.bytes += size
	c.maxSeq = max(c.maxSeq, seq)
}

// unknownLane reports stored messages in a lane above q's priorities.
func (q *Queue) unknownLane(ln int, seq uint64) {
	q.vh.b.log.Error("stored messages of an unknown priority skipped", "vhost", q.vh.name,
		"queue", q.name, "lane", ln, "levels", q.ready.nLevels(), "seq", seq)
}

// recoverKeys counts the stored messages of queues at start, with up to
// workers goroutines. all flags every recovered message redelivered (not
// a clean shutdown), else those in delivered[q.id] and those up to
// upto[q.id]. It returns the number of messages.
func (b *Broker) recoverKeys(queues []*Queue, workers int, all bool, delivered map[uint64]map[uint64]bool, upto map[uint64]uint64) (int, error) {
	// A small queue is counted in one pass; a big one is planned (a few
	// seeks) and its big lanes counted in parallel ranges. Queues are
	// counted or planned in parallel.
	plans := make([][]keyRange, len(queues))
	small := make([][]keyCount, len(queues))
	serrs := make([]error, len(queues))
	parallel(workers, len(queues), func(i int) {
		q := queues[i]
		if q.xa.quorum { // a quorum queue's messages live in its Raft group
			return
		}
		var ok bool
		if small[i], ok, serrs[i] = q.countSmall(smallQueueKeys); !ok && serrs[i] == nil {
			plans[i] = q.keyRanges(workers)
		}
	})
	total := 0
	for i, lanes := range small {
		if serrs[i] != nil {
			return total, serrs[i]
		}
		for ln, c := range lanes {
			if c.n > 0 {
				queues[i].cmdRestore(ln, c.first, c.n, c.bytes, c.maxSeq)
				total += c.n
			}
		}
	}
	var ranges []keyRange
	for _, p := range plans {
		ranges = append(ranges, p...)
	}
	counts := make([]keyCount, len(ranges))
	errs := make([]error, len(ranges))
	parallel(workers, len(ranges), func(i int) { counts[i], errs[i] = ranges[i].count() })
	for i, r := range ranges {
		if errs[i] != nil {
			return total, errs[i]
		}
		c := counts[i]
		if c.n == 0 {
			continue
		}
		r.q.cmdRestore(r.lane, c.first, c.n, c.bytes, c.maxSeq)
		total += c.n
	}
	for _, q := range queues {
		if all {
			q.cmdFlagRestored(q.recMax(), nil)
		} else {
			q.cmdFlagRestored(upto[q.id], delivered[q.id])
		}
	}
	return total, nil
}

// parallel calls fn(0..n-1) on up to workers goroutines.
func parallel(workers, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < max(1, min(workers, n)); w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}
