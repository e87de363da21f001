package store

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// LoadMessages implements Store. fn gets a copy of data it may keep; an
// error from fn stops the scan and is returned as is. Appends not yet
// durable may or may not be seen; call Sync first to see them all.
func (b *Badger) LoadMessages(qid uint64, fn func(seq uint64, data []byte) error) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	return b.scan(msgQueuePrefix(qid), func(k, v []byte) error {
		return fn(msgKeySeq(k), v)
	})
}

// ReadMessages implements Store: a range read from seq from on, values
// prefetched in small batches, that also sees the appends and deletes
// still queued for the writer. fn gets a copy of data it may keep.
func (b *Badger) ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error {
	return b.read(qid, from, true, 64, func(seq uint64, data []byte, _ int64) bool { return fn(seq, data) })
}

// ReadRecords is ReadMessages for large records read a few at a time (a
// stream's chunk records): no value is read ahead of the one fn gets, so
// a reader that stops after one record reads one.
func (b *Badger) ReadRecords(qid, from uint64, fn func(seq uint64, data []byte) bool) error {
	return b.read(qid, from, true, 0, func(seq uint64, data []byte, _ int64) bool { return fn(seq, data) })
}

// MessageKeys implements Store: keys only, so that a value in the value
// log is never read; size is Badger's estimate of the value's size. It
// sees what is queued for the writer too.
func (b *Badger) MessageKeys(qid, from uint64, fn func(seq uint64, size int64) bool) error {
	return b.read(qid, from, false, 64, func(seq uint64, _ []byte, size int64) bool { return fn(seq, size) })
}

// read merges what Badger holds of qid from seq from on with what is queued
// for the writer. The queued state is taken first: a batch written while
// Badger is read is then seen twice, and the queued copy wins. With
// values, prefetch values are read ahead (0: each when fn gets it).
func (b *Badger) read(qid, from uint64, values bool, prefetch int, fn func(seq uint64, data []byte, size int64) bool) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	pend, dropped, gone := b.pendingFor(qid, from)
	stopped := false
	// emit hands pending ops below seq (all if seq is nil) to fn.
	emit := func(upTo uint64, all bool) {
		for len(pend) > 0 && !stopped && (all || pend[0].seq < upTo) {
			p := pend[0]
			pend = pend[1:]
			if p.data != nil && !fn(p.seq, p.data, int64(len(p.data))) {
				stopped = true
			}
		}
	}
	if !dropped {
		prefix := msgQueuePrefix(qid)
		start := appendMsgKey(nil, qid, from)
		err := b.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: values && prefetch > 0, PrefetchSize: max(prefetch, 1)})
			defer it.Close()
			for it.Seek(start); it.Valid() && !stopped; it.Next() {
				item := it.Item()
				seq := msgKeySeq(item.Key())
				emit(seq, false)
				if stopped {
					return nil
				}
				if len(pend) > 0 && pend[0].seq == seq {
					continue // the queued state replaces it (emitted next round or at the end)
				}
				if inRanges(gone, seq) {
					continue // a queued range delete removes it
				}
				var v []byte
				size := item.ValueSize()
				if values {
					var err error
					if v, err = item.ValueCopy(nil); err != nil {
						return err
					}
					size = int64(len(v))
				}
				if !fn(seq, v, size) {
					stopped = true
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("store: read messages: %w", err)
		}
	}
	emit(0, true)
	return nil
}

func inRanges(rs []seqRange, seq uint64) bool {
	for _, r := range rs {
		if r.has(seq) {
			return true
		}
	}
	return false
}

// errStop carries fn's error out of a Badger View unchanged.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

func (b *Badger) scan(prefix []byte, fn func(k, v []byte) error) error {
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(item.Key(), v); err != nil {
				return errStop{err}
			}
		}
		return nil
	})
	var stop errStop
	if errors.As(err, &stop) {
		return stop.err
	}
	if err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	return nil
}
