package quorum

import (
	"io"
	"math"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM is the replicated state of one quorum queue: its messages in seq
// order, each with its data and return count. Every member of the
// queue's Raft group keeps one; it implements raft.FSM and
// raft.BatchingFSM. Apply, Snapshot and Restore are called by Raft; the
// other methods may be called from any goroutine at any time.
type FSM struct {
	mu   sync.RWMutex
	msgs messages
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// NewFSM returns an empty FSM, to be given to raft.NewRaft.
func NewFSM() *FSM { return &FSM{} }

// Apply applies one committed entry: its ops in order. It returns nil,
// or an error wrapping ErrCorrupt (and changes nothing) if the entry does
// not decode. Entries other than commands are ignored.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applyLocked(l)
}

// ApplyBatch applies several committed entries under one lock.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := make([]any, len(logs))
	for i, l := range logs {
		res[i] = f.applyLocked(l)
	}
	return res
}

func (f *FSM) applyLocked(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	// Two passes over the entry, no op slice kept: check it all, then
	// apply (a bad entry changes nothing).
	if err := walkEntry(l.Data, nil); err != nil {
		return err
	}
	walkEntry(l.Data, f.msgs.apply)
	return nil
}

// Snapshot captures the state: a copy of the live slots (40 bytes a
// message; the message bytes are shared, never modified), taken while
// Raft applies nothing. Persist then streams it while Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{ents: f.msgs.liveSlots()}, nil
}

// Restore replaces the state with a snapshot written by Persist. On error
// (ErrCorrupt for a malformed stream) the state is unchanged.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	ents, err := readSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.msgs.reset(ents)
	f.mu.Unlock()
	return nil
}

// Messages calls fn for each message, in increasing seq order, until fn
// returns false. data must not be modified; it stays valid after fn
// returns. fn is called without any lock held (it may call the FSM), a
// chunk of messages at a time: a message present for the whole walk is
// seen exactly once, one added or removed during it may or may not be.
// A new leader calls raft.Barrier first so that the walk sees every
// committed entry (Watch does that before it reports leadership).
func (f *FSM) Messages(fn func(seq uint64, data []byte, returns uint32) bool) {
	const chunk = 256
	buf := make([]entry, 0, chunk)
	var next uint64
	for {
		f.mu.RLock()
		buf = f.msgs.from(next, chunk, buf[:0])
		f.mu.RUnlock()
		for _, e := range buf {
			if !fn(e.seq, e.data, e.returns) {
				return
			}
		}
		if len(buf) < chunk {
			return
		}
		last := buf[len(buf)-1].seq
		if last == math.MaxUint64 {
			return
		}
		next = last + 1
	}
}

// Len returns the number of messages.
func (f *FSM) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.msgs.live
}

// Bytes returns the total size of the messages' data.
func (f *FSM) Bytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.msgs.bytes
}

// fsmSnapshot is a point-in-time copy of the live slots.
type fsmSnapshot struct{ ents []entry }

// Persist streams the snapshot into sink (see snapshot.go for the format).
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, s.ents); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release drops the copy.
func (s *fsmSnapshot) Release() { s.ents = nil }
