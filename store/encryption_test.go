package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// filesContain reports whether any file under dir contains needle.
func filesContain(t *testing.T, dir string, needle []byte) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(data, needle) {
			found = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func writeSecret(t *testing.T, dir string, key []byte, secret []byte) {
	t.Helper()
	b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	b.AppendMessage(1, 1, secret, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.PutMeta("meta/secret", secret); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func readSecret(t *testing.T, dir string, key []byte) []byte {
	t.Helper()
	b, err := OpenBadger(dir, BadgerOptions{EncryptionKey: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got []byte
	if err := b.LoadMessages(1, func(seq uint64, data []byte) error {
		got = append([]byte(nil), data...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestEncryptionAtRest(t *testing.T) {
	secret := []byte("TRIDENT-PLAINTEXT-CANARY-4f1c9a")
	key := bytes.Repeat([]byte{7}, 32)

	plain := t.TempDir()
	writeSecret(t, plain, nil, secret)
	if !filesContain(t, plain, secret) {
		t.Fatal("without encryption the body should be on disk in plain text (test is blind)")
	}

	enc := t.TempDir()
	writeSecret(t, enc, key, secret)
	if filesContain(t, enc, secret) {
		t.Fatal("with encryption the plain text body is on disk")
	}
	if got := readSecret(t, enc, key); !bytes.Equal(got, secret) {
		t.Fatalf("recovered %q", got)
	}

	wrong := bytes.Repeat([]byte{8}, 32)
	if _, err := OpenBadger(enc, BadgerOptions{EncryptionKey: wrong}, nil); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("wrong key: err = %v, want ErrEncryptionKey", err)
	}
	if _, err := OpenBadger(enc, BadgerOptions{}, nil); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("no key: err = %v, want ErrEncryptionKey", err)
	}

	// Rotation: the old key no longer opens it, the new one does.
	newKey := bytes.Repeat([]byte{9}, 16)
	if err := RotateEncryptionKey(enc, wrong, newKey, nil); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("rotate with a wrong old key: %v", err)
	}
	if err := RotateEncryptionKey(enc, key, newKey, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBadger(enc, BadgerOptions{EncryptionKey: key}, nil); !errors.Is(err, ErrEncryptionKey) {
		t.Fatalf("old key after rotation: %v", err)
	}
	if got := readSecret(t, enc, newKey); !bytes.Equal(got, secret) {
		t.Fatalf("after rotation recovered %q", got)
	}
}

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	raw := bytes.Repeat([]byte{0xab}, 32)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if k, err := ReadKeyFile(write("raw", raw)); err != nil || !bytes.Equal(k, raw) {
		t.Fatalf("raw: %x %v", k, err)
	}
	if k, err := ReadKeyFile(write("hex", []byte(hex.EncodeToString(raw)+"\n"))); err != nil || !bytes.Equal(k, raw) {
		t.Fatalf("hex: %x %v", k, err)
	}
	if _, err := ReadKeyFile(write("short", []byte("short"))); !errors.Is(err, ErrBadKeyFile) {
		t.Fatalf("short: %v", err)
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}
