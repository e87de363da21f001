package quorum

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// SnapshotStore is the snapshot store of a quorum queue's group on one
// member: snapshots as the member keeps them hold the FSM's state alone
// (Persist), a few bytes whatever the backlog, since the messages are in
// the node's Store; Open, which Raft calls to send the newest snapshot to
// a member too far behind (and to install one it received), turns a
// state-only snapshot into a full one by streaming the Store's messages
// after the state, through a spool file (Raft must know the size before
// it sends). Full snapshots (received, or of earlier builds) are opened as
// they are.
type SnapshotStore struct {
	raft.SnapshotStore
	f        *FSM
	spoolDir string
}

// SnapshotStore wraps inner, the group's snapshot store, for f; spools go
// to dir (leftovers of a crash are removed now).
func (f *FSM) SnapshotStore(inner raft.SnapshotStore, dir string) *SnapshotStore {
	if old, _ := filepath.Glob(filepath.Join(dir, spoolPattern)); len(old) > 0 {
		for _, p := range old {
			_ = os.Remove(p)
		}
	}
	return &SnapshotStore{SnapshotStore: inner, f: f, spoolDir: dir}
}

const spoolPattern = "spool-*.snap"

// Open implements raft.SnapshotStore.
func (s *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(rc, 64<<10)
	v, err := br.Peek(1)
	if err != nil || v[0] != stateSnapshotVersion {
		// Full (or unreadable: Restore reports it).
		return meta, struct {
			io.Reader
			io.Closer
		}{br, rc}, nil
	}
	st, err := readStateSnapshot(br)
	rc.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("quorum: snapshot %s: %w", id, err)
	}
	if err := os.MkdirAll(s.spoolDir, 0o755); err != nil {
		return nil, nil, err
	}
	tmp, err := os.CreateTemp(s.spoolDir, spoolPattern)
	if err != nil {
		return nil, nil, err
	}
	sp := &spool{f: tmp}
	// The spool holds the queue's messages, which the node's store keeps
	// encrypted when encryption.key_file is set: it is encrypted with a
	// key of its own that is never written down, so that it is no
	// plain-text copy of them (nor one after a crash, until the next
	// start removes it).
	stream, err := newSpoolCipher()
	if err != nil {
		sp.Close()
		return nil, nil, fmt.Errorf("quorum: spooling snapshot %s: %w", id, err)
	}
	bw := bufio.NewWriterSize(cipher.StreamWriter{S: stream.enc, W: tmp}, 256<<10)
	err = s.f.writeFull(bw, &st)
	if err == nil {
		err = bw.Flush()
	}
	var size int64
	if err == nil {
		size, err = tmp.Seek(0, io.SeekCurrent)
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		sp.Close()
		return nil, nil, fmt.Errorf("quorum: spooling snapshot %s: %w", id, err)
	}
	sp.r = cipher.StreamReader{S: stream.dec, R: tmp}
	m := *meta
	m.Size = size
	return &m, sp, nil
}

// spoolCipher is a spool's AES-CTR key stream, one to write it and the
// same again to read it back.
type spoolCipher struct{ enc, dec cipher.Stream }

func newSpoolCipher() (spoolCipher, error) {
	key := make([]byte, 32+aes.BlockSize)
	if _, err := rand.Read(key); err != nil {
		return spoolCipher{}, err
	}
	blk, err := aes.NewCipher(key[:32])
	if err != nil {
		return spoolCipher{}, err
	}
	iv := key[32:]
	return spoolCipher{enc: cipher.NewCTR(blk, iv), dec: cipher.NewCTR(blk, iv)}, nil
}

// spool is a full snapshot written for one Open, read back (decrypted)
// through r; Close removes it. It has no other method of the file's (an
// io.Copy would take a WriteTo to send the file as it is on disk).
type spool struct {
	f *os.File
	r io.Reader
}

func (s *spool) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s *spool) Close() error {
	err := s.f.Close()
	if rerr := os.Remove(s.f.Name()); err == nil {
		err = rerr
	}
	return err
}
