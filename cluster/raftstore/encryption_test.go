package raftstore

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/store"
)

var (
	keyA = bytes.Repeat([]byte{0xa1}, 32)
	keyB = bytes.Repeat([]byte{0xb2}, 16)
)

// filesContain reports whether a file under dir holds needle.
func filesContain(t *testing.T, dir string, needle []byte) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, needle) {
			found = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// writeEntries opens the DB in dir with key, stores entries holding
// marker in group g, and closes it.
func writeEntries(t *testing.T, dir string, key []byte, marker string) {
	t.Helper()
	d, err := Open(dir, Options{GCInterval: -1, EncryptionKey: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Group("g").StoreLogs([]*raft.Log{mkLog(1, marker), mkLog(2, marker+"-2")}); err != nil {
		t.Fatal(err)
	}
	if err := d.Group("g").Set([]byte("k"), []byte(marker)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// readEntry opens the DB in dir with key and returns entry 1's data.
func readEntry(t *testing.T, dir string, key []byte) string {
	t.Helper()
	d, err := Open(dir, Options{GCInterval: -1, EncryptionKey: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var l raft.Log
	if err := d.Group("g").GetLog(1, &l); err != nil {
		t.Fatal(err)
	}
	return string(l.Data)
}

func TestEncryptedDBRefusesOtherKeys(t *testing.T) {
	const marker = "raftstore-marker-5f0c2e"
	dir := filepath.Join(t.TempDir(), "badger")
	writeEntries(t, dir, keyA, marker)
	if filesContain(t, filepath.Dir(dir), []byte(marker)) {
		t.Fatal("an entry is on disk in plain text")
	}
	for name, key := range map[string][]byte{"no key": nil, "another key": keyB} {
		d, err := Open(dir, Options{GCInterval: -1, EncryptionKey: key}, nil)
		if err == nil {
			d.Close()
			t.Fatalf("%s: opened", name)
		}
		if !errors.Is(err, store.ErrEncryptionKey) {
			t.Fatalf("%s: %v, want store.ErrEncryptionKey", name, err)
		}
	}
	if _, err := Open(dir, Options{EncryptionKey: []byte("short")}, nil); !errors.Is(err, store.ErrBadKeyFile) {
		t.Fatalf("a 5-byte key: %v", err)
	}
	if got := readEntry(t, dir, keyA); got != marker {
		t.Fatalf("entry 1 is %q", got)
	}
}

func TestPlainDBWithKeyIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "badger")
	writeEntries(t, dir, nil, "plain-entry")
	d, err := Open(dir, Options{GCInterval: -1, EncryptionKey: keyA}, nil)
	if err == nil {
		d.Close()
		t.Fatal("a plain DB opened with a key")
	}
	if !errors.Is(err, store.ErrNotEncrypted) {
		t.Fatalf("%v, want store.ErrNotEncrypted", err)
	}
}

// TestDBLockedWhileOpen: a rotation does not run on an open DB.
func TestDBLockedWhileOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "badger")
	d, err := Open(dir, Options{GCInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := RotateEncryptionKey(dir, filepath.Join(filepath.Dir(dir), "snaps"), nil, keyA, nil); !errors.Is(err, store.ErrStoreInUse) {
		t.Fatalf("rotating an open DB: %v", err)
	}
}

func encryptAll(t *testing.T, key, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := newEncWriter(&buf, key)
	if err != nil {
		t.Fatal(err)
	}
	// Uneven writes.
	for p := plain; len(p) > 0; {
		k := min(len(p), 1+len(p)/3)
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decryptAll(key, enc []byte) ([]byte, error) {
	r, err := newDecReader(bytes.NewReader(enc), key)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func TestSnapshotCipherRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, snapTag, snapChunk - 1, snapChunk, snapChunk + 1, 2 * snapChunk, 3*snapChunk + 17} {
		plain := make([]byte, n)
		for i := range plain {
			plain[i] = byte(i * 7)
		}
		enc := encryptAll(t, keyA, plain)
		if got := plainSize(int64(len(enc))); got != int64(n) {
			t.Fatalf("%d bytes: plainSize %d", n, got)
		}
		got, err := decryptAll(keyA, enc)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%d bytes: round trip: %d bytes, %v", n, len(got), err)
		}
		if _, err := decryptAll(keyB, enc); !errors.Is(err, store.ErrEncryptionKey) {
			t.Fatalf("%d bytes: another key: %v", n, err)
		}
		if n > 0 {
			// Cut off at a chunk's end, a byte short, a flipped bit: all
			// refused.
			cut := enc[:len(enc)-1]
			if n > snapChunk {
				cut = enc[:snapHeader+snapChunk+snapTag]
			}
			if _, err := decryptAll(keyA, cut); !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("%d bytes: cut short: %v", n, err)
			}
			flip := bytes.Clone(enc)
			flip[len(flip)-1] ^= 1
			if _, err := decryptAll(keyA, flip); !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("%d bytes: flipped bit: %v", n, err)
			}
		}
	}
	if _, err := decryptAll(keyA, []byte("plain snapshot")); !errors.Is(err, store.ErrNotEncrypted) {
		t.Fatalf("plain text: %v", err)
	}
}

func FuzzSnapshotDecrypt(f *testing.F) {
	w := func(plain []byte) []byte {
		var buf bytes.Buffer
		e, _ := newEncWriter(&buf, keyA)
		_, _ = e.Write(plain)
		_ = e.Close()
		return buf.Bytes()
	}
	for _, seed := range [][]byte{nil, []byte(snapMagic), w(nil), w([]byte("x")), w(bytes.Repeat([]byte("y"), snapChunk+3))} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := newDecReader(bytes.NewReader(b), keyA)
		if err != nil {
			return
		}
		_, _ = io.ReadAll(r)
	})
}

// snapStore is group g's encrypted snapshot store under dir.
func snapStore(t *testing.T, dir string, d *DB) raft.SnapshotStore {
	t.Helper()
	files, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, "g"), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return d.Snapshots(files)
}

func writeSnapshot(t *testing.T, s raft.SnapshotStore, index uint64, data []byte) {
	t.Helper()
	sink, err := s.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

func readSnapshot(t *testing.T, s raft.SnapshotStore) []byte {
	t.Helper()
	list, err := s.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("list: %v, %v", list, err)
	}
	meta, rc, err := s.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Size != int64(len(b)) || list[0].Size != meta.Size {
		t.Fatalf("size %d (listed %d), read %d", meta.Size, list[0].Size, len(b))
	}
	return b
}

// TestEncryptedSnapshotsAndRotation: with a key the snapshots are
// encrypted, a DB opened with another key refuses them, and a rotation
// rewrites the DB and the snapshots (from plain text, then to another
// key) so that only the new key reads them.
func TestEncryptedSnapshotsAndRotation(t *testing.T) {
	const marker = "snapshot-marker-93ab71"
	root := t.TempDir()
	dir, snaps := filepath.Join(root, "badger"), filepath.Join(root, "snapshots")
	data := bytes.Repeat([]byte(marker), 5000) // several chunks

	// Plain: the snapshot is on disk as it is.
	writeEntries(t, dir, nil, marker)
	d, err := Open(dir, Options{GCInterval: -1, SnapshotDir: snaps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeSnapshot(t, snapStore(t, snaps, d), 10, data)
	d.Close()
	if !filesContain(t, snaps, []byte(marker)) || !filesContain(t, dir, []byte(marker)) {
		t.Fatal("plain DB and snapshot do not hold the marker (test is blind)")
	}

	// Plain to keyA.
	if err := RotateEncryptionKey(dir, snaps, nil, keyA, nil); err != nil {
		t.Fatal(err)
	}
	if filesContain(t, root, []byte(marker)) {
		t.Fatal("plain text left after encrypting the DB and snapshots")
	}
	if err := CheckSnapshots(snaps, nil); !errors.Is(err, store.ErrEncryptionKey) {
		t.Fatalf("encrypted snapshots checked without a key: %v", err)
	}
	d, err = Open(dir, Options{GCInterval: -1, EncryptionKey: keyA, SnapshotDir: snaps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readSnapshot(t, snapStore(t, snaps, d)); !bytes.Equal(got, data) {
		t.Fatal("snapshot changed by the rotation")
	}
	writeSnapshot(t, snapStore(t, snaps, d), 20, data[:100])
	d.Close()
	if filesContain(t, root, []byte(marker)) {
		t.Fatal("a snapshot written with a key is on disk in plain text")
	}

	// keyA to keyB; again is a no-op.
	for range 2 {
		if err := RotateEncryptionKey(dir, snaps, keyA, keyB, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckSnapshots(snaps, keyA); !errors.Is(err, store.ErrEncryptionKey) {
		t.Fatalf("old key after rotation: %v", err)
	}
	if _, err := Open(dir, Options{GCInterval: -1, EncryptionKey: keyA, SnapshotDir: snaps}, nil); !errors.Is(err, store.ErrEncryptionKey) {
		t.Fatalf("DB with the old key after rotation: %v", err)
	}
	if got := readEntry(t, dir, keyB); got != marker {
		t.Fatalf("entry 1 after rotation: %q", got)
	}
	d, err = Open(dir, Options{GCInterval: -1, EncryptionKey: keyB, SnapshotDir: snaps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := readSnapshot(t, snapStore(t, snaps, d)); !bytes.Equal(got, data[:100]) {
		t.Fatal("newest snapshot changed by the rotation")
	}
}

// TestPlainSnapshotWithKeyIsRefused: a plain snapshot beside an
// encrypted DB is refused at Open rather than fed to a group.
func TestPlainSnapshotWithKeyIsRefused(t *testing.T) {
	root := t.TempDir()
	dir, snaps := filepath.Join(root, "badger"), filepath.Join(root, "snapshots")
	writeEntries(t, dir, keyA, "x")
	d, err := Open(dir, Options{GCInterval: -1}, nil)
	if err == nil {
		t.Fatal("encrypted DB opened without a key")
	}
	plain, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(snaps, "g"), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	writeSnapshot(t, plain, 5, []byte("plain"))
	d, err = Open(dir, Options{GCInterval: -1, EncryptionKey: keyA, SnapshotDir: snaps}, nil)
	if err == nil {
		d.Close()
		t.Fatal("opened with a plain snapshot")
	}
	if !errors.Is(err, store.ErrNotEncrypted) {
		t.Fatalf("%v, want store.ErrNotEncrypted", err)
	}
}

// TestOpenFinishesInterruptedRotation: a rotation that crashed after its
// commit point (the old DB and snapshots renamed aside, the new ones not
// yet in place) is finished by the next Open.
func TestOpenFinishesInterruptedRotation(t *testing.T) {
	root := t.TempDir()
	dir, snaps := filepath.Join(root, "badger"), filepath.Join(root, "snapshots")
	writeEntries(t, dir, keyA, "rotated-entry")
	d, err := Open(dir, Options{GCInterval: -1, EncryptionKey: keyA, SnapshotDir: snaps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeSnapshot(t, snapStore(t, snaps, d), 3, []byte("snap"))
	d.Close()
	for _, p := range []string{dir, snaps} {
		if err := os.CopyFS(p+".rotating", os.DirFS(p)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p, p+".old"); err != nil {
			t.Fatal(err)
		}
	}
	d, err = Open(dir, Options{GCInterval: -1, EncryptionKey: keyA, SnapshotDir: snaps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readSnapshot(t, snapStore(t, snaps, d)); string(got) != "snap" {
		t.Fatalf("snapshot %q", got)
	}
	d.Close()
	for _, p := range []string{dir, snaps} {
		for _, s := range []string{".old", ".rotating"} {
			if _, err := os.Stat(p + s); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left: %v", p+s, err)
			}
		}
	}
	if got := readEntry(t, dir, keyA); got != "rotated-entry" {
		t.Fatalf("entry %q", got)
	}
}
