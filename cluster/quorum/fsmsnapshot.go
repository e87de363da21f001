package quorum

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// Snapshot writes the state record and captures the state, which Persist
// writes (the state alone). It runs on Raft's FSM goroutine, so nothing is
// applied meanwhile.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.appended = 0
	f.saveLocked()
	return &fsmSnapshot{f: f, s: f.s.clone()}, nil
}

// snapshotSlack is how many bytes of messages the Raft log may hold
// beyond the last snapshot before SnapshotDue says so.
const snapshotSlack = 64 << 20

// SnapshotDue reports that the Raft log holds more than 64 MiB of
// messages appended since the last snapshot: a snapshot (its state alone,
// a few bytes: the messages are in the Store) lets Raft drop them. Raft's
// own trigger counts entries, and entries are batches of up to 1 MiB.
func (f *FSM) SnapshotDue() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.appended > snapshotSlack
}

// Restore replaces the state with a snapshot written by Persist (the
// leader sent one to a member too far behind): the queue's messages in
// the Store are dropped and replaced by the snapshot's. On error
// (ErrCorrupt for a malformed stream) the FSM's state is unchanged but
// the Store may hold part of the snapshot's messages; Raft installs a
// snapshot again before it applies anything more.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf.reset()
	if err := f.st.DropMessages(f.qid); err != nil {
		return fmt.Errorf("quorum: restore: %w", err)
	}
	if err := f.st.DropMessages(HoldQID(f.qid)); err != nil {
		return fmt.Errorf("quorum: restore: %w", err)
	}
	s, err := readSnapshot(rc, func(held bool, key uint64, data []byte) {
		// Puts: the stream may hold messages appended after the
		// snapshot's index, which the entries that follow append again.
		if held {
			f.st.PutMessage(HoldQID(f.qid), key, data, nil)
			return
		}
		f.st.PutMessage(f.qid, key, data, nil)
		if f.wb {
			if f.restored == nil {
				f.restored = new([256]uint64)
			}
			f.restored[key>>56] = max(f.restored[key>>56], key)
		}
	})
	if err != nil {
		return err
	}
	f.s = s
	f.saveLocked()
	if err := f.st.Sync(); err != nil {
		return fmt.Errorf("quorum: restore: %w", err)
	}
	f.log.Info("quorum queue snapshot installed", "queue", f.qid, "index", s.applied, "messages", s.count())
	return nil
}

// fsmSnapshot is the state at a snapshot's index.
type fsmSnapshot struct {
	f *FSM
	s state
}

// Persist makes the state record durable (Raft truncates its log once
// Persist returns) and writes the state alone to sink: the messages are
// in the Store, which is the state. Only when Raft sends the snapshot to
// a member does SnapshotStore.Open stream the messages with it.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	err := s.f.st.Sync()
	if err == nil {
		err = writeStateSnapshot(sink, &s.s)
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// writeFull streams a full snapshot: state s and the queue's messages and
// held messages as the Store holds them now. The Store is read while Raft
// applies later entries, so the stream may lack a message deleted after
// s's index or hold one appended after it: a member that installs it
// then applies those later entries too (appends as puts), and ends with
// the same messages.
func (f *FSM) writeFull(w io.Writer, s *state) error {
	return writeSnapshot(w, s, func(fn func(held bool, key uint64, data []byte) error) error {
		for _, held := range []bool{false, true} {
			qid := f.qid
			if held {
				qid = HoldQID(qid)
			}
			var werr error
			rerr := f.st.ReadMessages(qid, 0, func(k uint64, data []byte) bool {
				werr = fn(held, k, data)
				return werr == nil
			})
			if werr != nil {
				return werr
			}
			if rerr != nil {
				return rerr
			}
		}
		return nil
	})
}

// Release drops the copy.
func (s *fsmSnapshot) Release() { s.s = state{} }
