package store

import (
	"encoding/binary"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// Range deletes a chunk at a time. DeleteMessages of a range with millions
// of messages (a stream's retention dropping a 500 MB segment) deletes
// millions of keys: done in one write it would hold the writer, and so
// every queue's appends and confirms, for as long. So a range larger than
// rangeChunk keys is deleted rangeChunk keys per batch, beside the other
// records, as drops are (drop.go).
//
// What DeleteMessages promises stays: the range delete is ordered after
// every record issued before it and before every one issued after it, and
// it is durable once a later record is. Its first batch therefore writes a
// tombstone ('r' + qid + from + to) with its first chunk; the batch that
// deletes the last chunk deletes the tombstone. Until then:
//   - the read path treats the range as deleted (pendingFor);
//   - a batch with a record of the queue inside the range (an append, a
//     put, a delete, a drop, an overlapping range) finishes the range
//     first, in one write, so that no record issued after it is deleted
//     by a later chunk; records of the queue outside the range (a stream's
//     appends at its tail) do not;
//   - a restart after a crash finishes every tombstoned range before the
//     store is used (OpenBadger), so a crash never leaves part of a range
//     that a durable later record says is gone;
//   - Close finishes the ranges under way.

// rangeChunk is how many keys one batch deletes of each range under way
// (a variable for tests).
var rangeChunk = dropChunk

// rangeTag starts a range delete's tombstone key.
const rangeTag = 'r'

func rangeMarkKey(qid, from, to uint64) []byte {
	k := make([]byte, 0, 25)
	k = append(k, rangeTag)
	k = binary.BigEndian.AppendUint64(k, qid)
	k = binary.BigEndian.AppendUint64(k, from)
	return binary.BigEndian.AppendUint64(k, to)
}

// rangeJob is a range delete under way (writer goroutine only).
type rangeJob struct {
	qid, from, to uint64
	next, end     []byte // the first key not deleted yet; the key of (qid, to)
	mark          []byte // the tombstone
}

// qidRange is a range under way as the read path sees it (under b.mu).
type qidRange struct{ qid, from, to uint64 }

func newRangeJob(qid, from, to uint64) *rangeJob {
	return &rangeJob{qid: qid, from: from, to: to,
		next: appendMsgKey(nil, qid, from), end: appendMsgKey(nil, qid, to),
		mark: rangeMarkKey(qid, from, to)}
}

// conflicts reports whether a record among ops falls inside j's range.
func (j *rangeJob) conflicts(ops []op) bool {
	for i := range ops {
		o := &ops[i]
		if o.qid != j.qid {
			continue
		}
		switch o.kind {
		case opAppend, opDelete:
			if o.seq >= j.from && o.seq < j.to {
				return true
			}
		case opDrop:
			return true
		case opRange:
			if o.seq < j.to && o.to > j.from {
				return true
			}
		}
	}
	return false
}

// chunk deletes up to rangeChunk keys of j into wb and reports whether
// none is left.
func (j *rangeJob) chunk(db *badger.DB, wb *badger.WriteBatch, deleted *atomic.Uint64) (done bool, err error) {
	j.next, done, err = deleteChunk(db, wb, msgQueuePrefix(j.qid), j.next, j.end, rangeChunk, deleted)
	return done, err
}

// finish deletes the rest of j and its tombstone into wb.
func (j *rangeJob) finish(db *badger.DB, wb *badger.WriteBatch, marked bool, deleted *atomic.Uint64) error {
	for {
		done, err := j.chunk(db, wb, deleted)
		if err != nil {
			return err
		}
		if done {
			if marked {
				return wb.Delete(j.mark)
			}
			return nil
		}
	}
}

// startRange begins the range delete c.ops[i] into wb: all of it now if
// it is small or a later record of c falls inside it, else a first chunk
// and its tombstone, the rest in later batches.
func (b *Badger) startRange(c *batch, i int, wb *badger.WriteBatch) error {
	o := &c.ops[i]
	j := newRangeJob(o.qid, o.seq, o.to)
	if j.conflicts(c.ops[i+1:]) {
		return j.finish(b.db, wb, false, &b.stats.deletes)
	}
	done, err := j.chunk(b.db, wb, &b.stats.deletes)
	if err != nil || done {
		return err
	}
	if err := wb.Set(j.mark, nil); err != nil {
		return err
	}
	b.ranges = append(b.ranges, j)
	b.publishRanges()
	return nil
}

// finishRangesFor finishes, into wb, every range under way that a record
// of ops falls inside.
func (b *Badger) finishRangesFor(ops []op, wb *badger.WriteBatch) error {
	kept := b.ranges[:0]
	for _, j := range b.ranges {
		if !j.conflicts(ops) {
			kept = append(kept, j)
			continue
		}
		if err := j.finish(b.db, wb, true, &b.stats.deletes); err != nil {
			return err
		}
	}
	b.setRanges(kept)
	return nil
}

// rangeChunks deletes a chunk of each range under way into wb.
func (b *Badger) rangeChunks(wb *badger.WriteBatch) error {
	kept := b.ranges[:0]
	for _, j := range b.ranges {
		done, err := j.chunk(b.db, wb, &b.stats.deletes)
		if err != nil {
			return err
		}
		if done {
			if err := wb.Delete(j.mark); err != nil {
				return err
			}
			continue
		}
		kept = append(kept, j)
	}
	b.setRanges(kept)
	return nil
}

func (b *Badger) setRanges(kept []*rangeJob) {
	if len(kept) == len(b.ranges) {
		return
	}
	clear(b.ranges[len(kept):])
	b.ranges = kept
	b.publishRanges()
}

// publishRanges shows the writer's ranges under way to the read path and
// the writer's loop (which goes on while there are some).
func (b *Badger) publishRanges() {
	view := make([]qidRange, len(b.ranges))
	for i, j := range b.ranges {
		view[i] = qidRange{j.qid, j.from, j.to}
	}
	b.mu.Lock()
	b.rangeView = view
	b.mu.Unlock()
}

// finishMarkedRanges completes the range deletes a crash interrupted
// (their tombstones are still there), before the store is used.
func finishMarkedRanges(db *badger.DB) (int, error) {
	var jobs []*rangeJob
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{rangeTag}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != 25 {
				continue
			}
			jobs = append(jobs, newRangeJob(binary.BigEndian.Uint64(k[1:9]),
				binary.BigEndian.Uint64(k[9:17]), binary.BigEndian.Uint64(k[17:25])))
		}
		return nil
	})
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	for _, j := range jobs {
		for {
			wb := db.NewWriteBatch()
			done, err := j.chunk(db, wb, new(atomic.Uint64)) // at open: nothing counts yet
			if err == nil && done {
				err = wb.Delete(j.mark)
			}
			if err == nil {
				err = wb.Flush()
			} else {
				wb.Cancel()
			}
			if err != nil {
				return 0, err
			}
			if done {
				break
			}
		}
	}
	return len(jobs), db.Sync()
}
