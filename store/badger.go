package store

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// BadgerOptions tunes a Badger store. Zero fields take the value of
// DefaultBadgerOptions.
type BadgerOptions struct {
	MemTableSize     int64 // bytes per memtable (default 32 MiB)
	NumMemtables     int   // memtables kept in memory (default 3)
	BlockCacheSize   int64 // block cache bytes (default 16 MiB)
	IndexCacheSize   int64 // index cache bytes; 0 keeps indices in memory
	NumCompactors    int   // compaction goroutines (default 2)
	ValueLogFileSize int64 // value log file size (default 64 MiB: the file being written is never reclaimed)
	// ValueThreshold: values at least this big live in the value log, the
	// LSM tree keeps a pointer (default 256 bytes). Message bodies then
	// stay out of the tree, so a key scan (recovery) reads no bodies and
	// compactions move only keys; value-log GC gives the space back.
	ValueThreshold int64
	GCInterval     time.Duration // value-log GC period (default 30s; negative disables)
	GCDiscardRatio float64       // RunValueLogGC ratio (default 0.5)
	// TrimInterval is how often the process's resident file-backed pages
	// are looked at; past TrimAbove bytes the value log's and memtables'
	// mapped pages are dropped from the process (residency_linux.go;
	// default every 1s past 32 MiB; a negative interval never).
	TrimInterval time.Duration
	TrimAbove    int64
	// MaxPendingBytes is a soft bound on appends and deletes queued for the
	// writer (data bytes plus ~64 bytes per record). AppendMessage and
	// DeleteMessage block while it is exceeded. Default 64 MiB.
	MaxPendingBytes int
	// CommitLinger is how old a batch of appends and deletes gets before
	// the writer writes it, so that a delete soon after its append cancels
	// both (writer.go): it adds up to that much to an append's confirm when
	// nothing deletes it in time (one deleted in time is confirmed at its
	// delete). Default 3 ms; negative writes at once.
	CommitLinger time.Duration
	// EncryptionKey, if set, encrypts everything Badger writes (tables,
	// value log, write-ahead log) with AES; 16, 24 or 32 bytes select
	// AES-128, -192 or -256 (see encryption.go). The key encrypts Badger's
	// data keys, which are rotated every EncryptionKeyRotation (default 10
	// days). IndexCacheSize defaults to 32 MiB when encryption is on.
	EncryptionKey         []byte
	EncryptionKeyRotation time.Duration
}

// DefaultBadgerOptions returns modest settings for a small broker node.
func DefaultBadgerOptions() BadgerOptions {
	return BadgerOptions{
		MemTableSize:     32 << 20,
		NumMemtables:     3,
		BlockCacheSize:   16 << 20,
		NumCompactors:    2,
		ValueLogFileSize: 64 << 20,
		ValueThreshold:   256,
		GCInterval:       30 * time.Second,
		GCDiscardRatio:   0.5,
		TrimInterval:     time.Second,
		TrimAbove:        32 << 20,
		MaxPendingBytes:  64 << 20,
		CommitLinger:     3 * time.Millisecond,
	}
}

func (o BadgerOptions) withDefaults() BadgerOptions {
	d := DefaultBadgerOptions()
	if o.MemTableSize <= 0 {
		o.MemTableSize = d.MemTableSize
	}
	if o.NumMemtables <= 0 {
		o.NumMemtables = d.NumMemtables
	}
	if o.BlockCacheSize <= 0 {
		o.BlockCacheSize = d.BlockCacheSize
	}
	if o.IndexCacheSize < 0 {
		o.IndexCacheSize = 0
	}
	if o.NumCompactors <= 0 {
		o.NumCompactors = d.NumCompactors
	}
	if o.ValueLogFileSize <= 0 {
		o.ValueLogFileSize = d.ValueLogFileSize
	}
	if o.ValueThreshold <= 0 {
		o.ValueThreshold = d.ValueThreshold
	}
	if o.GCInterval == 0 {
		o.GCInterval = d.GCInterval
	}
	if o.TrimInterval == 0 {
		o.TrimInterval = d.TrimInterval
	}
	if o.TrimAbove <= 0 {
		o.TrimAbove = d.TrimAbove
	}
	if o.GCDiscardRatio <= 0 || o.GCDiscardRatio >= 1 {
		o.GCDiscardRatio = d.GCDiscardRatio
	}
	if o.CommitLinger == 0 {
		o.CommitLinger = d.CommitLinger
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = d.MaxPendingBytes
	}
	if len(o.EncryptionKey) > 0 && o.IndexCacheSize == 0 {
		o.IndexCacheSize = defaultEncryptedIndexCache
	}
	if o.EncryptionKeyRotation <= 0 {
		o.EncryptionKeyRotation = 10 * 24 * time.Hour
	}
	return o
}

// Badger is the durable Store on Badger v4. Message appends and deletes are
// group-committed by one writer goroutine (see writer.go); metadata writes
// are synchronous.
//
// Lock order: life before mu. life guards the DB against Close for the
// synchronous methods; mu guards the pending batch.
type Badger struct {
	eng    *Engine                          // the Badger instance's lifecycle: open, GC, close
	rounds atomic.Pointer[func(begin bool)] // OnRounds
	db     *badger.DB
	log    *slog.Logger
	opts   BadgerOptions

	life   sync.RWMutex
	closed bool // under life

	// writes is held for reading by every write to Badger and for writing
	// by reclaim while it flushes the memtables (Badger refuses writes
	// then, and a refused group commit would make the store fail-stop).
	writes sync.RWMutex

	mu     sync.Mutex
	wake   *sync.Cond // writer waits for work
	room   *sync.Cond // producers wait for MaxPendingBytes
	pend   *batch     // being filled by producers
	aged   *batch     // filled before pend, ageing until CommitLinger old (writer.go); nil if none
	agedAt time.Time  // when aged was swapped out of pend
	// lingering: the last batch written says ageing pays (writer.go).
	// The writer's; read and set by it under mu or after it took mu.
	lingering bool
	writing   *batch   // taken by the writer, not yet visible in Badger (the read path looks at it)
	free      []*batch // recycled batches
	stopping  bool     // no more work accepted
	failed    error    // sticky write/sync error
	idle      bool     // writer is waiting on wake
	waiting   int      // producers waiting on room
	// dropping is the number of drops the writer is doing a chunk at a
	// time (drop.go); the writer's own state is in drops.
	dropping int
	drops    []*dropJob // the writer goroutine's
	// rangeView is the range deletes the writer is doing a chunk at a
	// time (rangedel.go); the writer's own state is in ranges.
	rangeView []qidRange
	ranges    []*rangeJob

	notifyMu   sync.Mutex
	notifyCond *sync.Cond
	notifyQ    []*batch // written batches whose callbacks are due
	notifyStop bool

	writerDone chan struct{}
	notifyDone chan struct{}
	// giveBackT runs giveBack once the writer stayed idle giveBackAfter.
	giveBackT *time.Timer

	stats struct {
		appends, deletes, cancelled, batches, syncs atomic.Uint64
	}
}

// OpenBadger opens (creating if needed) a Badger store in dir. log may be
// nil to discard Badger's messages.
func OpenBadger(dir string, opts BadgerOptions, log *slog.Logger) (*Badger, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	b := &Badger{
		log:        log,
		opts:       opts,
		pend:       new(batch),
		writerDone: make(chan struct{}),
		notifyDone: make(chan struct{}),
	}
	eng, err := OpenEngine(EngineOptions{
		Name: "store",
		Badger: badger.DefaultOptions(dir).
			WithSyncWrites(false).
			WithMemTableSize(opts.MemTableSize).
			WithNumMemtables(opts.NumMemtables).
			WithBlockCacheSize(opts.BlockCacheSize).
			WithIndexCacheSize(opts.IndexCacheSize).
			WithNumCompactors(opts.NumCompactors).
			WithValueLogFileSize(opts.ValueLogFileSize).
			WithValueThreshold(opts.ValueThreshold).
			WithDetectConflicts(false).
			WithEncryptionKeyRotationDuration(opts.EncryptionKeyRotation),
		EncryptionKey: opts.EncryptionKey,
		AfterOpen: func(db *badger.DB) error {
			n, err := finishMarkedRanges(db)
			if err != nil {
				return fmt.Errorf("store: finish the range deletes a crash interrupted: %w", err)
			}
			if n > 0 {
				log.Info("store: finished range deletes interrupted by a crash", "ranges", n)
			}
			return nil
		},
		GCInterval:     opts.GCInterval,
		GCDiscardRatio: opts.GCDiscardRatio,
		BeforeGC:       b.reclaimIfIdle(),
		TrimInterval:   opts.TrimInterval,
		TrimAbove:      opts.TrimAbove,
	}, log)
	if err != nil {
		return nil, err
	}
	b.eng, b.db = eng, eng.DB
	b.wake = sync.NewCond(&b.mu)
	b.room = sync.NewCond(&b.mu)
	b.notifyCond = sync.NewCond(&b.notifyMu)
	b.giveBackT = time.AfterFunc(time.Hour, b.giveBack)
	b.giveBackT.Stop()
	go b.runWriter()
	go b.runNotifier()
	return b, nil
}

// Stats returns counters of the group-commit writer.
func (b *Badger) Stats() Stats {
	return Stats{
		Appends:   b.stats.appends.Load(),
		Deletes:   b.stats.deletes.Load(),
		Cancelled: b.stats.cancelled.Load(),
		Batches:   b.stats.batches.Load(),
		Syncs:     b.stats.syncs.Load(),
	}
}

// begin takes the read side of life; it fails once the store is closed.
func (b *Badger) begin() error {
	b.life.RLock()
	if b.closed {
		b.life.RUnlock()
		return ErrClosed
	}
	return nil
}

func (b *Badger) end() { b.life.RUnlock() }

// Close implements Store: it waits for every queued append and delete to
// be durable and its done callback to return, stops the background
// goroutines and closes the database. Later calls return ErrClosed.
func (b *Badger) Close() error {
	b.life.Lock()
	if b.closed {
		b.life.Unlock()
		return ErrClosed
	}
	b.closed = true
	b.life.Unlock()

	if b.giveBackT != nil {
		b.giveBackT.Stop()
	}
	b.mu.Lock()
	b.stopping = true
	b.wake.Signal()
	b.room.Broadcast()
	b.mu.Unlock()
	<-b.writerDone
	b.notifyMu.Lock()
	b.notifyStop = true
	b.notifyCond.Signal()
	b.notifyMu.Unlock()
	<-b.notifyDone

	b.mu.Lock()
	failed := b.failed
	b.mu.Unlock()
	if err := b.eng.Close(); err != nil {
		return fmt.Errorf("store: close badger: %w", err)
	}
	return failed
}

// reclaimAfterDeletes is how many message deletes make an idle store
// compact its tree (see reclaim).
const reclaimAfterDeletes = 10_000

// reclaimIfIdle is the store's policy before each value-log GC (the
// Engine runs it every GCInterval until Close). Value-log GC only rewrites
// files that compactions have found garbage in, and a tree that no longer
// grows is not compacted: so when at least reclaimAfterDeletes messages
// were deleted since the last time and no message was appended or deleted
// during the last interval (the broker is idle, a drained backlog), reclaim
// compacts the tree first.
func (b *Badger) reclaimIfIdle() func() {
	var reclaimedAt, appendsAt, deletesAt uint64
	return func() {
		deletes, appends := b.stats.deletes.Load(), b.stats.appends.Load()
		if deletes-reclaimedAt >= reclaimAfterDeletes && appends == appendsAt && deletes == deletesAt {
			reclaimedAt = deletes
			b.reclaim()
		}
		appendsAt, deletesAt = appends, deletes
	}
}

// reclaim compacts the tree (Engine.Reclaim), holding b.writes around the
// flush: Badger refuses writes while it flushes, and every write waits on
// b.writes meanwhile. It is only run while no messages are being appended.
// The tree holds keys and value pointers only (bodies are in the value
// log), so this is quick.
func (b *Badger) reclaim() {
	if err := b.begin(); err != nil {
		return
	}
	defer b.end()
	start := time.Now()
	if err := b.eng.Reclaim(&b.writes); err != nil {
		b.log.Warn("store: compaction to reclaim space", "err", err)
		return
	}
	b.log.Debug("store: compacted to reclaim space", "took", time.Since(start))
}

// TrimValueLogs pages out the mapped value-log files of the Badger
// instance in dir when the process's resident file-backed memory passes
// above bytes (see trimMapped): for the node's other Badger instances
// (the Raft log's), which map their value logs the same way.
func TrimValueLogs(dir string, above int64) {
	if residentFileBytes() > above {
		trimMapped(dir)
	}
}
