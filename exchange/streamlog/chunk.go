package streamlog

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
)

// Chunk records. A standalone stream's segment written by this release
// (its segment record says "chunks") holds its messages in chunk records:
// one store record for what one run of publishes brought (a stream
// protocol Publish frame, the publishes of one AMQP read), keyed by the
// offset of its first message, holding consecutive offsets. The store then
// does its per-key work (the write batch, the LSM, the iterator) once per
// chunk rather than once per message.
//
// A chunk record (version 3; a message record starts with 1 or 2):
//
//	3, uvarint n, n × (uvarint len, a message record of version 1 or 2)
//
// Its messages have the offsets key, key+1, ..., key+n-1. A chunk never
// crosses a multiple of chunkAlign (in offsets), so the record that holds
// offset o has its key in [o &^ (chunkAlign-1), o]: a reader that starts
// inside a chunk starts its range read there and skips what comes before
// o. Offsets stay dense and per message: everything above the store
// (cursors, named offsets, dedup, filters, retention by segment) sees
// messages as before.
//
// A chunk is written once, whole: its messages are confirmed together
// when it is durable (a crash loses a chunk that was not, whole, and none
// of its messages was confirmed). Appends collect in the log's pending
// chunk (under Log.mu) until the run's Batch flushes (the front end
// is about to wait for input), the chunk is full, or the append came with
// no Batch (written at once, a chunk of one).
//
// Segments of older releases, and every segment of a clustered stream
// (whose members write what their Raft group commits, one message per
// entry), hold one record per message (versions 1 and 2); a reader handles
// both. In a cluster no chunk is written until the stream_chunks feature
// flag is enabled (a node of an older release cannot read one).

const (
	chunkVersion  = 3
	chunkAlign    = 256     // = chunkRecs: the read cache's chunks are whole records
	chunkMaxBytes = 1 << 20 // a chunk is written when it holds this much
)

// ErrBadChunk is a chunk record that does not decode.
var ErrBadChunk = errors.New("exchange: bad stream chunk record")

// eachInChunk calls fn with each message record of a chunk record (i from
// 0) until fn returns false.
func eachInChunk(rec []byte, fn func(i int, data []byte) bool) error {
	if len(rec) == 0 || rec[0] != chunkVersion {
		return ErrBadChunk
	}
	b := rec[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return ErrBadChunk
	}
	b = b[k:]
	for i := 0; uint64(i) < n; i++ {
		ln, k := binary.Uvarint(b)
		if k <= 0 || ln > uint64(len(b)-k) {
			return ErrBadChunk
		}
		data := b[k : k+int(ln) : k+int(ln)]
		b = b[k+int(ln):]
		if !fn(i, data) {
			return nil
		}
	}
	return nil
}

// chunkHead is the room a pending chunk leaves for its record's head.
const chunkHead = 1 + binary.MaxVarintLen64

// chunkRecord is the chunk record of n message records, body holding
// each preceded by its length (uvarint) after chunkHead bytes of room,
// where it puts the head: the record is the end of body.
func chunkRecord(n int, body []byte) []byte {
	var head [chunkHead]byte
	h := binary.AppendUvarint(append(head[:0], chunkVersion), uint64(n))
	start := chunkHead - len(h)
	copy(body[start:], h)
	return body[start:]
}

// chunkCount returns how many messages a record holds: 1 for a message
// record (or a chunk record that does not decode: its reader finds it
// corrupt at its key), else those of a chunk record that decode.
func chunkCount(rec []byte) uint64 {
	n := uint64(0)
	_ = eachInChunk(rec, func(int, []byte) bool { n++; return true })
	return max(n, 1)
}

// pendChunk is the chunk being collected (Log.pend).
type pendChunk struct {
	seg   *Segment
	first uint64
	n     int
	body  []byte // the message records, each preceded by its length
	dones []pendDone
	// batches that will flush the log (Flush) when their run ends.
	batches []Batch
	// holds, once written: AppendMessage's return and its done (release).
	holds atomic.Int32
}

type pendDone struct {
	w    *Writer // a named producer's, to note when durable
	done func(error)
}

// appendChunkLocked adds a message at offset off of segment cur to the
// pending chunk, and writes the chunk when it is full, or at once when
// batch is nil; else batch flushes it (l.mu held).
func (l *Log) appendChunkLocked(cur *Segment, off uint64, data []byte, dw *Writer, done func(error), batch Batch) {
	p := l.pend
	if p != nil && (p.seg != cur || p.first+uint64(p.n) != off) {
		l.FlushLocked()
		p = nil
	}
	if p == nil {
		p = chunkPool.Get().(*pendChunk)
		p.seg, p.first = cur, off
		// Room for the record's head before the body (chunkRecord).
		if want := chunkHead + len(data) + binary.MaxVarintLen64; cap(p.body) < want {
			p.body = make([]byte, 0, max(want, chunkHead+min(64*(len(data)+2), chunkMaxBytes)))
		}
		p.body = p.body[:chunkHead]
		l.pend = p
	}
	p.body = binary.AppendUvarint(p.body, uint64(len(data)))
	p.body = append(p.body, data...)
	p.n++
	if dw != nil || done != nil {
		p.dones = append(p.dones, pendDone{w: dw, done: done})
	}
	if batch == nil || (off+1)%chunkAlign == 0 || len(p.body) >= chunkHead+chunkMaxBytes {
		l.FlushLocked()
		return
	}
	for _, b := range p.batches {
		if b == batch {
			return
		}
	}
	if !batch.Defer(l) {
		l.FlushLocked()
		return
	}
	p.batches = append(p.batches, batch)
}

// Flush writes the pending chunk (a Batch's run ended). It implements
// Flusher.
func (l *Log) Flush() {
	l.mu.Lock()
	l.FlushLocked()
	l.mu.Unlock()
}

// FlushLocked writes the pending chunk, if any, and calls its messages'
// done callbacks once it is durable (l.mu held).
func (l *Log) FlushLocked() {
	p := l.pend
	if p == nil {
		return
	}
	l.pend = nil
	rec := chunkRecord(p.n, p.body)
	end := p.first + uint64(p.n)
	dones := p.dones
	seg, first := p.seg, p.first
	// Its body is the store's copy once AppendMessage returns; its dones
	// are called once the store answers: after both the chunk is reused.
	p.seg, p.n = nil, 0
	p.holds.Store(2)
	l.st.AppendMessage(seg.id, first, rec, func(err error) {
		defer p.release()
		if err == nil {
			for _, d := range dones {
				if d.w != nil {
					l.noteDurable(d.w) // before the watermark passes it
				}
			}
			l.raise(end) // the store calls back in issue order
			if l.onDurable != nil {
				l.onDurable()
			}
		}
		l.FireWaiters(err)
		for _, d := range dones {
			if d.done != nil {
				d.done(err)
			}
		}
	})
	p.release()
}

// chunkPool holds pending chunks to reuse: a stream's publishers fill
// one after another, each of up to chunkMaxBytes.
var chunkPool = sync.Pool{New: func() any { return new(pendChunk) }}

// release drops a hold on a written chunk; the last puts it back in
// chunkPool, unless it grew past what a chunk needs (a run of big
// messages): the collector takes that.
func (p *pendChunk) release() {
	if p.holds.Add(-1) != 0 || cap(p.body) > 2*chunkMaxBytes {
		return
	}
	clear(p.dones)
	clear(p.batches)
	p.dones, p.batches = p.dones[:0], p.batches[:0]
	chunkPool.Put(p)
}

// discardPendLocked fails the pending chunk's messages without writing
// it (the stream was deleted).
func (l *Log) discardPendLocked() []func(error) {
	p := l.pend
	if p == nil {
		return nil
	}
	l.pend = nil
	var out []func(error)
	for _, d := range p.dones {
		if d.done != nil {
			out = append(out, d.done)
		}
	}
	return out
}

// recordReader is a Store that reads large records without reading
// values ahead (store.Badger): a reader of chunk records usually wants
// one or two of them.
type recordReader interface {
	ReadRecords(qid, from uint64, fn func(seq uint64, data []byte) bool) error
}

// scanSeg calls fn with each message of segment s from offset from on
// (below s.next), in offset order, until fn returns false: message
// records as they are, chunk records message by message. A chunk record
// that does not decode is handed to fn whole, at its key (its reader
// finds it corrupt).
func (l *Log) scanSeg(s Segment, from uint64, fn func(off uint64, data []byte) bool) error {
	start := from
	if s.chunked {
		start = max(s.first, from&^(chunkAlign-1))
	}
	read := l.st.ReadMessages
	if rr, ok := l.st.(recordReader); ok && s.chunked {
		read = rr.ReadRecords
	}
	return read(s.id, start, func(key uint64, data []byte) bool {
		if key >= s.next {
			return false
		}
		if len(data) == 0 || data[0] != chunkVersion {
			if key < from {
				return true
			}
			return fn(key, data)
		}
		more, handed := true, false
		err := eachInChunk(data, func(i int, rec []byte) bool {
			off := key + uint64(i)
			if off < from {
				return true
			}
			handed = true
			if off >= s.next || !fn(off, rec) {
				more = false
				return false
			}
			return true
		})
		if err != nil && !handed && key >= from {
			return fn(key, data)
		}
		return more
	})
}
