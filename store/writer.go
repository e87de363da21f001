package store

import (
	"errors"
	"fmt"
	"time"
)

// Group commit. Producers append records to b.pend under b.mu (data copied
// into the batch's arena). The writer goroutine swaps b.pend for an empty
// batch, writes what was not cancelled in one Badger WriteBatch (which
// splits itself on ErrTxnTooBig), issues one db.Sync and hands the batch
// to the notifier goroutine, which calls the done callbacks in issue order
// and releases Sync and DropMessages callers. Callbacks therefore never
// hold up the next write, and a callback that takes a lock held by a
// producer blocked on MaxPendingBytes cannot deadlock the writer.
//
// A delete of a message whose append is still to be written (in b.pend or
// b.aged) cancels it on the spot (cancelLocked): neither reaches Badger.
// And a batch ages before it is written (CommitLinger, 3 ms by default):
// the writer swaps b.pend out as b.aged and writes it once it is that old
// (or at once, if the previous write took longer), so that a consumer's
// ack of a message delivered at once finds its append unwritten: with
// consumers keeping up, most persistent messages are never written, as in
// RabbitMQ's message store. The done callback of a cancelled append does
// not wait for the linger or for its batch's write: it goes to the
// notifier as soon as every op issued before it is durable or cancelled
// (releaseLocked) — in issue order, and never before a delete issued
// earlier is durable. A publisher's confirm of a message acked at once
// thus waits for the ack, not for the disk. What must not wait does not:
// a barrier (Sync, DropMessages, a range delete), drops and range deletes
// under way, producers waiting for room, and Close make the writer take
// what is aged, then pend, at once. And batches age only while that pays:
// while the last batch written had a quarter or more of its appends (at
// least lingerMinAppends of them) cancelled. Otherwise (a publisher
// waiting for each confirm, a queue filling without consumers, a light
// load) the writer writes at once, as without CommitLinger; cancellations
// within a batch then switch ageing back on.

type opKind uint8

const (
	opAppend opKind = iota // write a message
	opDelete               // delete a message
	opDrop                 // delete every message of qid; wait gets the result
	opSync                 // barrier; wait gets the result
	opRange                // delete the messages of qid with seq in [seq, to)
)

// opOverhead is what one record counts toward MaxPendingBytes besides its data.
const opOverhead = 64

type op struct {
	kind     opKind
	skip     bool // an append or delete that met its pair in the batch
	put      bool // an append whose message may be stored already (PutMessage)
	qid, seq uint64
	to       uint64 // opRange: the end of the range (exclusive)
	off, n   int    // data is arena[off:off+n]
	done     func(error)
	wait     chan error
}

type batch struct {
	ops      []op
	arena    []byte
	bytes    int // counted toward MaxPendingBytes
	deletes  int
	barriers int // opSync, opDrop and opRange ops
	appends  int
	// cancelled is how many of its appends a delete cancelled.
	cancelled int
	// idx finds the batch's appends still to be written, by message,
	// for a delete to cancel (cancelLocked); only while the batch is
	// pend or aged.
	idx opIndex
	err error // outcome, set by the writer
	// released is how many ops at the head had their callbacks handed to
	// the notifier early, or were cancelled with nothing to call
	// (releaseLocked). early marks a batch of such callbacks only.
	released int
	early    bool
}

// AppendMessage implements Store. data is copied before it returns. done
// (if not nil) is called exactly once, from the notifier goroutine once the
// record is durable, or with ErrClosed (synchronously) after Close, or with
// the store's write error. It may block while MaxPendingBytes is exceeded.
func (b *Badger) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	b.appendMessage(qid, seq, data, done, false)
}

// PutMessage implements Store: AppendMessage for a message that may be
// stored already (a replicated log's entry applied again after a crash,
// or a snapshot's message that its later entries append once more). A
// delete of it later in the same batch still reaches the disk: only the
// write is cancelled, as the message may be there from before.
func (b *Badger) PutMessage(qid, seq uint64, data []byte, done func(error)) {
	b.appendMessage(qid, seq, data, done, true)
}

func (b *Badger) appendMessage(qid, seq uint64, data []byte, done func(error), put bool) {
	b.mu.Lock()
	if err := b.admitLocked(len(data)); err != nil {
		b.mu.Unlock()
		if done != nil {
			done(err)
		}
		return
	}
	p := b.pend
	off := len(p.arena)
	p.arena = append(p.arena, data...)
	p.idx.put(qid, seq, len(p.ops))
	p.ops = append(p.ops, op{kind: opAppend, qid: qid, seq: seq, off: off, n: len(data), done: done, put: put})
	p.bytes += len(data) + opOverhead
	p.appends++
	b.kickLocked()
	b.mu.Unlock()
}

// DeleteMessage implements Store. The delete is applied after every append
// issued before it; it is durable once a later Sync returns (or a later
// append's done is called). After Close it does nothing.
func (b *Badger) DeleteMessage(qid, seq uint64) {
	b.mu.Lock()
	if b.admitLocked(0) == nil && !b.cancelLocked(qid, seq) {
		p := b.pend
		p.ops = append(p.ops, op{kind: opDelete, qid: qid, seq: seq})
		p.bytes += opOverhead
		p.deletes++
		b.kickLocked()
	}
	b.mu.Unlock()
}

// DeleteMessages implements Store: it deletes every message of qid whose
// seq is in [from, to), after every append and delete issued before it
// and before every one issued after it, in the same write as its batch
// (the drop's prefix delete, bounded). It is not waited for: it is
// durable once a later Sync returns (or a later append's done is called).
// An empty range (to <= from) does nothing; after Close neither.
func (b *Badger) DeleteMessages(qid, from, to uint64) {
	if to <= from {
		return
	}
	b.mu.Lock()
	if b.admitLocked(0) == nil {
		p := b.pend
		p.ops = append(p.ops, op{kind: opRange, qid: qid, seq: from, to: to})
		p.bytes += opOverhead
		p.deletes++
		p.barriers++
		b.kickLocked()
	}
	b.mu.Unlock()
}

// DropMessages implements Store: it deletes every message of qid, after
// every append and delete issued before it, and returns once that is durable.
func (b *Badger) DropMessages(qid uint64) error {
	return b.barrier(opDrop, qid)
}

// Sync implements Store: it returns once every append and delete issued
// before it is durable and their done callbacks have returned.
func (b *Badger) Sync() error {
	return b.barrier(opSync, 0)
}

func (b *Badger) barrier(kind opKind, qid uint64) error {
	ch := make(chan error, 1)
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return ErrClosed
	}
	if b.failed != nil {
		b.mu.Unlock()
		return b.failed
	}
	b.pend.ops = append(b.pend.ops, op{kind: kind, qid: qid, wait: ch})
	b.pend.bytes += opOverhead
	b.pend.barriers++
	b.kickLocked()
	b.mu.Unlock()
	return <-ch
}

// admitLocked waits until the pending batch has room for n more bytes.
func (b *Badger) admitLocked(n int) error {
	for {
		if b.stopping {
			return ErrClosed
		}
		if b.failed != nil {
			return b.failed
		}
		queued := b.pend.bytes
		if b.aged != nil {
			queued += b.aged.bytes
		}
		if queued == 0 || queued+n+opOverhead <= b.opts.MaxPendingBytes {
			return nil
		}
		b.waiting++
		b.room.Wait()
		b.waiting--
	}
}

func (b *Badger) kickLocked() {
	if b.idle {
		b.idle = false
		b.wake.Signal()
	}
}

func (b *Badger) newBatchLocked() *batch {
	if n := len(b.free); n > 0 {
		c := b.free[n-1]
		b.free = b.free[:n-1]
		return c
	}
	return new(batch)
}

// maxFree is how many recycled batches the store keeps: the producers'
// (pend, aged, the one being written, the notifier's) and those of
// released callbacks.
const maxFree = 8

// giveBackAfter: a writer idle this long gives back the batches it keeps
// for reuse and the pending batch's buffers (giveBack). A publish burst
// leaves up to maxFree batches of up to 4 MiB each (~29 MiB after 300,000
// 1 KiB messages in a heap profile) that an idle store would keep for ever.
const giveBackAfter = time.Second

// giveBack drops the recycled batches and an empty pending batch's
// buffers of a writer that stayed idle since giveBackT was set.
func (b *Badger) giveBack() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.idle || len(b.pend.ops) > 0 {
		return
	}
	clear(b.free)
	b.free = b.free[:0]
	if p := b.pend; cap(p.arena) > 64<<10 || cap(p.ops) > 1024 {
		p.arena, p.ops = nil, nil
	}
}

func (b *Badger) recycle(c *batch) {
	if cap(c.ops) > 1<<16 || cap(c.arena) > 4<<20 {
		return // do not keep a burst's memory
	}
	clear(c.ops) // drop callback references
	c.idx.reset()
	c.ops, c.arena = c.ops[:0], c.arena[:0]
	c.bytes, c.deletes, c.barriers, c.appends, c.cancelled, c.released, c.err = 0, 0, 0, 0, 0, 0, nil
	c.early = false
	b.mu.Lock()
	if len(b.free) < maxFree {
		b.free = append(b.free, c)
	}
	b.mu.Unlock()
}

func (b *Badger) runWriter() {
	defer close(b.writerDone)
	var keys []byte
	for {
		b.mu.Lock()
		for len(b.pend.ops) == 0 && b.aged == nil && !b.stopping && b.dropping == 0 && len(b.rangeView) == 0 {
			if !b.idle && b.giveBackT != nil {
				b.giveBackT.Reset(giveBackAfter)
			}
			b.idle = true
			b.wake.Wait()
		}
		b.idle = false
		if len(b.pend.ops) == 0 && b.aged == nil && b.dropping == 0 && len(b.rangeView) == 0 {
			b.mu.Unlock()
			return
		}
		urgent := b.urgentLocked()
		if linger := b.opts.CommitLinger; linger > 0 && b.lingering && !urgent {
			if b.aged == nil {
				b.aged, b.agedAt = b.pend, time.Now()
				b.pend = b.newBatchLocked()
			}
			// The aged batch waits until it is linger old.
			if d := linger - time.Since(b.agedAt); d > 0 {
				b.mu.Unlock()
				time.Sleep(d)
				continue
			}
		}
		var cur *batch
		switch {
		case b.aged == nil:
			cur = b.pend
			b.pend = b.newBatchLocked()
		case len(b.pend.ops) == 0 || !b.lingering:
			cur, b.aged = b.aged, nil
		default:
			cur, b.aged, b.agedAt = b.aged, b.pend, time.Now()
			b.pend = b.newBatchLocked()
		}
		b.writing = cur
		if b.waiting > 0 {
			b.room.Broadcast()
		}
		failed := b.failed
		b.mu.Unlock()

		cur.err = failed
		if failed == nil {
			// Linger while it pays: a quarter of the appends or more
			// cancelled (consumers ack what they get at once; it takes
			// lingerMinAppends to start). A lone publisher waiting for
			// each confirm, or one filling a queue nobody consumes,
			// cancels nothing and is written at once.
			if cur.appends > 0 {
				b.lingering = cur.cancelled*4 >= cur.appends && (b.lingering || cur.appends >= lingerMinAppends)
			}
			b.writes.RLock()
			keys, cur.err = b.write(cur, keys)
			b.writes.RUnlock()
			if cur.err != nil {
				cur.err = fmt.Errorf("store: group commit: %w", cur.err)
				b.log.Error("store: group commit failed; store is now read-only", "err", cur.err)
			}
		}
		// The batch's callbacks go to the notifier, then those of the
		// cancelled appends at the head of what is still to be written
		// (their deletes came before the writer took them), all under
		// mu: a delete releases callbacks itself (cancelLocked) only
		// while no batch is being written, so nothing is handed over out
		// of order.
		b.mu.Lock()
		if cur.err != nil && b.failed == nil {
			b.failed = cur.err
			b.room.Broadcast()
		}
		b.notifyMu.Lock()
		b.notifyQ = append(b.notifyQ, cur)
		b.writing = nil
		b.releaseLocked()
		b.notifyCond.Signal()
		b.notifyMu.Unlock()
		b.mu.Unlock()
	}
}

// cancelLocked cancels the append of message (qid, seq) if it is still
// to be written (in pend or aged): it never reaches the disk, and neither
// does this delete, which the caller then drops — but for a put's, as
// its message may be on disk from before (PutMessage). The append's done
// goes to the notifier as soon as every op issued before it is durable or
// cancelled (releaseLocked), not after the write of its batch: a
// publisher's confirm of a message its consumer acked waits for neither
// the linger nor the disk. An append behind a drop or a range delete of
// its batch is cancelled alike: the message never reaches the disk
// either way.
func (b *Badger) cancelLocked(qid, seq uint64) bool {
	for _, c := range [2]*batch{b.pend, b.aged} {
		if c == nil {
			continue
		}
		i, ok := c.idx.take(qid, seq)
		if !ok {
			continue
		}
		a := &c.ops[i]
		a.skip = true
		c.cancelled++
		b.stats.cancelled.Add(1)
		if i == c.released && b.writing == nil {
			b.notifyMu.Lock()
			b.releaseLocked()
			b.notifyCond.Signal()
			b.notifyMu.Unlock()
		}
		return !a.put
	}
	return false
}

// releaseLocked hands the notifier, after what it has, the done callbacks
// of the cancelled appends at the head of what is still to be written
// (aged, then pend), up to the first op that still is: in issue order, and
// never before a delete issued earlier is durable. Called with mu and
// notifyMu held, while no batch is being written, and not once the store
// failed (a cancelled append is then reported with the failure, by its
// batch).
func (b *Badger) releaseLocked() {
	if b.failed != nil {
		return
	}
	var early *batch
	if n := len(b.notifyQ); n > 0 && b.notifyQ[n-1].early {
		early = b.notifyQ[n-1] // not taken by the notifier yet
	}
	for _, c := range [2]*batch{b.aged, b.pend} {
		if c == nil {
			continue
		}
		for ; c.released < len(c.ops); c.released++ {
			o := &c.ops[c.released]
			if !o.skip {
				return
			}
			if o.done == nil {
				continue
			}
			if early == nil {
				early = b.newBatchLocked()
				early.early = true
				b.notifyQ = append(b.notifyQ, early)
			}
			early.ops = append(early.ops, op{done: o.done})
			o.done = nil
		}
	}
}

// lingerMinAppends is how many appends a batch needs for its
// cancellations to decide whether the next batches age.
const lingerMinAppends = 16

// urgentLocked reports whether the writer must not let batches age: a
// barrier waits, drops or range deletes are under way, producers wait for
// room, or the store closes.
func (b *Badger) urgentLocked() bool {
	return b.stopping || b.waiting > 0 || b.dropping > 0 || len(b.rangeView) > 0 ||
		b.pend.barriers > 0 || (b.aged != nil && b.aged.barriers > 0)
}

// write applies c to Badger and syncs once. keys is a reusable buffer for
// message keys; Badger references them until the WriteBatch is flushed.
func (b *Badger) write(c *batch, keys []byte) ([]byte, error) {
	b.stats.batches.Add(1)
	if need := len(c.ops) * msgKeyLen; cap(keys) < need {
		keys = make([]byte, 0, need)
	}
	keys = keys[:0]
	key := func(o *op) []byte {
		k := len(keys)
		keys = appendMsgKey(keys, o.qid, o.seq)
		return keys[k : k+msgKeyLen : k+msgKeyLen]
	}
	wb := b.db.NewWriteBatch()
	wrote := false
	var deletes uint64
	// Drops under way finish first if this batch touches their queue.
	if len(b.drops) > 0 {
		if err := b.finishDropsFor(c, c.ops, wb); err != nil {
			wb.Cancel()
			return keys, err
		}
		wrote = true
	}
	// Range deletes under way that this batch writes inside finish first.
	if len(b.ranges) > 0 {
		if err := b.finishRangesFor(c.ops, wb); err != nil {
			wb.Cancel()
			return keys, err
		}
		wrote = true
	}
	for i := range c.ops {
		o := &c.ops[i]
		if o.skip {
			continue
		}
		var err error
		switch o.kind {
		case opAppend:
			err = wb.Set(key(o), c.arena[o.off:o.off+o.n:o.off+o.n])
			wrote = true
		case opDelete:
			err = wb.Delete(key(o))
			deletes++
			wrote = true
		case opDrop, opRange:
			// What the batch wrote so far must be in Badger for the
			// scan to find it; what follows comes after the deletes.
			if err = wb.Flush(); err != nil {
				return keys, err
			}
			wb = b.db.NewWriteBatch()
			if o.kind == opDrop {
				err = b.startDrop(c, i, wb)
			} else {
				err = b.startRange(c, i, wb)
			}
			wrote = true
		}
		if err != nil {
			wb.Cancel()
			return keys, err
		}
	}
	// A chunk of each range delete and drop under way goes with this batch.
	if len(b.ranges) > 0 {
		if err := b.rangeChunks(wb); err != nil {
			wb.Cancel()
			return keys, err
		}
		wrote = true
	}
	if len(b.drops) > 0 {
		if err := b.dropChunks(c, wb); err != nil {
			wb.Cancel()
			return keys, err
		}
		wrote = true
	}
	b.stats.deletes.Add(deletes)
	if err := wb.Flush(); err != nil {
		return keys, err
	}
	if !wrote {
		return keys, nil
	}
	b.stats.syncs.Add(1)
	if err := b.db.Sync(); err != nil {
		return keys, errors.Join(errors.New("sync"), err)
	}
	return keys, nil
}
