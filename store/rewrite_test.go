package store

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// dataKeys returns the data keys of the key registry in dir, opened with
// key.
func dataKeys(t *testing.T, dir string, key []byte) [][]byte {
	t.Helper()
	kr, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{Dir: dir, ReadOnly: true,
		EncryptionKey: key, EncryptionKeyRotationDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	var out [][]byte
	for id := uint64(1); ; id++ {
		dk, err := kr.DataKey(id)
		if err != nil || dk == nil {
			return out
		}
		out = append(out, dk.Data)
	}
}

func appendSecret(t *testing.T, dir string, key []byte, seq uint64, secret []byte) {
	t.Helper()
	b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	b.AppendMessage(1, seq, secret, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRotationRewrites: after a rotation the old key with the old key
// registry reads nothing, neither what was written before nor after it.
func TestRotationRewrites(t *testing.T) {
	before, after := []byte("CANARY-BEFORE-ROTATION-61c2"), []byte("CANARY-AFTER-ROTATION-0b7e")
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	dir := filepath.Join(t.TempDir(), "badger")
	writeSecret(t, dir, oldKey, before)
	oldRegistry, err := os.ReadFile(filepath.Join(dir, badger.KeyRegistryFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := RotateEncryptionKey(dir, oldKey, newKey, nil); err != nil {
		t.Fatal(err)
	}
	appendSecret(t, dir, newKey, 2, after)

	// Badger encrypts each table and value-log file with a data key from
	// the registry; the old registry, read with the old key, must hold
	// none of those the rotated store uses (opening the store with them
	// decrypts garbage: Badger panics, test/security_crypto_test.go does
	// it in a child process).
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.MkdirAll(cp, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp, badger.KeyRegistryFileName), oldRegistry, 0o600); err != nil {
		t.Fatal(err)
	}
	oldDKs, newDKs := dataKeys(t, cp, oldKey), dataKeys(t, dir, newKey)
	if len(oldDKs) == 0 || len(newDKs) == 0 {
		t.Fatalf("data keys: %d old, %d new (test is blind)", len(oldDKs), len(newDKs))
	}
	for _, o := range oldDKs {
		for _, n := range newDKs {
			if bytes.Equal(o, n) {
				t.Fatal("the rotated store uses a data key the old key registry holds")
			}
		}
	}
	for _, s := range [][]byte{before, after} {
		if filesContain(t, filepath.Dir(dir), s) {
			t.Fatalf("%s in plain text on disk", s)
		}
	}
	b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: newKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got [][]byte
	if err := b.LoadMessages(1, func(seq uint64, data []byte) error {
		got = append(got, append([]byte(nil), data...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], before) || !bytes.Equal(got[1], after) {
		t.Fatalf("after rotation the store holds %q", got)
	}
	var meta []byte
	if err := b.LoadMeta("meta/", func(key string, val []byte) error {
		meta = append([]byte(nil), val...)
		return nil
	}); err != nil || !bytes.Equal(meta, before) {
		t.Fatalf("meta after rotation: %q %v", meta, err)
	}
}

// TestEncryptPlainStore: a key given for a plain store is refused with
// ErrNotEncrypted; RotateEncryptionKey from no key encrypts it and leaves
// no plain text in any file.
func TestEncryptPlainStore(t *testing.T) {
	secret := []byte("CANARY-PLAIN-BEFORE-ENCRYPTION-93ad")
	key := bytes.Repeat([]byte{5}, 24)
	dir := filepath.Join(t.TempDir(), "badger")
	writeSecret(t, dir, nil, secret)
	if !filesContain(t, filepath.Dir(dir), secret) {
		t.Fatal("plain store without the body on disk (test is blind)")
	}
	if _, err := OpenBadger(dir, BadgerOptions{EncryptionKey: key}, nil); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("key for a plain store: %v, want ErrNotEncrypted", err)
	}
	if err := RotateEncryptionKey(dir, nil, key, nil); err != nil {
		t.Fatal(err)
	}
	if filesContain(t, filepath.Dir(dir), secret) {
		t.Fatal("plain text left after encrypting the store")
	}
	if got := readSecret(t, dir, key); !bytes.Equal(got, secret) {
		t.Fatalf("recovered %q", got)
	}
	if _, err := OpenBadger(dir, BadgerOptions{}, nil); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("no key after encryption: %v", err)
	}
	// Running it again (e.g. after a crash at the end) changes nothing.
	if err := RotateEncryptionKey(dir, nil, key, nil); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if got := readSecret(t, dir, key); !bytes.Equal(got, secret) {
		t.Fatalf("after a second run recovered %q", got)
	}
}

// TestRotationInterrupted: each state a crash can leave between the steps
// of a rotation opens as the old or the new store.
func TestRotationInterrupted(t *testing.T) {
	secret := []byte("CANARY-INTERRUPTED-ROTATION-5e11")
	oldKey, newKey := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	setup := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "badger")
		writeSecret(t, dir, oldKey, secret)
		if err := copyStore(dir, dir+rotatingSuffix, oldKey, newKey, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("copy not committed", func(t *testing.T) {
		dir := setup(t)
		if got := readSecret(t, dir, oldKey); !bytes.Equal(got, secret) {
			t.Fatalf("recovered %q", got)
		}
		if exists(dir + rotatingSuffix) {
			t.Fatal("partial copy left")
		}
	})
	t.Run("committed, not in place", func(t *testing.T) {
		dir := setup(t)
		if err := os.Rename(dir, dir+oldSuffix); err != nil {
			t.Fatal(err)
		}
		if got := readSecret(t, dir, newKey); !bytes.Equal(got, secret) {
			t.Fatalf("recovered %q", got)
		}
		if exists(dir+oldSuffix) || exists(dir+rotatingSuffix) {
			t.Fatal("rotation left directories")
		}
	})
	t.Run("in place, old not removed", func(t *testing.T) {
		dir := setup(t)
		if err := os.Rename(dir, dir+oldSuffix); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir+rotatingSuffix, dir); err != nil {
			t.Fatal(err)
		}
		// The rotation command run again finishes it too.
		if err := RotateEncryptionKey(dir, oldKey, newKey, nil); err != nil {
			t.Fatal(err)
		}
		if exists(dir + oldSuffix) {
			t.Fatal("old store left")
		}
		if got := readSecret(t, dir, newKey); !bytes.Equal(got, secret) {
			t.Fatalf("recovered %q", got)
		}
	})
	t.Run("store in use", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "badger")
		b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: oldKey}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := RotateEncryptionKey(dir, oldKey, newKey, nil); !errors.Is(err, ErrStoreInUse) {
			t.Fatalf("rotation of an open store: %v", err)
		}
	})
}
