package streamlog

import (
	"sort"
	"sync"
)

// Reads go through a small cache of chunks (chunkRecs consecutive offsets,
// complete and durable ones only), shared by the stream's readers: ten
// consumers reading the same stretch of a stream read the store once.
//
// The cache is bounded in bytes, not in how much of the stream it covers:
// with 32 MiB it held the whole of a 300,000-message stream of 16-byte
// messages while ten consumers read it (a heap profile's largest item after
// Badger's memtable), and it stayed after they left. Readers further apart
// than it covers read the store each for themselves (those further apart
// than the core's ring of decoded messages, 16,384 offsets, already decode
// each for themselves); 8 MiB covers the ring for records of up to ~500
// bytes. DropCache gives it back when the stream's last reader goes.
const (
	chunkRecs     = 256
	chunkCacheMax = 8 << 20 // bytes of records cached per stream
)

type chunk struct {
	recs []Rec
	end  uint64 // the offset after the chunk (where reading goes on)
	size int
}

type chunkCache struct {
	mu    sync.Mutex
	m     map[uint64]*chunk
	fifo  []uint64
	bytes int
}

func (c *chunkCache) get(i uint64) *chunk {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[i]
}

func (c *chunkCache) put(i uint64, ch *chunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[uint64]*chunk{}
	}
	if _, ok := c.m[i]; ok {
		return
	}
	c.m[i] = ch
	c.fifo = append(c.fifo, i)
	c.bytes += ch.size
	for c.bytes > chunkCacheMax && len(c.fifo) > 1 {
		old := c.fifo[0]
		c.fifo = c.fifo[1:]
		if o := c.m[old]; o != nil {
			c.bytes -= o.size
			delete(c.m, old)
		}
	}
}

// CacheBytes is what the log's read cache holds (bytes of records, as
// counted against its bound).
func (l *Log) CacheBytes() int {
	l.cache.mu.Lock()
	defer l.cache.mu.Unlock()
	return l.cache.bytes
}

// DropCache forgets the read cache: the stream's last reader went (a
// reader that comes later fills it again from the store).
func (l *Log) DropCache() {
	c := &l.cache
	c.mu.Lock()
	c.m, c.fifo, c.bytes = nil, nil, 0
	c.mu.Unlock()
}

// drop forgets every chunk below offset off (retention removed them).
func (c *chunkCache) drop(off uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ch := range c.m {
		if ch.end <= off {
			c.bytes -= ch.size
			delete(c.m, i)
		}
	}
	kept := c.fifo[:0]
	for _, i := range c.fifo {
		if c.m[i] != nil {
			kept = append(kept, i)
		}
	}
	c.fifo = kept
}

// Read returns up to n durable messages from offset from on (at most
// maxBytes of them, but at least one), and the offset to read next: past
// a gap or a removed segment it is where the log goes on.
func (l *Log) Read(from uint64, n int, maxBytes int) ([]Rec, uint64, error) {
	return l.ReadAppend(nil, from, n, maxBytes)
}

// ReadAppend is Read appending up to n messages to out (a reader's
// array, reused from one read to the next).
func (l *Log) ReadAppend(out []Rec, from uint64, n int, maxBytes int) ([]Rec, uint64, error) {
	n += len(out)
	size := 0
	next := from
	limit := l.durable.Load()
	for len(out) < n && size < maxBytes && next < limit {
		ci := next / chunkRecs
		ch := l.cache.get(ci)
		if ch == nil {
			lo, hi := ci*chunkRecs, (ci+1)*chunkRecs
			if hi > limit {
				// The chunk at the end is not complete yet: read what
				// is asked, uncached.
				recs, nx, err := l.readRange(next, min(n-len(out), int(limit-next)), maxBytes-size)
				return append(out, recs...), nx, err
			}
			recs, nx, err := l.readRange(lo, chunkRecs, 1<<62)
			if err != nil {
				return out, next, err
			}
			ch = &chunk{recs: recs, end: max(nx, lo)}
			for _, r := range recs {
				ch.size += len(r.Data) + 32
			}
			if nx >= hi {
				l.cache.put(ci, ch)
			}
		}
		if ch.end <= next {
			// Nothing there (a removed segment): go on where the log does.
			recs, nx, err := l.readRange(next, n-len(out), maxBytes-size)
			return append(out, recs...), nx, err
		}
		for _, r := range ch.recs {
			if r.Off < next {
				continue
			}
			if len(out) >= n || size >= maxBytes {
				return out, r.Off, nil
			}
			out = append(out, r)
			size += len(r.Data)
		}
		next = ch.end
	}
	return out, next, nil
}

// readRange reads from the store, uncached.
func (l *Log) readRange(from uint64, n int, maxBytes int) ([]Rec, uint64, error) {
	limit := l.durable.Load()
	l.mu.Lock()
	if len(l.segs) > 0 && from < l.segs[0].first {
		from = l.segs[0].first // removed by retention
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].next > from })
	var plan []Segment
	for ; i < len(l.segs) && len(plan) < 64; i++ {
		plan = append(plan, *l.segs[i])
	}
	l.mu.Unlock()
	out := make([]Rec, 0, min(n, chunkRecs))
	size := 0
	next := from
	for _, s := range plan {
		if next >= limit || len(out) >= n || (size >= maxBytes && len(out) > 0) {
			break
		}
		if next < s.first {
			next = s.first
		}
		err := l.scanSeg(s, next, func(seq uint64, data []byte) bool {
			if seq >= limit || seq >= s.next {
				return false
			}
			out = append(out, Rec{Off: seq, Data: data})
			size += len(data)
			next = seq + 1
			return len(out) < n && size < maxBytes
		})
		if err != nil {
			return out, next, err
		}
		if len(out) < n && size < maxBytes && next < s.next && next < limit {
			next = min(s.next, limit) // a gap a crash left at the segment's end
		}
	}
	return out, next, nil
}

// readOne returns the message at offset off (or the next one that exists
// in its segment).
func (l *Log) readOne(s Segment, off uint64) (Rec, bool) {
	var r Rec
	ok := false
	_ = l.scanSeg(s, off, func(seq uint64, data []byte) bool {
		r, ok = Rec{Off: seq, Data: data}, true
		return false
	})
	return r, ok
}

// SeekTime returns the offset of the first message enqueued at or after
// t (unix ns), or the next offset if there is none. Within a segment it
// searches by reading messages (timestamps rise with offsets).
func (l *Log) SeekTime(t int64) uint64 {
	l.mu.Lock()
	var seg Segment
	found := false
	for _, s := range l.segs {
		if s.count > 0 && s.lastTs >= t {
			seg, found = *s, true
			break
		}
	}
	next := l.next
	l.mu.Unlock()
	if !found {
		return next
	}
	if seg.firstTs >= t {
		return seg.first
	}
	// Offsets within a segment are dense: find the first whose message
	// is at or after t. Messages (not the segment's records) may come
	// out of order by a little under concurrent publishers; any boundary
	// found is then within that jitter of t.
	lo, hi := seg.first, seg.next // the answer is in (lo, hi]
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		r, ok := l.readOne(seg, mid)
		if !ok {
			hi = mid
			continue
		}
		if ts, ok := l.timeOf(r.Data); ok && ts >= t {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// LastOffset is the offset of the last message, ok false if the log is empty.
func (l *Log) LastOffset() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.segs) - 1; i >= 0; i-- {
		if l.segs[i].count > 0 {
			return l.segs[i].next - 1, true
		}
	}
	return 0, false
}
