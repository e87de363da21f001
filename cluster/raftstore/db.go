package raftstore

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/trident-broker/trident/store"
)

// ErrClosed is returned by every call on a DB, or a Store of it, after
// DB.Close.
var ErrClosed = errors.New("raftstore: closed")

// Options tune the Badger instance under a DB.
type Options struct {
	// MemTableSize is Badger's memtable size. Raft logs are truncated by
	// snapshots, so the working set is small.
	MemTableSize int64
	// ValueLogFileSize is the size of one Badger value-log file.
	ValueLogFileSize int64
	// GCInterval is how often value-log GC runs; negative disables it.
	GCInterval time.Duration
	// EncryptionKey, if set (16, 24 or 32 bytes), encrypts everything
	// the DB writes as the node's message store is encrypted
	// (store.EncryptionOptions), and the snapshots of its groups
	// (DB.Snapshots, snapcrypt.go). A DB written with another key, or
	// without one, is refused: store.ErrEncryptionKey,
	// store.ErrNotEncrypted; RotateEncryptionKey rewrites it.
	EncryptionKey []byte
	// SnapshotDir is where the groups' snapshot directories are (empty:
	// none). Open completes or undoes a key rotation of it that a crash
	// interrupted, and refuses snapshots the key does not open.
	SnapshotDir string
}

// DefaultOptions returns the options Open uses for zero fields.
func DefaultOptions() Options {
	return Options{
		MemTableSize:     16 << 20,
		ValueLogFileSize: 256 << 20,
		GCInterval:       time.Minute,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.MemTableSize <= 0 {
		o.MemTableSize = d.MemTableSize
	}
	if o.ValueLogFileSize <= 0 {
		o.ValueLogFileSize = d.ValueLogFileSize
	}
	if o.GCInterval == 0 {
		o.GCInterval = d.GCInterval
	}
	return o
}

// DB is one Badger instance holding the Raft state of every group on a node.
type DB struct {
	eng *store.Engine // the Badger instance's lifecycle: open, GC, close
	db  *badger.DB
	log *slog.Logger
	key []byte // Options.EncryptionKey

	mu     sync.RWMutex // held shared by every operation, exclusively by Close
	closed bool

	// deleted counts log entries deleted (DeleteRange) since the last
	// reclaim.
	deleted atomic.Int64
	// lastWrite is when StoreLogs last wrote (unix nanos): reclaim waits
	// for a quiet moment (see runGC).
	lastWrite atomic.Int64

	// lastReclaim is when runGC's policy last reclaimed (its goroutine's).
	lastReclaim time.Time
}

// trimEvery and trimAbove: how often the value log's mapped pages are
// looked at, and past how many resident file-backed bytes (the process's)
// they are paged out (store.TrimValueLogs): the Raft log of a quorum
// queue's backlog is read once by replication, then only at a restart.
const (
	trimEvery = time.Second
	trimAbove = 256 << 20
)

// Open opens (creating if needed) the Raft DB in dir. log may be nil.
func Open(dir string, opts Options, log *slog.Logger) (*DB, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	if !store.ValidKey(opts.EncryptionKey) {
		return nil, store.ErrBadKeyFile
	}
	d := &DB{log: log, key: opts.EncryptionKey, lastReclaim: time.Now()}
	// The engine takes the lock a key rotation takes
	// (RotateEncryptionKey): neither runs while the other does, and a
	// rotation a crash interrupted, of the DB or of the snapshots, is
	// completed or undone before Badger looks at the directory.
	eo := store.EngineOptions{
		Name: "raftstore",
		Badger: badgerOptions(dir, nil).
			WithMemTableSize(opts.MemTableSize).
			WithValueLogFileSize(opts.ValueLogFileSize),
		EncryptionKey:  opts.EncryptionKey,
		GCInterval:     opts.GCInterval,
		GCDiscardRatio: 0.5,
		BeforeGC:       d.reclaimIfQuiet,
		TrimInterval:   trimEvery,
		TrimAbove:      trimAbove,
	}
	if opts.SnapshotDir != "" {
		eo.RecoverDirs = []string{opts.SnapshotDir}
		eo.AfterOpen = func(*badger.DB) error { return CheckSnapshots(opts.SnapshotDir, opts.EncryptionKey) }
	}
	eng, err := store.OpenEngine(eo, log)
	if err != nil {
		return nil, err
	}
	d.eng, d.db = eng, eng.DB
	return d, nil
}

// badgerOptions are the DB's Badger options (its defaults' sizes), with
// key, if any: Open's, and a key rotation's (RotateEncryptionKey).
func badgerOptions(dir string, key []byte) badger.Options {
	d := DefaultOptions()
	return store.EncryptionOptions(badger.DefaultOptions(dir).
		WithSyncWrites(true). // StoreLogs, Set: durable on return
		WithMemTableSize(d.MemTableSize).
		// Entries (batches of up to 1 MiB) go to the value log, the LSM
		// tree holds their keys: with entries inline, every memtable flush
		// and compaction rebuilt tables of whole batches, and a quorum
		// queue's leader spent hundreds of MiB on table builders.
		WithValueThreshold(1<<10).
		// Raft reads back what it wrote moments ago (replication) or once
		// (restart): a small block cache does.
		WithBlockCacheSize(16<<20).
		WithValueLogFileSize(d.ValueLogFileSize).
		WithNumVersionsToKeep(1).
		WithDetectConflicts(false), key)
}

// Group returns the Store of the named Raft group. Two calls with the same
// name share the same keys; a Store is usable until the DB is closed.
func (d *DB) Group(name string) *Store {
	return &Store{d: d, ks: newKeyspace(name)}
}

// DropGroup deletes every key of the named group, durably. The group's Raft
// instance must have been shut down.
func (d *DB) DropGroup(name string) error {
	return d.Group(name).deletePrefix(newKeyspace(name).group)
}

// Close closes the database. Shut down every Raft instance using it first.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	return d.eng.Close()
}

// enter takes the shared lock; it fails once the DB is closed.
func (d *DB) enter() error {
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (d *DB) leave() { d.mu.RUnlock() }

// reclaimQuiet is how long the log must have gone unwritten for a
// reclaim; reclaimMaxDelay bounds how long one waits under steady writes.
const (
	reclaimQuiet    = 2 * time.Second
	reclaimMaxDelay = 10 * time.Minute
)

// reclaim compacts the tree (store.Engine.Reclaim), so that the values
// of deleted log entries count as garbage and value-log GC can give their
// files back: without it a truncated log's files stay until compactions
// happen to reach its keys, which in a tree of keys alone may be never.
// Badger holds writes while it flushes (a moment: the memtables are small).
func (d *DB) reclaim() {
	if err := d.enter(); err != nil {
		return
	}
	defer d.leave()
	if err := d.eng.Reclaim(nil); err != nil {
		d.log.Warn("raft store: compaction to reclaim space", "err", err)
	}
}

// reclaimIfQuiet is the DB's policy before each value-log GC (the engine
// runs it every GCInterval until Close). Reclaiming holds every group's
// writes for a moment (the flush) and compacts the tree: done once the log
// has been quiet for a little (a drained queue), or every reclaimMaxDelay
// under writes that never pause, not every interval of a fill whose
// snapshots keep truncating the log.
func (d *DB) reclaimIfQuiet() {
	now := time.Now()
	if d.deleted.Load() > 0 && (now.Sub(time.Unix(0, d.lastWrite.Load())) >= reclaimQuiet || now.Sub(d.lastReclaim) >= reclaimMaxDelay) {
		d.deleted.Store(0)
		d.reclaim()
		d.lastReclaim = time.Now()
	}
}
