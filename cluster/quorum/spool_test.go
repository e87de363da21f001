package quorum

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/store"
)

// TestSpoolNotPlainText: the full snapshot spooled to send a member holds
// the queue's messages; on disk it is encrypted (with a key of its own),
// and what is sent is the plain stream.
func TestSpoolNotPlainText(t *testing.T) {
	marker := []byte("spool-marker-body-6a0e3f")
	f := newFSM(t, store.NewMemory())
	f.Apply(command(op{kind: opAppend, seq: key(1, 1), data: marker}))
	dir := t.TempDir()
	files, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ss := f.SnapshotStore(files, dir)
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	sink, err := ss.Create(raft.SnapshotVersionMax, f.Applied(), 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	meta, rc, err := ss.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	spools, _ := filepath.Glob(filepath.Join(dir, spoolPattern))
	if len(spools) != 1 {
		t.Fatalf("spool files: %v", spools)
	}
	onDisk, err := os.ReadFile(spools[0])
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(onDisk, marker) {
		t.Fatal("the spool holds a message body in plain text")
	}
	sent, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(sent)) != meta.Size || !bytes.Contains(sent, marker) {
		t.Fatalf("sent %d bytes (meta %d), marker in it: %v", len(sent), meta.Size, bytes.Contains(sent, marker))
	}
	if err := newFSM(t, store.NewMemory()).Restore(io.NopCloser(bytes.NewReader(sent))); err != nil {
		t.Fatalf("restoring what was sent: %v", err)
	}
}
