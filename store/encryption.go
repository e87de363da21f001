package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
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

// RotateEncryptionKey re-encrypts the key registry of the closed Badger
// store in dir, which holds the data keys, from oldKey to newKey, as
// Badger's "badger rotate" does. The data itself is encrypted with the data
// keys and is not rewritten, so rotation is quick. An empty oldKey turns
// encryption on for a store written without it: data written from then on
// is encrypted, older tables and value-log files stay plain until
// compaction and value-log GC rewrite them. An empty newKey turns it off
// likewise. The store must not be open.
func RotateEncryptionKey(dir string, oldKey, newKey []byte) error {
	if !validKey(oldKey) || !validKey(newKey) {
		return ErrBadKeyFile
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("store: rotate key: %w", err)
	}
	opt := badger.KeyRegistryOptions{
		Dir:                           dir,
		ReadOnly:                      true,
		EncryptionKey:                 oldKey,
		EncryptionKeyRotationDuration: 10 * 24 * time.Hour,
	}
	kr, err := badger.OpenKeyRegistry(opt)
	if err != nil {
		if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
			return fmt.Errorf("%w (rotating in %s)", ErrEncryptionKey, dir)
		}
		return fmt.Errorf("store: rotate key: open key registry: %w", err)
	}
	defer kr.Close()
	opt.EncryptionKey = newKey
	if err := badger.WriteKeyRegistry(kr, opt); err != nil {
		return fmt.Errorf("store: rotate key: write key registry: %w", err)
	}
	return nil
}
