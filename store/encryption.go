package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

var (
	// ErrEncryptionKey: the store was written with another encryption key
	// than the one given (or with one while none was given, or the other
	// way round).
	ErrEncryptionKey = errors.New("store: encryption key does not match the one the store was written with")
	// ErrBadKeyFile: a key file does not hold 16, 24 or 32 bytes, raw or
	// hex-encoded.
	ErrBadKeyFile = errors.New("store: key file must hold a 16, 24 or 32 byte key (AES-128/192/256), raw or hex-encoded")
	// ErrNotEncrypted: an encryption key was given for a store written
	// without one. RotateEncryptionKey with an empty old key encrypts it.
	ErrNotEncrypted = errors.New("store: the store was written without encryption")
)

// defaultEncryptedIndexCache is BadgerOptions.IndexCacheSize when
// encryption is on and none is given: Badger decrypts table indices into
// this cache instead of keeping them all in memory.
const defaultEncryptedIndexCache = 32 << 20

// ReadKeyFile reads an encryption key from path: 16, 24 or 32 raw bytes,
// or the same as hex (32, 48 or 64 hex digits, surrounding white space
// ignored). Make one with: head -c 32 /dev/urandom | xxd -p -c 64 > key
func ReadKeyFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store: key file: %w", err)
	}
	if t := bytes.TrimSpace(data); len(t) == 32 || len(t) == 48 || len(t) == 64 {
		if k, err := hex.DecodeString(string(t)); err == nil {
			return k, nil
		}
	}
	switch len(data) {
	case 16, 24, 32:
		return data, nil
	}
	return nil, fmt.Errorf("%w: %s has %d bytes", ErrBadKeyFile, path, len(data))
}

func validKey(k []byte) bool {
	switch len(k) {
	case 0, 16, 24, 32:
		return true
	}
	return false
}

// RotateEncryptionKey rewrites the closed store in dir, encrypted with
// oldKey, into a fresh store encrypted with newKey and swaps it in
// (rewrite.go): the new store has its own key registry and data keys, so
// neither the old key nor a copy of the old key registry reads anything of
// it. An empty oldKey encrypts a store written without encryption; an
// empty newKey decrypts one. It takes as long as reading and writing the
// whole store, and needs room for a second copy of it. A rotation that a
// crash interrupted is completed or undone first; a store already
// encrypted with newKey is left as it is. The store must not be open
// (ErrStoreInUse).
func RotateEncryptionKey(dir string, oldKey, newKey []byte, log *slog.Logger) error {
	return RotateBadgerKey(dir, oldKey, newKey, storeRewriteOptions, log)
}

// RotateBadgerKey is RotateEncryptionKey for any Badger directory whose
// opener holds LockDir(dir) and calls RecoverRewrite(dir) before it opens
// it (the cluster's Raft store does): base(dir) gives the options, but
// the key and the logger, that its stores are written with.
func RotateBadgerKey(dir string, oldKey, newKey []byte, base func(dir string) badger.Options, log *slog.Logger) error {
	if !validKey(oldKey) || !validKey(newKey) {
		return ErrBadKeyFile
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	unlock, err := lockStore(dir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := recoverRewrite(dir, log); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, badger.KeyRegistryFileName)); err != nil {
		return fmt.Errorf("store: rotate key: no store in %s: %w", dir, err)
	}
	ok, err := keyOpens(dir, oldKey)
	if err != nil {
		return err
	}
	if !ok {
		if done, err := keyOpens(dir, newKey); err == nil && done {
			log.Info("store: already encrypted with the new key", "dir", dir)
			return nil
		}
		return fmt.Errorf("%w (rotating in %s)", ErrEncryptionKey, dir)
	}
	return RewriteDir(dir, func(tmp string) error { return copyStoreWith(dir, tmp, oldKey, newKey, base, log) }, log)
}

// EncryptionOptions returns o encrypted with key (unchanged when key is
// empty): Badger's EncryptionKey, and an index cache (Badger decrypts
// table indices into it) of defaultEncryptedIndexCache unless o has one.
// Every Badger a node opens with the store's key takes its options from
// here.
func EncryptionOptions(o badger.Options, key []byte) badger.Options {
	if len(key) == 0 {
		return o
	}
	o = o.WithEncryptionKey(key)
	if o.IndexCacheSize == 0 {
		o = o.WithIndexCacheSize(defaultEncryptedIndexCache)
	}
	return o
}

// KeyError explains err, from opening the Badger in dir with key (none if
// empty): badger.ErrEncryptionKeyMismatch becomes ErrNotEncrypted when a
// key was given for a store written without one, ErrEncryptionKey
// otherwise. Other errors are returned as they are.
func KeyError(dir string, key []byte, err error) error {
	if !errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return err
	}
	if plain, _ := keyOpens(dir, nil); plain && len(key) > 0 {
		return fmt.Errorf("%w (store in %s)", ErrNotEncrypted, dir)
	}
	return fmt.Errorf("%w (store in %s)", ErrEncryptionKey, dir)
}

// ValidKey reports whether k is a usable encryption key: none, or 16, 24
// or 32 bytes.
func ValidKey(k []byte) bool { return validKey(k) }

// keyOpens reports whether key (none if empty) opens the key registry of
// the store in dir.
func keyOpens(dir string, key []byte) (bool, error) {
	kr, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{
		Dir:                           dir,
		ReadOnly:                      true,
		EncryptionKey:                 key,
		EncryptionKeyRotationDuration: 10 * 24 * time.Hour,
	})
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: open key registry in %s: %w", dir, err)
	}
	_ = kr.Close()
	return true, nil
}
