package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Engine is the lifecycle of one Badger instance, the same for the node's
// message store (Badger) and its Raft log store (cluster/raftstore):
//
//   - opening: the parent directory made, the directory locked against
//     another process (LockDir), a key rotation a crash interrupted
//     completed or undone (RecoverRewrite), Badger opened with the node's
//     logger and encryption (EncryptionOptions; a wrong key explained by
//     KeyError), then the caller's own recovery (EngineOptions.AfterOpen);
//   - running: one goroutine that every GCInterval runs the caller's
//     policy (BeforeGC: compacting to reclaim space) and value-log GC until
//     it finds nothing worth rewriting; one that every TrimInterval drops
//     the value log's and memtables' mapped pages from the process past
//     TrimAbove resident bytes (TrimValueLogs);
//   - closing: both stopped and waited for, Badger closed, the lock
//     released.
//
// It takes no lock of its own; the caller keeps its operations off the DB
// once it calls Close.
type Engine struct {
	DB  *badger.DB
	log *slog.Logger

	unlock func()
	name   string
	stop   chan struct{}
	wg     sync.WaitGroup
}

// EngineOptions are an Engine's options: Badger's (with its directory),
// the encryption key, and the background work.
type EngineOptions struct {
	// Name prefixes errors and log messages ("store", "raftstore").
	Name string
	// Badger are the Badger options, for the directory they name; the
	// engine adds the logger and EncryptionKey.
	Badger        badger.Options
	EncryptionKey []byte
	// AfterOpen, if set, runs on the opened DB before the engine starts;
	// an error closes it and fails the open.
	AfterOpen func(db *badger.DB) error
	// RecoverDirs are more directories whose interrupted rewrite is
	// completed or undone before Badger opens (the Raft snapshots').
	RecoverDirs []string
	// GCInterval is how often value-log GC runs (negative: never) with
	// GCDiscardRatio; BeforeGC, if set, runs before each GC.
	GCInterval     time.Duration
	GCDiscardRatio float64
	BeforeGC       func()
	// TrimInterval is how often the mapped value log's pages are dropped
	// from the process past TrimAbove resident bytes (negative: never).
	TrimInterval time.Duration
	TrimAbove    int64
}

// OpenEngine opens (creating if needed) the Badger instance in
// o.Badger.Dir. log may be nil.
func OpenEngine(o EngineOptions, log *slog.Logger) (_ *Engine, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := o.Badger.Dir
	if !validKey(o.EncryptionKey) {
		return nil, ErrBadKeyFile
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Name, err)
	}
	unlock, err := lockStore(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	for _, d := range append([]string{dir}, o.RecoverDirs...) {
		if err := recoverRewrite(d, log); err != nil {
			return nil, err
		}
	}
	db, err := badger.Open(EncryptionOptions(o.Badger.WithLogger(BadgerLogger{Log: log}), o.EncryptionKey))
	if err != nil {
		return nil, fmt.Errorf("%s: open badger in %s: %w", o.Name, dir, KeyError(dir, o.EncryptionKey, err))
	}
	if o.AfterOpen != nil {
		if err := o.AfterOpen(db); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	e := &Engine{DB: db, log: log, unlock: unlock, name: o.Name, stop: make(chan struct{})}
	e.wg.Add(2)
	go e.every(o.GCInterval, func() {
		if o.BeforeGC != nil {
			o.BeforeGC()
		}
		e.collect(o.GCDiscardRatio)
	})
	go e.every(o.TrimInterval, func() { TrimValueLogs(dir, o.TrimAbove) })
	return e, nil
}

// every calls fn every d until Close; a negative d never.
func (e *Engine) every(d time.Duration, fn func()) {
	defer e.wg.Done()
	if d < 0 {
		<-e.stop
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// collect runs value-log GC until it finds no file worth rewriting (or
// the engine closes).
func (e *Engine) collect(ratio float64) {
	for {
		err := e.DB.RunValueLogGC(ratio)
		if err != nil {
			if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
				e.log.Warn(e.name+": value log GC", "err", err)
			}
			return
		}
		select {
		case <-e.stop:
			return
		default:
		}
	}
}

// flushKey is a key kept only to make DropPrefix flush the memtables.
var flushKey = []byte("z:flush")

// Reclaim flushes the memtables (DropPrefix of flushKey does that; Badger
// holds writes meanwhile) and compacts the tree into one level, so that the
// values of deleted keys count as garbage and value-log GC can give their
// files back: without it they stay until compactions happen to reach their
// keys, which in a tree of keys alone may be never. hold, if not nil, is
// locked around the flush (the caller's writers wait on it rather than on
// Badger).
func (e *Engine) Reclaim(hold sync.Locker) error {
	if hold != nil {
		hold.Lock()
	}
	err := e.DB.Update(func(txn *badger.Txn) error { return txn.Set(flushKey, []byte{}) })
	if err == nil {
		err = e.DB.DropPrefix(flushKey)
	}
	if hold != nil {
		hold.Unlock()
	}
	if err == nil {
		err = e.DB.Flatten(1)
	}
	return err
}

// Close stops the background work, waits for it, closes Badger and
// releases the directory's lock.
func (e *Engine) Close() error {
	close(e.stop)
	e.wg.Wait()
	err := e.DB.Close()
	e.unlock()
	return err
}
