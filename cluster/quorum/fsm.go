package quorum

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Store is where an FSM keeps its queue's message bodies and its state
// record: the node's message store (store.Badger), shared with the classic
// queues. Appends and deletes of one Store are applied in the order they
// are issued, and reads see those still queued.
type Store interface {
	AppendMessage(qid, seq uint64, data []byte, done func(error))
	// PutMessage is AppendMessage for a message that may be stored
	// already; a later delete of it must reach the disk (exchange.Store).
	PutMessage(qid, seq uint64, data []byte, done func(error))
	DeleteMessage(qid, seq uint64)
	// DeleteMessages deletes the messages of qid with seq in [from, to),
	// ordered with the appends and deletes around it like DeleteMessage.
	DeleteMessages(qid, from, to uint64)
	ReadMessages(qid, from uint64, fn func(seq uint64, data []byte) bool) error
	DropMessages(qid uint64) error
	Sync() error
}

// StateQID is the store "queue" of the FSMs' state records: the record of
// queue qid is its message qid. No queue has this id (the core's ids are
// below 1<<62).
const StateQID = math.MaxUint64

// HoldQID is the store "queue" of queue qid's held messages (opHold): bit
// 62 set, which no queue id (below 1<<62) has.
func HoldQID(qid uint64) uint64 { return qid | 1<<62 }

// saveEvery is how often (at most) an FSM writes its state record while it
// applies entries; Snapshot writes one too. Entries applied after the last
// record are applied again after a crash (see FSM).
const saveEvery = 100 * time.Millisecond

// saveEveryBehind is saveEvery with write-behind. A record does not flush
// the buffer: it says which entries' ops all reached the Store (state.stored)
// and a restart applies the ops of the later ones to the Store again. So
// that this stays a bounded span of the log, a record first writes out what
// has been buffered for behindAge (a backlog nobody consumes).
const (
	saveEveryBehind = time.Second
	behindAge       = 5 * time.Second
)

// FSM is the replicated state of one quorum queue on one member of its
// Raft group: the queue's messages, in the node's Store under the queue's
// id and the core's keys, and in memory only counts per key group, the
// return counts of returned messages and the index of the last entry
// applied. It implements raft.FSM and raft.BatchingFSM.
//
// The Store is the state, so the group runs with NoSnapshotRestoreOnStart:
// at start the FSM reads its state record, and Raft replays the entries
// after the last snapshot, of which the FSM skips those at or below the
// record's index (with write-behind, those past its stored index have
// their ops applied to the Store again, not to the counts: behind.go). The record is written after the ops it covers, through
// the same ordered Store, so a crash leaves the Store with the record's
// ops and perhaps some later ones: applying those again is harmless
// (appends put the same data, deletes delete again, counts start from the
// record's). Appends are Store puts: a replayed append and the delete
// after it may meet in one write batch, and must not cancel each other
// away while the message is on disk from before the crash.
type FSM struct {
	st  Store
	qid uint64
	log *slog.Logger

	mu       sync.RWMutex
	s        state
	lastSave time.Time
	// lastApply is when write-behind last applied a batch (idleFlush).
	lastApply time.Time
	dirty     bool // applied past the last state record

	// Write-behind (behind.go), when on: appends not yet in the Store,
	// and who learns what is.
	wb      bool
	wbAfter uint64 // entries up to this index are written through
	cur     uint64 // the index of the entry being applied
	// restored is, per key group, the largest key a snapshot installed
	// here held (nil if none was): the entries after it may append those
	// messages again, and they are in the Store already.
	restored *[256]uint64
	buf      behind
	onStored func(key uint64)
	reported uint64 // the last key given to onStored
	// idle flushes the buffer once the queue has applied nothing for
	// saveEveryBehind (an idle queue's backlog must become pageable);
	// armed while anything is buffered; stopped by Close and Drop.
	idle    *time.Timer
	armed   bool
	stopped bool
	// marks are the applied index at each record of the last behindAge
	// (oldest first): what a record writes out.
	marks []mark
	// replay is set while applying an entry again at start that is past
	// state.stored but not past state.applied: its ops reach the Store,
	// the counts have them already.
	replay bool
}

// mark is the applied index at a time.
type mark struct {
	at  time.Time
	idx uint64
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// NewFSM returns queue qid's FSM over st, with the state its last record
// holds (empty if there is none), to be given to raft.NewRaft.
func NewFSM(st Store, qid uint64, log *slog.Logger) (*FSM, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &FSM{st: st, qid: qid, log: log, lastSave: time.Now()}
	var rec []byte
	err := st.ReadMessages(StateQID, qid, func(k uint64, data []byte) bool {
		if k == qid {
			rec = append([]byte(nil), data...)
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("quorum: reading the state of queue %d: %w", qid, err)
	}
	if rec != nil {
		if f.s, err = decodeState(rec); err != nil {
			return nil, fmt.Errorf("quorum: the state record of queue %d: %w", qid, err)
		}
	}
	return f, nil
}

// Apply applies one committed entry: its ops in order. It returns nil,
// or an error wrapping ErrCorrupt (and changes nothing) if the entry does
// not decode. Entries other than commands are ignored.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	r := f.applyLocked(l)
	f.maybeSaveLocked()
	f.armLocked()
	report := f.storedLocked()
	f.mu.Unlock()
	report()
	return r
}

// ApplyBatch applies several committed entries under one lock.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	f.mu.Lock()
	res := make([]any, len(logs))
	for i, l := range logs {
		res[i] = f.applyLocked(l)
	}
	f.maybeSaveLocked()
	f.armLocked()
	report := f.storedLocked()
	f.mu.Unlock()
	report()
	return res
}

// EnableWriteBehind turns write-behind on (behind.go): for a queue whose
// messages are read from the Store only by its leader, through pages that
// respect OnStored. Not for a stream, whose readers read the Store of any
// member. Call it before the FSM applies anything; entries are written
// through until WriteBehindAfter says from where they may be buffered.
func (f *FSM) EnableWriteBehind() {
	f.mu.Lock()
	f.wb, f.wbAfter = true, math.MaxUint64
	f.mu.Unlock()
}

// WriteBehindAfter lets the appends of entries after index be buffered:
// index is the Raft log's last index when the member started. An entry up
// to it may have been applied before a crash and its messages written to
// the Store then; applied again, its appends are written through, so that
// their deletes reach the Store too. Every entry after it is new to this
// Store (the log holds every entry the FSM ever applied, durably).
func (f *FSM) WriteBehindAfter(index uint64) {
	f.mu.Lock()
	f.wbAfter = index
	f.mu.Unlock()
}

// OnStored sets fn (nil for none) to be told, after entries are applied
// and without the FSM's lock, the key of the newest append such that it
// and every append applied before it are in the Store or deleted: what the
// leader's queue may page out. With write-behind off that is every append
// applied, and fn is not called.
func (f *FSM) OnStored(fn func(key uint64)) {
	f.mu.Lock()
	f.onStored, f.reported = fn, 0
	f.mu.Unlock()
}

// Flush issues every buffered append to the Store (write-behind), so that
// reads of the Store see all the FSM's messages, and reports it.
func (f *FSM) Flush() {
	f.mu.Lock()
	f.flushLocked(true)
	report := f.storedLocked()
	f.mu.Unlock()
	report()
}

// armLocked arms the idle flush if something is buffered.
func (f *FSM) armLocked() {
	if !f.wb || f.armed || f.stopped || f.buf.len() == 0 {
		return
	}
	f.armed = true
	if f.idle == nil {
		f.idle = time.AfterFunc(saveEveryBehind, f.idleFlush)
	} else {
		f.idle.Reset(saveEveryBehind)
	}
}

// idleFlush runs on the timer's goroutine, not Raft's: once the queue has
// applied nothing for saveEveryBehind, it saves a record (the buffer
// flushed first) and reports the stored watermark. A queue still applying
// keeps its buffer (records do not flush it): the timer waits again.
func (f *FSM) idleFlush() {
	f.mu.Lock()
	f.armed = false
	if f.stopped || f.buf.len() == 0 {
		f.mu.Unlock()
		return
	}
	if quiet := time.Since(f.lastApply); quiet < saveEveryBehind {
		f.armed = true
		f.idle.Reset(saveEveryBehind - quiet)
		f.mu.Unlock()
		return
	}
	f.saveLocked()
	report := f.storedLocked()
	f.mu.Unlock()
	report()
}

// Close stops the FSM once Raft no longer applies to it (its member
// stopped, not dropped): what is buffered goes to the Store, under a
// state record, so that a restart applies less again.
func (f *FSM) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopLocked()
	if f.dirty || f.buf.len() > 0 {
		f.saveLocked()
	}
}

func (f *FSM) stopLocked() {
	f.stopped = true
	if f.idle != nil {
		f.idle.Stop()
	}
}

func (f *FSM) flushLocked(all bool) {
	if f.wb && (all || f.buf.over()) {
		f.buf.flush(f.st, f.qid, all)
	}
}

// storedLocked returns the call that reports a risen stored watermark, or
// a no-op.
func (f *FSM) storedLocked() func() {
	fn, k := f.onStored, f.buf.done
	if !f.wb || fn == nil || k == f.reported {
		return func() {}
	}
	f.reported = k
	return func() { fn(k) }
}

func (f *FSM) applyLocked(l *raft.Log) any {
	if l.Index <= f.s.applied {
		// Replayed at start: counted already; in the Store already up
		// to stored, after it perhaps not (write-behind).
		if f.wb && l.Index > f.s.stored && l.Type == raft.LogCommand && walkEntry(l.Data, nil) == nil {
			f.cur, f.replay = l.Index, true
			walkEntry(l.Data, f.applyOp)
			f.replay = false
		}
		return nil
	}
	f.s.applied, f.dirty = l.Index, true
	if l.Type != raft.LogCommand {
		return nil
	}
	// Two passes over the entry: check it all, then apply (a bad entry
	// changes nothing).
	if err := walkEntry(l.Data, nil); err != nil {
		// A corrupt entry, or one of a later build (a newer entry
		// version): this member's state now lags the others'.
		f.log.Error("quorum entry not applied", "queue", f.qid, "index", l.Index, "err", err)
		return err
	}
	f.cur = l.Index
	walkEntry(l.Data, f.applyOp)
	return nil
}

func (f *FSM) applyOp(o op) {
	switch o.kind {
	case opAppend:
		// A put: after a crash the entries past the state record are
		// applied again, and their messages may be on disk already; an
		// append and a delete that met in one store batch would cancel
		// and leave the message there (more messages than counted).
		if f.wb && f.cur > f.wbAfter && (f.restored == nil || o.seq > f.restored[o.seq>>56]) {
			f.buf.add(o.seq, f.cur, o.data)
		} else {
			f.st.PutMessage(f.qid, o.seq, o.data, nil) // copies data
			f.buf.done = o.seq                         // nothing is buffered before it
		}
		if !f.replay {
			f.s.add(o.seq, len(o.data))
		}
	case opDelete:
		// A buffered message never reached the Store.
		if !f.wb || !f.buf.del(o.seq) {
			f.st.DeleteMessage(f.qid, o.seq)
		}
		if !f.replay {
			f.s.del(o.seq)
		}
	case opReturn:
		if !f.replay {
			f.s.ret(o.seq)
		}
	case opHold:
		f.st.PutMessage(HoldQID(f.qid), o.seq, o.data, nil)
		if !f.replay {
			f.s.held++
		}
	case opRelease:
		f.st.DeleteMessage(HoldQID(f.qid), o.seq)
		if !f.replay {
			f.s.held = max(f.s.held-1, 0)
		}
	case opDeleteRange:
		// One range delete: it removes the puts of the range issued
		// before it, replayed ones included, and what the disk holds
		// from before a crash. The counts go down by what the op says
		// the range held (the leader's store when it proposed it): an
		// entry applied again after a crash starts from the record's
		// counts, which still hold the range, while the store may have
		// lost it already, so the store is not what counts.
		if f.wb {
			f.buf.delRange(o.seq, o.to)
		}
		f.st.DeleteMessages(f.qid, o.seq, o.to)
		if !f.replay {
			f.s.delRange(o.seq, o.to, int64(o.count), int64(o.bytes))
		}
	}
}

func (f *FSM) maybeSaveLocked() {
	every := saveEvery
	if f.wb {
		every = saveEveryBehind
	}
	f.flushLocked(false)
	now := time.Now()
	f.lastApply = now
	if f.dirty && now.Sub(f.lastSave) >= every {
		if f.wb {
			f.flushAgedLocked(now)
		}
		f.recordLocked(now)
	}
}

// flushAgedLocked writes out the appends buffered for behindAge or more:
// those of entries up to the index of the newest mark that old.
func (f *FSM) flushAgedLocked(now time.Time) {
	f.marks = append(f.marks, mark{at: now, idx: f.s.applied})
	i := 0
	for i+1 < len(f.marks) && now.Sub(f.marks[i+1].at) >= behindAge {
		i++
	}
	if now.Sub(f.marks[i].at) >= behindAge {
		f.buf.flushThrough(f.st, f.qid, f.marks[i].idx)
		i++
	}
	f.marks = append(f.marks[:0], f.marks[i:]...)
}

// saveLocked issues the state record, after every op applied so far (the
// buffered appends first): what a snapshot, an idle flush and Close write.
func (f *FSM) saveLocked() {
	f.flushLocked(true)
	f.recordLocked(time.Now())
}

// recordLocked issues the state record: the counts as of the last entry
// applied, and the last entry before the oldest buffered append as the
// one up to which the Store has every op.
func (f *FSM) recordLocked(now time.Time) {
	f.s.stored = f.s.applied
	if idx, ok := f.buf.oldest(); ok && f.wb {
		f.s.stored = min(idx-1, f.s.applied)
	}
	f.st.PutMessage(StateQID, f.qid, f.s.encode(nil), nil) // rewritten: a later delete must reach the disk
	f.lastSave, f.dirty = now, false
}

// Groups returns the queue's key groups (counts, sizes, largest keys).
func (f *FSM) Groups() []Group {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]Group(nil), f.s.groups...)
}

// Returns is how many times message key came back (delivered, requeued).
func (f *FSM) Returns(key uint64) uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.returns[key]
}

// Len returns the number of messages.
func (f *FSM) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return int(f.s.count())
}

// Bytes returns the (estimated, see state.del) size of the messages' data.
func (f *FSM) Bytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.bytes()
}

// Held returns the number of held messages (retries waiting).
func (f *FSM) Held() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return int(f.s.held)
}

// Applied returns the index of the last entry applied.
func (f *FSM) Applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.applied
}

// Messages calls fn for each message in key order until fn returns false
// (a read of the Store: for tests and tools, not for the core, which
// reads the Store itself a window at a time).
func (f *FSM) Messages(fn func(key uint64, data []byte, returns uint32) bool) error {
	f.Flush()
	return f.st.ReadMessages(f.qid, 0, func(k uint64, data []byte) bool {
		return fn(k, data, f.Returns(k))
	})
}

// Drop deletes the queue's messages and state record from the Store (the
// queue is deleted, or this node left its group). The FSM must not be
// used after.
func (f *FSM) Drop() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopLocked()
	f.s = state{}
	f.buf.reset()
	f.st.DeleteMessage(StateQID, f.qid)
	if err := f.st.DropMessages(HoldQID(f.qid)); err != nil {
		return err
	}
	return f.st.DropMessages(f.qid)
}
