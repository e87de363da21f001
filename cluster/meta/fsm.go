package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/exchange"
)

// AppliedKey is the local-store key under which the FSM keeps the index
// of the last entry it applied (8 bytes, big endian).
const AppliedKey = "cluster/meta-applied"

// Applier is what the metadata FSM drives: the node's topology. Every
// method is called from Raft's FSM goroutine, one at a time.
type Applier interface {
	// ApplyMeta writes ops to the node's local store and updates memory.
	// It must be idempotent (entries are replayed after a crash between
	// applying and recording the index). It runs while the proposer on
	// the leader waits for its commit: it must not wait for a lock that a
	// proposer holds across Store.PutMeta.
	ApplyMeta(ops []exchange.MetaOp) error
	// ExportMeta calls fn for every replicated record of the local store.
	ExportMeta(fn func(key string, val []byte) error) error
	// RestoreMeta replaces every replicated record with records (the
	// leader installed a snapshot on this node).
	RestoreMeta(records map[string][]byte) error
}

// IndexStore keeps the FSM's applied index: the node's local store.
type IndexStore interface {
	PutMeta(key string, val []byte) error
	LoadMeta(prefix string, fn func(key string, val []byte) error) error
}

// fsm is the metadata group's raft.FSM.
type fsm struct {
	a   Applier
	idx IndexStore
	log *slog.Logger

	mu       sync.Mutex
	applied  uint64       // last entry applied (or skipped as already applied)
	restores atomic.Int64 // snapshots installed, for tests
}

func newFSM(a Applier, idx IndexStore, log *slog.Logger) (*fsm, error) {
	f := &fsm{a: a, idx: idx, log: log}
	err := idx.LoadMeta(AppliedKey, func(key string, val []byte) error {
		if key != AppliedKey {
			return nil
		}
		if len(val) != 8 {
			return fmt.Errorf("meta: %s: %d bytes", AppliedKey, len(val))
		}
		f.applied = binary.BigEndian.Uint64(val)
		return nil
	})
	return f, err
}

// Applied returns the index of the last entry applied.
func (f *fsm) Applied() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

func (f *fsm) setApplied(index uint64) {
	f.mu.Lock()
	f.applied = index
	f.mu.Unlock()
	if err := f.idx.PutMeta(AppliedKey, binary.BigEndian.AppendUint64(nil, index)); err != nil {
		f.log.Error("meta: cannot record the applied index", "index", index, "err", err)
	}
}

// Apply applies one entry unless the local store already has it. Applier
// errors are the node's own (its store failed): they are logged and
// returned as the entry's response, but the entry counts as applied.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Index <= f.Applied() {
		return nil
	}
	ops, err := DecodeOps(l.Data)
	if err == nil {
		err = f.a.ApplyMeta(ops)
	}
	if err != nil {
		f.log.Error("meta: apply", "index", l.Index, "err", err)
	}
	f.setApplied(l.Index)
	return err
}

// Snapshot exports every replicated record now, on the FSM goroutine, so
// the snapshot is exactly the state at the last applied entry.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	b := appendSnapshotHeader(nil, f.Applied())
	err := f.a.ExportMeta(func(key string, val []byte) error {
		b = appendRecord(b, key, val)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: snapshot: %w", err)
	}
	return snapshot(b), nil
}

// Restore replaces the replicated records with the snapshot's. With
// NoSnapshotRestoreOnStart it runs only when the leader sends a snapshot.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		return fmt.Errorf("meta: restore: %w", err)
	}
	index, records, err := decodeSnapshot(buf.Bytes())
	if err != nil {
		return err
	}
	if err := f.a.RestoreMeta(records); err != nil {
		return fmt.Errorf("meta: restore: %w", err)
	}
	f.setApplied(index)
	f.restores.Add(1)
	f.log.Info("meta: restored snapshot", "index", index, "records", len(records))
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}
