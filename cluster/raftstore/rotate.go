package raftstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/trident-broker/trident/store"
)

// The snapshot directories hashicorp/raft's FileSnapshotStore keeps, as
// groups.Host lays them out: SnapshotDir/<group>/snapshots/<snapshot id>/ holding
// meta.json (the snapshot's metadata, its state file's size and CRC-64)
// and state.bin. Directories ending in ".tmp" are snapshots being
// written; files beside the snapshot directories (a quorum queue's
// spools) are not snapshots.
const (
	snapSubdir    = "snapshots"
	snapMetaFile  = "meta.json"
	snapStateFile = "state.bin"
	snapTmpSuffix = ".tmp"
)

// snapshotFiles returns the state files of the snapshots under dir.
func snapshotFiles(dir string) ([]string, error) {
	groups, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: snapshots: %w", err)
	}
	var out []string
	for _, g := range groups {
		if !g.IsDir() {
			continue
		}
		snaps, err := os.ReadDir(filepath.Join(dir, g.Name(), snapSubdir))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("raftstore: snapshots: %w", err)
		}
		for _, s := range snaps {
			if !s.IsDir() || strings.HasSuffix(s.Name(), snapTmpSuffix) {
				continue
			}
			p := filepath.Join(dir, g.Name(), snapSubdir, s.Name(), snapStateFile)
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// fileKeyState reads the header of the state file at p.
func fileKeyState(p string, key []byte) (snapState, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("raftstore: snapshot: %w", err)
	}
	defer f.Close()
	st, _, err := readSnapHeader(f, key)
	if err != nil {
		return 0, fmt.Errorf("raftstore: snapshot %s: %w", p, err)
	}
	return st, nil
}

// CheckSnapshots checks that key (none if empty) reads every snapshot
// under dir: a plain one while key is set is store.ErrNotEncrypted, an
// encrypted one that key does not open (or while none is set) is
// store.ErrEncryptionKey. It reads each state file's header only.
func CheckSnapshots(dir string, key []byte) error {
	files, err := snapshotFiles(dir)
	if err != nil {
		return err
	}
	for _, p := range files {
		st, err := fileKeyState(p, key)
		if err != nil {
			return err
		}
		switch {
		case st == snapOtherKey:
			return fmt.Errorf("raftstore: %w (snapshot %s)", store.ErrEncryptionKey, p)
		case st == snapPlain && len(key) > 0:
			return fmt.Errorf("raftstore: %w (snapshot %s)", store.ErrNotEncrypted, p)
		}
	}
	return nil
}

// RotateEncryptionKey rewrites the closed Raft DB in dir and the
// snapshots under snapDir (Options.SnapshotDir; none if empty), written
// with oldKey (none if empty), with newKey (none if empty), as
// store.RotateEncryptionKey rewrites the message store: each into a fresh
// copy swapped in crash-safely (store.RewriteDir), the DB with its own
// key registry and data keys, each snapshot with its own salt, so that
// neither the old key nor a copy of the old files reads the new ones.
// What newKey already opens is left as it is, so a rotation that failed
// or was interrupted is finished by running it again. The DB must not be
// open (store.ErrStoreInUse).
func RotateEncryptionKey(dir, snapDir string, oldKey, newKey []byte, log *slog.Logger) error {
	if !store.ValidKey(oldKey) || !store.ValidKey(newKey) {
		return store.ErrBadKeyFile
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if snapDir != "" {
		// The DB's lock covers its snapshots: the node holds it while it
		// runs.
		unlock, err := store.LockDir(dir)
		if err != nil {
			return fmt.Errorf("raftstore: %w", err)
		}
		err = rotateSnapshots(snapDir, oldKey, newKey, log)
		unlock()
		if err != nil {
			return err
		}
	}
	base := func(dir string) badger.Options { return badgerOptions(dir, nil) }
	if err := store.RotateBadgerKey(dir, oldKey, newKey, base, log); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	return nil
}

// rotateSnapshots rewrites the snapshots under dir with newKey. The
// caller holds the DB's lock.
func rotateSnapshots(dir string, oldKey, newKey []byte, log *slog.Logger) error {
	if err := store.RecoverRewrite(dir, log); err != nil {
		return fmt.Errorf("raftstore: snapshots: %w", err)
	}
	files, err := snapshotFiles(dir)
	if err != nil {
		return err
	}
	todo := false
	for _, p := range files {
		done, err := rotated(p, oldKey, newKey)
		if err != nil {
			return err
		}
		todo = todo || !done
	}
	if !todo {
		return nil
	}
	err = store.RewriteDir(dir, func(tmp string) error {
		for _, p := range files {
			rel, err := filepath.Rel(dir, filepath.Dir(p))
			if err != nil {
				return err
			}
			if err := rewriteSnapshot(filepath.Dir(p), filepath.Join(tmp, rel), oldKey, newKey); err != nil {
				return err
			}
		}
		return nil
	}, log)
	if err != nil {
		return fmt.Errorf("raftstore: snapshots: %w", err)
	}
	log.Info("raft store: snapshots rewritten with the new key", "dir", dir, "snapshots", len(files))
	return nil
}

// rotated reports whether the state file at p is written with newKey
// already (false: with oldKey); store.ErrEncryptionKey if with neither.
func rotated(p string, oldKey, newKey []byte) (bool, error) {
	stNew, err := fileKeyState(p, newKey)
	if err != nil {
		return false, err
	}
	if stNew == snapOpens || (stNew == snapPlain && len(newKey) == 0) {
		return true, nil
	}
	stOld, err := fileKeyState(p, oldKey)
	if err != nil {
		return false, err
	}
	if stOld == snapOpens || (stOld == snapPlain && len(oldKey) == 0) {
		return false, nil
	}
	return false, fmt.Errorf("raftstore: %w (rotating snapshot %s)", store.ErrEncryptionKey, p)
}

// rewriteSnapshot writes the snapshot in src into the new directory dst
// with newKey: its state file, checked against its CRC, re-encrypted
// (or copied, if newKey writes it already), and its metadata with the
// new file's size and CRC.
func rewriteSnapshot(src, dst string, oldKey, newKey []byte) error {
	metaRaw, err := os.ReadFile(filepath.Join(src, snapMetaFile))
	if err != nil {
		return fmt.Errorf("raftstore: snapshot: %w", err)
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(metaRaw, &meta); err != nil {
		return fmt.Errorf("raftstore: snapshot %s: metadata: %w", src, err)
	}
	var wantCRC []byte
	if err := json.Unmarshal(meta["CRC"], &wantCRC); err != nil {
		return fmt.Errorf("raftstore: snapshot %s: metadata CRC: %w", src, err)
	}
	done, err := rotated(filepath.Join(src, snapStateFile), oldKey, newKey)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return fmt.Errorf("raftstore: snapshot: %w", err)
	}
	in, err := os.Open(filepath.Join(src, snapStateFile))
	if err != nil {
		return fmt.Errorf("raftstore: snapshot: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(dst, snapStateFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("raftstore: snapshot: %w", err)
	}
	defer out.Close()

	table := crc64.MakeTable(crc64.ECMA)
	inCRC, outCRC := crc64.New(table), crc64.New(table)
	counted := &countWriter{w: io.MultiWriter(out, outCRC)}
	src2 := io.TeeReader(in, inCRC)
	switch {
	case done:
		_, err = io.Copy(counted, src2)
	default:
		var r io.Reader = src2
		if len(oldKey) > 0 {
			if r, err = newDecReader(src2, oldKey); err != nil {
				return fmt.Errorf("raftstore: snapshot %s: %w", src, err)
			}
		}
		var w io.WriteCloser = nopCloser{counted}
		if len(newKey) > 0 {
			if w, err = newEncWriter(counted, newKey); err != nil {
				return fmt.Errorf("raftstore: snapshot %s: %w", src, err)
			}
		}
		if _, err = io.Copy(w, r); err == nil {
			err = w.Close()
		}
		if err == nil {
			// The rest of the old file, if any, into its CRC: a
			// damaged file is not rewritten as a good one.
			_, err = io.Copy(io.Discard, src2)
		}
	}
	if err != nil {
		return fmt.Errorf("raftstore: rewrite snapshot %s: %w", src, err)
	}
	if !bytes.Equal(inCRC.Sum(nil), wantCRC) {
		return fmt.Errorf("raftstore: snapshot %s: %w: CRC mismatch", src, ErrSnapshotCorrupt)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("raftstore: snapshot: %w", err)
	}
	if meta["Size"], err = json.Marshal(counted.n); err != nil {
		return err
	}
	if meta["CRC"], err = json.Marshal(outCRC.Sum(nil)); err != nil {
		return err
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, snapMetaFile), b, 0o600); err != nil {
		return fmt.Errorf("raftstore: snapshot: %w", err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
