package streamlog

import (
	"fmt"
	"maps"
)

// Retain removes whole segments from the head, never the one appended to,
// while the log holds more than maxBytes (0: no limit) or a segment's last
// message is older than cutoff (unix ns, 0: no age limit). It returns the
// removed segments; the caller drops their messages (dropSegments), after
// which their records are gone too.
func (l *Log) Retain(maxBytes int64, cutoff int64) []Segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.repl {
		return nil // the leader's, through the group (retainReplicated)
	}
	var total int64
	for _, s := range l.segs {
		total += s.bytes
	}
	var gone []Segment
	for len(l.segs) > 1 {
		s := l.segs[0]
		if !((maxBytes > 0 && total > maxBytes) || (cutoff > 0 && s.lastTs < cutoff)) {
			break
		}
		total -= s.bytes
		gone = append(gone, *s)
		l.segs = l.segs[1:]
	}
	if len(gone) > 0 {
		l.cache.drop(l.segs[0].first)
	}
	return gone
}

// DropSegments deletes removed segments: the record first, so that a
// crash in between leaves at worst messages no segment names (never a
// segment without its messages that a start would count).
func (l *Log) DropSegments(gone []Segment) error {
	for _, s := range gone {
		if err := l.st.DeleteMeta(segKey(l.prefix, s.first)); err != nil {
			return err
		}
		if err := l.st.DropMessages(s.id); err != nil {
			return err
		}
	}
	return nil
}

// DropAll deletes the whole log (the stream was deleted).
func (l *Log) DropAll() error {
	l.mu.Lock()
	segs := make([]Segment, len(l.segs))
	for i, s := range l.segs {
		segs[i] = *s
	}
	l.segs = nil
	dones := l.discardPendLocked()
	l.mu.Unlock()
	for _, done := range dones {
		done(ErrClosed)
	}
	if err := l.DropSegments(segs); err != nil {
		return err
	}
	return l.st.DeleteMetaPrefix(l.prefix)
}

// countSegment sets s's count, bytes and next from its keys: a message
// record counts one; in a segment of chunks, a record counts the offsets
// up to the next record's key, and the last one what its record holds.
func (l *Log) countSegment(s *Segment) error {
	var last uint64
	any := false
	if err := l.st.MessageKeys(s.id, 0, func(seq uint64, size int64) bool {
		if s.chunked && any {
			s.count += int64(seq - last)
		} else if !s.chunked {
			s.count++
		}
		any, last = true, seq
		s.bytes += size
		s.next = seq + 1
		return true
	}); err != nil {
		return err
	}
	if !s.chunked || !any {
		return nil
	}
	n := uint64(1)
	if err := l.st.ReadMessages(s.id, last, func(seq uint64, data []byte) bool {
		if seq == last {
			n = chunkCount(data)
		}
		return false
	}); err != nil {
		return err
	}
	s.count += int64(n)
	s.next = last + n
	return nil
}

// Recover loads the segments from the store: records, then each
// segment's keys and its first and last message. It returns the largest
// store id in use.
func (l *Log) Recover() (maxID uint64, err error) {
	err = l.st.LoadMeta(l.prefix, func(key string, val []byte) error {
		id, first, err := decodeSegment(val)
		if err != nil {
			return fmt.Errorf("stream segment %q: %w", key, err)
		}
		l.segs = append(l.segs, &Segment{id: id, first: first, next: first, chunked: segmentChunked(val)})
		maxID = max(maxID, id)
		if snap, ok := decodeSegmentWriters(val); ok {
			l.snap = snap // the last segment's is the newest
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, s := range l.segs {
		if err := l.countSegment(s); err != nil {
			return 0, err
		}
		if s.count == 0 {
			continue
		}
		if r, ok := l.readOne(*s, s.first); ok {
			s.firstTs = l.timeAt(r.Data)
		}
		if r, ok := l.readOne(*s, s.next-1); ok {
			s.lastTs = l.timeAt(r.Data)
		}
	}
	for i, s := range l.segs {
		if i+1 < len(l.segs) && s.next > l.segs[i+1].first {
			return 0, fmt.Errorf("stream segments overlap at offset %d", l.segs[i+1].first)
		}
		l.next = max(l.next, s.next)
	}
	l.durable.Store(l.next)
	if l.snap != nil {
		l.writers.seqs = maps.Clone(l.snap.seqs)
		l.writers.next = l.snap.next
	}
	return maxID, nil
}

// Next is one past the segment's last offset.
func (s Segment) Next() uint64 { return s.next }
