package store

import (
	"bytes"
	"errors"
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
	// are looked at; past TrimAbove bytes the value log's mapped pages are
	// paged out of the process (residency_linux.go; default every 1s past
	// 256 MiB; a negative interval never).
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
		TrimAbove:        256 << 20,
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

// PutMeta implements Store: the record is written and synced before it returns.
func (b *Badger) PutMeta(key string, val []byte) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	k := []byte(metaPrefix + key)
	v := bytes.Clone(val)
	if v == nil {
		v = []byte{}
	}
	b.writes.RLock()
	err := b.db.Update(func(txn *badger.Txn) error { return txn.Set(k, v) })
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: put meta %q: %w", key, err)
	}
	return nil
}

// WriteMetaBatch writes several metadata records in one transaction,
// synced before it returns: keys[i] gets vals[i], or is deleted when
// vals[i] is nil. A crash leaves all of them or none (the core's
// exchange.MetaBatcher: one topology command's records).
func (b *Badger) WriteMetaBatch(keys []string, vals [][]byte) error {
	if len(keys) != len(vals) {
		return fmt.Errorf("store: meta batch of %d keys and %d values", len(keys), len(vals))
	}
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	b.writes.RLock()
	err := b.db.Update(func(txn *badger.Txn) error {
		for i, key := range keys {
			k := []byte(metaPrefix + key)
			var err error
			if vals[i] == nil {
				err = txn.Delete(k)
			} else {
				err = txn.Set(k, bytes.Clone(vals[i]))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: meta batch of %d records: %w", len(keys), err)
	}
	return nil
}

// DeleteMeta implements Store: the delete is synced before it returns.
func (b *Badger) DeleteMeta(key string) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	k := []byte(metaPrefix + key)
	b.writes.RLock()
	err := b.db.Update(func(txn *badger.Txn) error { return txn.Delete(k) })
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: delete meta %q: %w", key, err)
	}
	return nil
}

// DeleteMetaPrefix implements Store: the deletes are synced before it returns.
func (b *Badger) DeleteMetaPrefix(prefix string) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	b.writes.RLock()
	wb := b.db.NewWriteBatch()
	err := deletePrefix(b.db, wb, []byte(metaPrefix+prefix))
	if err == nil {
		err = wb.Flush()
	} else {
		wb.Cancel()
	}
	b.writes.RUnlock()
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("store: delete meta prefix %q: %w", prefix, err)
	}
	return nil
}

// deletePrefix adds a delete of every key with prefix to wb.
func deletePrefix(db *badger.DB, wb *badger.WriteBatch, prefix []byte) error {
	return db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetMeta reads the record of key: a copy, and whether there is one.
func (b *Badger) GetMeta(key string) (val []byte, found bool, err error) {
	if err := b.begin(); err != nil {
		return nil, false, err
	}
	defer b.end()
	err = b.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(metaPrefix + key))
		if err != nil {
			return err
		}
		val, err = item.ValueCopy(nil)
		return err
	})
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("store: get meta %q: %w", key, err)
	}
	return val, true, nil
}

// LoadMeta implements Store. fn gets copies it may keep; an error from fn
// stops the scan and is returned as is.
func (b *Badger) LoadMeta(prefix string, fn func(key string, val []byte) error) error {
	if err := b.begin(); err != nil {
		return err
	}
	defer b.end()
	return b.scan([]byte(metaPrefix+prefix), func(k, v []byte) error {
		return fn(string(k[len(metaPrefix):]), v)
	})
}

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
