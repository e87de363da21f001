package streamlog

import (
	"fmt"
)

// RangeLog is implemented by a MessageLog that removes a key range as one
// op (a quorum group's log, cluster/quorum.Log): every message of qid
// whose key is in [from, to), which held count messages of bytes bytes
// (what this node's store holds there, every op before it applied). An
// error means nothing was queued.
type RangeLog interface {
	DeleteRange(qid, from, to uint64, count, bytes int64) error
}

// Leads reports whether the log is a clustered stream's that this node leads.
func (l *Log) Leads() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.repl && l.ml != nil
}

// RetainReplicated removes, through the group's log, whole segments from
// the head, never the one appended to, while the log holds more than
// maxBytes (0: no limit) or a segment's last message is older than
// cutoff (unix ns, 0: no age limit): one range delete for all of them.
// It stops at a segment that is not durable (applied here) to its end.
func (l *Log) RetainReplicated(id uint64, maxBytes, cutoff int64) error {
	l.mu.Lock()
	if !l.repl || l.ml == nil {
		l.mu.Unlock()
		return nil
	}
	ml := l.ml
	durable := l.durable.Load()
	var total int64
	for _, s := range l.segs {
		total += s.bytes
	}
	var from, to uint64
	dropped := false
	for len(l.segs) > 1 {
		s := l.segs[0]
		if s.next > durable || !((maxBytes > 0 && total > maxBytes) || (cutoff > 0 && s.lastTs < cutoff)) {
			break
		}
		if !dropped {
			from, dropped = s.first, true
		}
		total -= s.bytes
		l.segs = l.segs[1:]
		to = l.segs[0].first
	}
	l.mu.Unlock()
	if !dropped {
		return nil
	}
	l.cache.drop(to)
	// What the store holds of the range: every entry that wrote it is
	// applied (below the watermark), and no later op of this leader's
	// touches it (appends go past the last segment's start, retention
	// passes take disjoint ranges).
	var keys []uint64
	var count, bytes int64
	rl, ranged := ml.(RangeLog)
	err := l.st.MessageKeys(id, from, func(seq uint64, size int64) bool {
		if seq >= to {
			return false
		}
		count++
		bytes += size
		if !ranged {
			keys = append(keys, seq)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("stream retention: reading [%d, %d): %w", from, to, err)
	}
	if !ranged {
		for _, k := range keys { // a log without range ops: one by one
			ml.DeleteMessage(id, k)
		}
		return nil
	}
	if err := rl.DeleteRange(id, from, to, count, bytes); err != nil {
		return fmt.Errorf("stream retention: %w", err)
	}
	return nil
}

// FollowStore brings a follower's index (its one segment) up to what its
// store holds of key range id: with head, its first offset up to the
// store's first key (the leader's retention deleted what was before it),
// then the keys past the index's end (what the group committed since).
// It reports whether the index grew. It scans from the index's own end,
// not from the readers' watermark, and under fmu, so that whatever the
// store did between two calls (appends, and range deletes past the
// index's end while a restarted member catches up in one burst) the
// index counts each key of the store once and nothing it lacks.
func (l *Log) FollowStore(id uint64, head bool) bool {
	l.fmu.Lock()
	defer l.fmu.Unlock()
	l.mu.Lock()
	if !l.repl || l.ml != nil || len(l.segs) != 1 {
		l.mu.Unlock()
		return false // leading (or not a clustered stream's log)
	}
	g := l.segs[0]
	s := *g // only followStore and enterReplicated (under fmu) change it
	l.mu.Unlock()

	headMoved := false
	if head {
		var first uint64
		found := false
		_ = l.st.MessageKeys(id, 0, func(seq uint64, _ int64) bool {
			first, found = seq, true
			return false
		})
		if found && first > s.first {
			headMoved = true
			if first >= s.next {
				// Everything the index held is gone, and the store
				// goes on past its end: the tail below counts it.
				s = Segment{id: s.id, first: first, next: first}
			} else {
				// Offsets are dense but for gaps a crash left: at
				// most next-first remain, of the average size.
				avg := s.bytes / max(s.count, 1)
				s.count = min(s.count, int64(s.next-first))
				s.bytes = s.count * avg
				s.first = first
				s.firstTs = 0
				if r, ok := l.readOne(s, first); ok {
					s.firstTs = l.timeAt(r.Data)
				}
			}
		}
	}
	// The tail: from the index's end, or, when the index holds nothing,
	// everything the store holds.
	from := s.next
	if s.count == 0 {
		from = 0
	}
	var n, bytes int64
	next, firstKey := from, uint64(0)
	_ = l.st.MessageKeys(id, from, func(seq uint64, size int64) bool {
		if n == 0 {
			firstKey = seq
		}
		n++
		bytes += size
		next = seq + 1
		return true
	})
	if n > 0 {
		if s.count == 0 {
			s.first = firstKey
			if r, ok := l.readOne(Segment{id: id, first: firstKey, next: firstKey + 1}, firstKey); ok {
				s.firstTs = l.timeAt(r.Data)
			}
		}
		s.count += n
		s.bytes += bytes
		s.next = next
		if r, ok := l.readOne(Segment{id: id, first: next - 1, next: next}, next-1); ok {
			ts := l.timeAt(r.Data)
			s.lastTs = max(s.lastTs, ts)
		}
	}
	if !headMoved && n == 0 {
		return false
	}
	l.mu.Lock()
	if !l.repl || l.ml != nil || len(l.segs) != 1 || l.segs[0] != g {
		l.mu.Unlock()
		return false // became the leader meanwhile: its index is its own
	}
	*g = s
	l.next = max(l.next, s.next)
	l.mu.Unlock()
	if headMoved {
		l.cache.drop(s.first)
	}
	if n == 0 {
		return false
	}
	l.raise(s.next)
	return true
}

// EnterReplicated makes the log the key range id as the store holds it
// now (keys only are read, and each segment's first and last message):
// one segment if segBytes is 0 (a follower), else cut into segments of
// at most segBytes each, greedily from the first key (the leader).
func (l *Log) EnterReplicated(id uint64, segBytes int64) {
	// Under fmu: a follower's refresh that read the store after this scan
	// must not have its result replaced by this older one.
	l.fmu.Lock()
	defer l.fmu.Unlock()
	var segs []*Segment
	var cur *Segment
	_ = l.st.MessageKeys(id, 0, func(seq uint64, size int64) bool {
		if cur == nil || (segBytes > 0 && cur.count > 0 && cur.bytes+size > segBytes) {
			cur = &Segment{id: id, first: seq, next: seq}
			segs = append(segs, cur)
		}
		cur.count++
		cur.bytes += size
		cur.next = seq + 1
		return true
	})
	for _, s := range segs {
		if r, ok := l.readOne(*s, s.first); ok {
			s.firstTs = l.timeAt(r.Data)
		}
		if r, ok := l.readOne(*s, s.next-1); ok {
			s.lastTs = l.timeAt(r.Data)
		}
	}
	l.mu.Lock()
	if len(segs) == 0 {
		segs = []*Segment{{id: id, first: l.next, next: l.next}}
	}
	l.segs = segs
	last := segs[len(segs)-1]
	l.next = max(l.next, last.next)
	l.repl = true
	l.mu.Unlock()
	l.raise(last.next)
}

// raise moves the durable watermark up to off (never down).
func (l *Log) raise(off uint64) {
	for {
		cur := l.durable.Load()
		if cur >= off || l.durable.CompareAndSwap(cur, off) {
			return
		}
	}
}

// Following reports whether the log is a clustered stream's that another
// node leads.
func (l *Log) Following() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.repl && l.ml == nil
}
