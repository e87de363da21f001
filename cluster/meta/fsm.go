package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/featureflags"
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
	a     Applier
	idx   IndexStore
	log   *slog.Logger
	flags *featureflags.Set // the enabled feature flags, as applied

	mu       sync.Mutex
	applied  uint64       // last entry applied (or skipped as already applied)
	halted   error        // set: an entry this node cannot read; nothing more is applied
	restores atomic.Int64 // snapshots installed, for tests
}

func newFSM(a Applier, idx IndexStore, flags *featureflags.Set, log *slog.Logger) (*fsm, error) {
	f := &fsm{a: a, idx: idx, log: log, flags: flags}
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
	if err != nil {
		return nil, err
	}
	// The flags enabled before the restart. One this release does not
	// know means a newer release ran on this data: its entries and
	// records may not be readable here.
	err = idx.LoadMeta(featureflags.RecordPrefix, func(key string, _ []byte) error {
		name, ok := featureflags.NameOf(key)
		if !ok {
			return nil
		}
		if _, known := featureflags.Lookup(name); !known {
			return fmt.Errorf("%w: this node's data has feature flag %q enabled, which this release does not know: it was written by a newer release (a downgrade after enabling a flag is not possible)", ErrUnreadable, name)
		}
		flags.Enable(name)
		return nil
	})
	return f, err
}

// Halted returns why the FSM stopped applying entries, nil while it
// applies them.
func (f *fsm) Halted() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.halted
}

// halt stops applying: every later entry is left unapplied (and the
// applied index where it is), so that the node, once upgraded, applies
// them from there.
func (f *fsm) halt(index uint64, err error) error {
	f.mu.Lock()
	first := f.halted == nil
	if first {
		f.halted = err
	}
	f.mu.Unlock()
	if first {
		f.log.Error("meta: this node cannot read the cluster's metadata entries and stops applying them: upgrade it to the release the other members run",
			"index", index, "err", err)
	}
	return err
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
//
// An entry of a format this node does not know (ErrUnreadable: a newer
// release wrote it) halts the FSM instead: it and every later entry stay
// unapplied, so the node never holds a topology that skipped a record.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Index <= f.Applied() {
		return nil
	}
	if err := f.Halted(); err != nil {
		return err
	}
	ops, cmd, err := DecodeEntry(l.Data)
	switch {
	case errors.Is(err, ErrUnreadable):
		return f.halt(l.Index, err)
	case err == nil && cmd != nil:
		if err = f.applyCommand(cmd); errors.Is(err, ErrUnreadable) {
			return f.halt(l.Index, err)
		}
	case err == nil:
		err = f.a.ApplyMeta(ops)
	}
	if err != nil {
		f.log.Error("meta: apply", "index", l.Index, "err", err)
	}
	f.setApplied(l.Index)
	return err
}

// applyCommand applies a typed command entry.
func (f *fsm) applyCommand(c *Command) error {
	switch c.Kind {
	case KindEnableFlag:
		if _, ok := featureflags.Lookup(c.Flag); !ok {
			return fmt.Errorf("%w: the cluster enabled feature flag %q, which this node's release does not know", ErrUnreadable, c.Flag)
		}
		// The record makes the flag survive restarts (the local store)
		// and reach members that install a snapshot.
		err := f.a.ApplyMeta([]exchange.MetaOp{{Key: featureflags.RecordKey(c.Flag), Val: []byte(featureflags.StateEnabled)}})
		f.flags.Enable(c.Flag)
		if err == nil {
			f.log.Info("meta: feature flag enabled", "flag", c.Flag)
		}
		return err
	case KindTopology:
		ta, ok := f.a.(TopologyApplier)
		if !ok {
			return fmt.Errorf("%w: this node applies no topology commands", ErrUnreadable)
		}
		return ta.ApplyTopology(c.Topology)
	case KindUsers:
		ua, ok := f.a.(UsersApplier)
		if !ok {
			return fmt.Errorf("%w: this node applies no users commands", ErrUnreadable)
		}
		return unreadable(ua.ApplyUsers(c.Users))
	case KindParameters:
		pa, ok := f.a.(ParametersApplier)
		if !ok {
			return fmt.Errorf("%w: this node applies no parameter commands", ErrUnreadable)
		}
		return unreadable(pa.ApplyParameters(c.Params))
	}
	return fmt.Errorf("%w: command kind %d", ErrUnreadable, c.Kind)
}

// TopologyApplier is an Applier that applies topology commands
// (KindTopology): the node's, over its core.
type TopologyApplier interface {
	// ApplyTopology applies a committed command: memory and the node's
	// local store. It must be idempotent, as ApplyMeta.
	ApplyTopology(c exchange.TopologyCommand) error
}

// UsersApplier is an Applier that applies users commands (KindUsers):
// the node's, over its user database.
type UsersApplier interface {
	// ApplyUsers applies a committed encoded command: memory and the
	// node's local store. It must be idempotent, as ApplyMeta. An error
	// with an Unreadable() method returning true is a command of a newer
	// format: the FSM halts.
	ApplyUsers(cmd []byte) error
}

// ParametersApplier is an Applier that applies parameter commands
// (KindParameters): the node's, over its shovels and MQTT bridges.
type ParametersApplier interface {
	// ApplyParameters applies a committed encoded command, as ApplyUsers.
	ApplyParameters(cmd []byte) error
}

// unreadable wraps err with ErrUnreadable when it says it is a command of
// a newer format (an Unreadable() method returning true), as the
// packages whose commands ride opaque (auth, shovel) report it.
func unreadable(err error) error {
	var u interface{ Unreadable() bool }
	if errors.As(err, &u) && u.Unreadable() {
		return fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
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
	var enabled []string
	for key := range records {
		if name, ok := featureflags.NameOf(key); ok {
			if _, known := featureflags.Lookup(name); !known {
				return f.halt(index, fmt.Errorf("%w: the snapshot has feature flag %q enabled, which this node's release does not know", ErrUnreadable, name))
			}
			enabled = append(enabled, name)
		}
	}
	if err := f.a.RestoreMeta(records); err != nil {
		return fmt.Errorf("meta: restore: %w", err)
	}
	for _, name := range enabled {
		f.flags.Enable(name)
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
