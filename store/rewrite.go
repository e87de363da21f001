package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"
)

// A key rotation (RotateEncryptionKey) rewrites the whole store: every
// live key and value is streamed from the store in dir, opened with the
// old key, into a fresh Badger in dir+".rotating" opened with the new key
// (its own key registry, its own data keys), and the directories are then
// swapped:
//
//  1. build dir.rotating, close it, fsync its files and the parent
//  2. rename dir -> dir.old              (the commit point)
//  3. rename dir.rotating -> dir
//  4. remove dir.old
//
// A crash anywhere leaves one usable store: before step 2, dir is the old
// store untouched and dir.rotating is removed at the next open; from step
// 2 on, the next open (or rotation) completes steps 3 and 4
// (recoverRewrite). Afterwards no file of the store was written with the
// old key or its data keys, so the old key and old key registry read
// nothing of it. The old store's files are unlinked, not overwritten: the
// blocks they held stay on the device until reused.

// Suffixes of the directories beside a store during a rotation.
const (
	rotatingSuffix = ".rotating"
	oldSuffix      = ".old"
)

// ErrStoreInUse: the store is open in another process (or a key rotation
// runs on it).
var ErrStoreInUse = errors.New("store: the store is in use by another process")

// RewriteDir replaces the directory dir, crash-safely, with the one
// build writes into dir+".rotating" (an empty, new path): it fsyncs what
// build wrote and swaps it in as the steps above say. The caller holds
// LockDir(dir) (RotateBadgerKey takes it), and whoever opens dir calls
// RecoverRewrite(dir) first.
func RewriteDir(dir string, build func(tmp string) error, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tmp := dir + rotatingSuffix
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("store: rotate key: remove %s: %w", tmp, err)
	}
	if err := build(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := syncTree(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("store: rotate key: sync %s: %w", tmp, err)
	}
	old := dir + oldSuffix
	if err := os.Rename(dir, old); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("store: rotate key: %w", err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("store: rotate key: sync %s: %w", filepath.Dir(dir), err)
	}
	return recoverRewrite(dir, log)
}

// LockDir takes the lock that an open store and a rotation hold
// (lockStore) on dir, any directory; unlock releases it. ErrStoreInUse if
// another holds it.
func LockDir(dir string) (unlock func(), err error) { return lockStore(dir) }

// RecoverRewrite completes or undoes a RewriteDir of dir that a crash
// interrupted. The caller holds LockDir(dir).
func RecoverRewrite(dir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return recoverRewrite(dir, log)
}

// copyStore streams every live key of the store in src into a new store
// in dst (Badger's StreamDB: sorted tables written directly, values as
// they were).
func copyStore(src, dst string, oldKey, newKey []byte, log *slog.Logger) error {
	return copyStoreWith(src, dst, oldKey, newKey, storeRewriteOptions, log)
}

// copyStoreWith is copyStore of a Badger whose options, but the key and
// logger, are base's.
func copyStoreWith(src, dst string, oldKey, newKey []byte, base func(string) badger.Options, log *slog.Logger) error {
	in := EncryptionOptions(base(src).WithLogger(BadgerLogger{Log: log}), oldKey)
	db, err := badger.OpenManaged(in)
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return fmt.Errorf("%w (rotating in %s)", ErrEncryptionKey, src)
	}
	if err != nil {
		return fmt.Errorf("store: rotate key: open %s: %w", src, err)
	}
	err = db.StreamDB(EncryptionOptions(base(dst).WithLogger(BadgerLogger{Log: log}), newKey))
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: rotate key: rewrite %s into %s: %w", src, dst, err)
	}
	return nil
}

// storeRewriteOptions are the options of both stores of a rotation of the
// message store: its own value threshold and file sizes, so that bodies
// stay in the value log as OpenBadger keeps them.
func storeRewriteOptions(dir string) badger.Options {
	d := DefaultBadgerOptions()
	return badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithNumVersionsToKeep(1).
		WithMemTableSize(d.MemTableSize).
		WithBlockCacheSize(d.BlockCacheSize).
		WithValueLogFileSize(d.ValueLogFileSize).
		WithValueThreshold(d.ValueThreshold)
}

// recoverRewrite completes or undoes a rotation that a crash interrupted
// (see the steps above). The caller holds lockStore(dir).
func recoverRewrite(dir string, log *slog.Logger) error {
	tmp, old := dir+rotatingSuffix, dir+oldSuffix
	parent := filepath.Dir(dir)
	hasDir, hasTmp, hasOld := exists(dir), exists(tmp), exists(old)
	switch {
	case hasOld && !hasDir && hasTmp: // committed, not yet in place
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("store: finish key rotation: %w", err)
		}
		if err := syncDir(parent); err != nil {
			return fmt.Errorf("store: finish key rotation: %w", err)
		}
		log.Info("store: finished an interrupted key rotation", "dir", dir)
		fallthrough
	case hasOld && exists(dir):
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("store: remove the store from before the key rotation: %w", err)
		}
		return syncDir(parent)
	case hasOld || (hasTmp && !hasDir):
		return fmt.Errorf("store: %s is missing but a key rotation left %s or %s; move the one that opens with your key to %s by hand", dir, old, tmp, dir)
	case hasTmp: // not committed: the store in dir is the old one, whole
		log.Info("store: removing an interrupted key rotation's partial copy", "dir", tmp)
		if err := os.RemoveAll(tmp); err != nil {
			return fmt.Errorf("store: remove %s: %w", tmp, err)
		}
		return syncDir(parent)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// syncTree fsyncs every file under dir, and the directories.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return syncDir(p) // a file or a directory alike
	})
}

// syncDir fsyncs a directory (or a file).
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
