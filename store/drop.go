package store

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
)

// Drops a chunk at a time. DropMessages of a queue with millions of
// messages deletes millions of keys: done in one go, it would hold the
// writer (and so every other queue's appends and confirms) for as long.
// So the writer deletes dropChunk keys of a drop per batch, beside the
// other queues' records, and releases the DropMessages caller once the
// last chunk is durable. Order per queue stays as issued: a batch with
// any record of a queue whose drop is under way (a queue id used again,
// as a vhost's retry store is) first finishes that drop, as one write.
// Close finishes the drops under way before it returns, so that no
// message of a dropped queue is left behind for a later one of that id.

// dropChunk is how many keys one batch deletes of each drop.
const dropChunk = 4096

// dropJob is a drop under way (writer goroutine only).
type dropJob struct {
	qid    uint64
	prefix []byte
	next   []byte     // the first key not deleted yet
	wait   chan error // the DropMessages caller's
}

// startDrop begins the drop c.ops[i]: a first chunk now; the rest later
// unless a later record of c is of the same queue (then all of it now).
// The caller's wait moves to the job when it goes on past c.
func (b *Badger) startDrop(c *batch, i int, wb *badger.WriteBatch) error {
	o := &c.ops[i]
	j := &dropJob{qid: o.qid, prefix: msgQueuePrefix(o.qid), wait: o.wait}
	j.next = j.prefix
	if touches(c.ops[i+1:], o.qid) {
		return b.finishDrop(j, wb, nil)
	}
	done, err := b.dropChunk(j, wb)
	if err != nil || done {
		return err
	}
	o.wait = nil // released by the batch that deletes the last chunk
	b.drops = append(b.drops, j)
	b.mu.Lock()
	b.dropping++
	b.mu.Unlock()
	return nil
}

// finishDropsFor finishes, into wb, every drop under way whose queue has
// a record in ops; their callers are released with c.
func (b *Badger) finishDropsFor(c *batch, ops []op, wb *badger.WriteBatch) error {
	kept := b.drops[:0]
	for _, j := range b.drops {
		if !touches(ops, j.qid) {
			kept = append(kept, j)
			continue
		}
		if err := b.finishDrop(j, wb, c); err != nil {
			return err
		}
	}
	b.setDrops(kept)
	return nil
}

// dropChunks deletes a chunk of each drop under way into wb; the callers
// of those that end are released with c.
func (b *Badger) dropChunks(c *batch, wb *badger.WriteBatch) error {
	kept := b.drops[:0]
	for _, j := range b.drops {
		done, err := b.dropChunk(j, wb)
		if err != nil {
			return err
		}
		if done {
			release(c, j)
		} else {
			kept = append(kept, j)
		}
	}
	b.setDrops(kept)
	return nil
}

func (b *Badger) setDrops(kept []*dropJob) {
	clear(b.drops[len(kept):])
	b.drops = kept
	b.mu.Lock()
	b.dropping = len(kept)
	b.mu.Unlock()
}

// finishDrop deletes the rest of j into wb; with c, j's caller is
// released with c (else j's wait is still its op's).
func (b *Badger) finishDrop(j *dropJob, wb *badger.WriteBatch, c *batch) error {
	for {
		done, err := b.dropChunk(j, wb)
		if err != nil {
			return err
		}
		if done {
			if c != nil {
				release(c, j)
			}
			return nil
		}
	}
}

// release has c's callbacks answer j's caller (after c is durable).
func release(c *batch, j *dropJob) {
	if j.wait != nil {
		c.ops = append(c.ops, op{kind: opSync, wait: j.wait})
	}
}

// dropChunk deletes up to dropChunk keys of j from j.next into wb and
// reports whether none is left.
func (b *Badger) dropChunk(j *dropJob, wb *badger.WriteBatch) (done bool, err error) {
	j.next, done, err = deleteChunk(b.db, wb, j.prefix, j.next, nil, dropChunk, &b.stats.deletes)
	return done, err
}

// deleteChunk deletes into wb up to limit keys with prefix from key from
// on, below end (nil: no end). It returns the first key it left, and
// whether there is none.
func deleteChunk(db *badger.DB, wb *badger.WriteBatch, prefix, from, end []byte, limit int, deleted *atomic.Uint64) (next []byte, done bool, err error) {
	n := 0
	// Counted with the other message deletes: they are what makes an
	// idle store reclaim its space (reclaimIfIdle).
	defer func() { deleted.Add(uint64(n)) }()
	next = from
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(from); it.Valid() && (end == nil || bytes.Compare(it.Item().Key(), end) < 0); it.Next() {
			if n == limit {
				next = it.Item().KeyCopy(nil)
				return nil
			}
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				return err
			}
			n++
		}
		done = true
		return nil
	})
	return next, done, err
}

// touches reports whether ops has a record of qid.
func touches(ops []op, qid uint64) bool {
	for i := range ops {
		if ops[i].qid == qid && ops[i].kind != opSync {
			return true
		}
	}
	return false
}

// MaxQueueID returns the largest queue id below `below` that has messages
// on disk (0 if none). A queue id is numbered past the largest a start
// finds, and a queue deleted but not yet dropped (a crash during its
// drop) still has messages: they must not become a new queue's.
func (b *Badger) MaxQueueID(below uint64) (uint64, error) {
	if err := b.begin(); err != nil {
		return 0, err
	}
	defer b.end()
	var id uint64
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Reverse: true})
		defer it.Close()
		it.Seek(msgQueuePrefix(below))
		if it.Valid() {
			if k := it.Item().Key(); len(k) >= 9 && k[0] == msgTag {
				id = binary.BigEndian.Uint64(k[1:9])
			}
		}
		return nil
	})
	return id, err
}
