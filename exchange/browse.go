package exchange

import (
	"bytes"
	"fmt"
	"time"
)

// Browse: a non-destructive look at a queue's or a stream's messages, for
// management (the HTTP API's browse endpoint). Nothing is taken, acked,
// flagged redelivered or moved: a classic queue's in-memory messages are
// copied out under its lock and its paged-out part is read from the store
// after it; a stream is read from its log like a consumer that never
// acks. The range looked at is bounded (BrowseOpts.Scan).

// Browse limits.
const (
	BrowseMaxCount = 1000
	BrowseMaxScan  = 100_000
)

// BrowseOpts describe one page of a browse.
type BrowseOpts struct {
	// From is where to start: a stream's offset, a queue's position from
	// its head (0 the next message to be delivered).
	From uint64
	// FromTime, if set, starts a stream at its first message enqueued at
	// or after it (From is then ignored). Queues ignore it.
	FromTime time.Time
	// Count is the most messages returned; Scan the most looked at.
	Count, Scan int
	Filter      BrowseFilter
}

// BrowseFilter selects messages; its zero value takes every one. Set
// fields must all match.
type BrowseFilter struct {
	RoutingKey string // equal
	Header     string // a header of this name...
	Value      string // ...whose value, formatted, equals this ("" any value)
	Body       string // a substring of the body
}

func (f *BrowseFilter) match(m *Message) bool {
	if f.RoutingKey != "" && m.RoutingKey != f.RoutingKey {
		return false
	}
	if f.Header != "" {
		v, ok := m.Props.Headers[f.Header]
		if !ok || (f.Value != "" && fmt.Sprint(v) != f.Value) {
			return false
		}
	}
	return f.Body == "" || bytes.Contains(m.Body, []byte(f.Body))
}

// BrowsedMessage is one message of a browse.
type BrowsedMessage struct {
	Position uint64    // stream offset, or position from a queue's head
	Enqueued time.Time // when the broker took it
	Msg      *Message  // do not modify
}

// BrowsePage is the answer to a browse.
type BrowsePage struct {
	Messages []BrowsedMessage
	// Next is where the next page starts (BrowseOpts.From).
	Next uint64
	// Scanned is how many messages were looked at; End says that the
	// queue or stream had no more.
	Scanned int
	End     bool
}

// Browse looks at q's messages without consuming them.
func (q *Queue) Browse(o BrowseOpts) (BrowsePage, error) {
	o.Count = min(max(o.Count, 1), BrowseMaxCount)
	o.Scan = min(max(o.Scan, 1), BrowseMaxScan)
	if q.st != nil {
		return q.st.browse(o)
	}
	return q.browseReady(o)
}

func (st *stream) browse(o BrowseOpts) (BrowsePage, error) {
	from := o.From
	if !o.FromTime.IsZero() {
		from = st.log.SeekTime(o.FromTime.UnixNano())
	} else if first, _ := st.log.Bounds(); from < first {
		from = first
	}
	var p BrowsePage
	p.Next = from
	for p.Scanned < o.Scan && len(p.Messages) < o.Count {
		recs, next, err := st.log.Read(p.Next, min(o.Scan-p.Scanned, readAheadMsgs), readAheadBytes)
		if err != nil {
			return p, err
		}
		if len(recs) == 0 {
			p.Next = next
			p.End = next >= st.log.Durable()
			if p.End {
				break
			}
			continue
		}
		for _, r := range recs {
			p.Scanned++
			p.Next = r.Off + 1
			m, ts, err := st.q.vh.b.decodeRecord(r.Data)
			if err != nil {
				continue
			}
			if o.Filter.match(m) {
				p.Messages = append(p.Messages, BrowsedMessage{Position: r.Off, Enqueued: time.Unix(0, ts), Msg: m})
				if len(p.Messages) == o.Count {
					break
				}
			}
		}
	}
	if p.Next >= st.log.Durable() {
		p.End = true
	}
	return p, nil
}

// browsePart is a run of a lane in delivery order: messages in memory,
// or a paged-out range (from key, n messages) read from the store.
type browsePart struct {
	msgs []*Message
	ts   []int64
	from uint64
	n    int
	end  uint64 // keys at or past it are not this part's (0: lane end)
	lane int
}

// browseReady copies out what a classic (or locally led quorum) queue
// holds in memory, in delivery order, and reads its paged-out ranges from
// the store after releasing its lock.
func (q *Queue) browseReady(o BrowseOpts) (BrowsePage, error) {
	need := int(min(o.From, uint64(BrowseMaxScan))) + o.Scan
	var parts []browsePart
	q.mu.Lock()
	if q.proxy() != nil {
		q.mu.Unlock()
		return BrowsePage{}, errorf(KindNotImplemented, "queue '%s' in vhost '%s' lives on another node: browse it there", q.name, q.vh.name)
	}
	r := &q.ready
	// A gated queue's uncommitted messages, each lane's last, are not
	// shown (commit.go).
	pn, _ := q.pendingLen()
	total := uint64(r.n - pn)
	gated := q.gated()
	taken := 0
	for i := len(r.levels) - 1; i >= 0 && taken < need; i-- {
		l := &r.levels[i]
		head := browsePart{lane: i}
		for k := 0; k < l.head.n && taken < need; k++ {
			e := l.head.at(k)
			if gated && !q.released(e) {
				break
			}
			e.own = false // read after the lock: the hold stays (reuse.go)
			head.msgs = append(head.msgs, e.msg)
			head.ts = append(head.ts, e.msg.ts)
			taken++
		}
		parts = append(parts, head)
		if l.mid > 0 && taken < need {
			mid := browsePart{lane: i, from: l.from, n: l.mid}
			if l.tail.n > 0 {
				mid.end = q.storeKey(l.tail.at(0))
			}
			parts = append(parts, mid)
			taken += l.mid
		}
		tail := browsePart{lane: i}
		for k := 0; k < l.tail.n && taken < need; k++ {
			e := l.tail.at(k)
			if gated && !q.released(e) {
				break
			}
			e.own = false // read after the lock: the hold stays (reuse.go)
			tail.msgs = append(tail.msgs, e.msg)
			tail.ts = append(tail.ts, e.msg.ts)
			taken++
		}
		parts = append(parts, tail)
	}
	q.mu.Unlock()

	p := BrowsePage{Next: o.From}
	pos := uint64(0)
	full := func() bool { return len(p.Messages) >= o.Count || p.Scanned >= o.Scan }
	visit := func(m *Message, ts int64) {
		if pos >= o.From {
			p.Scanned++
			if o.Filter.match(m) {
				p.Messages = append(p.Messages, BrowsedMessage{Position: pos, Enqueued: time.Unix(0, ts), Msg: m})
			}
			p.Next = pos + 1
		}
		pos++
	}
	for _, part := range parts {
		if full() {
			break
		}
		if part.n == 0 {
			for k, m := range part.msgs {
				if full() {
					break
				}
				visit(m, part.ts[k])
			}
			continue
		}
		if pos+uint64(part.n) <= o.From {
			pos += uint64(part.n) // skipped without reading
			continue
		}
		left := part.n
		err := q.vh.b.store.ReadMessages(q.id, part.from, func(k uint64, data []byte) bool {
			if ln, _, _ := splitStoreKey(k); ln != part.lane || (part.end != 0 && k >= part.end) {
				return false
			}
			left--
			if pos < o.From {
				pos++
				return left > 0
			}
			m, ts, err := decodeMessage(data)
			if err != nil {
				pos++
				return left > 0
			}
			visit(m, ts)
			return left > 0 && !full()
		})
		if err != nil {
			return p, err
		}
	}
	p.End = !full() || p.Next >= total
	return p, nil
}
