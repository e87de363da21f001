package quorum

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/store"
)

// memSink is a raft.SnapshotSink over a buffer.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// entry is one message as the tests see it.
type entry struct {
	seq     uint64
	data    []byte
	returns uint32
}

var index uint64

// command is an entry at the next index.
func command(ops ...op) *raft.Log {
	index++
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: encodeOps(ops)}
}

// dump returns the FSM's messages (from its Store) and their returns.
func dump(f *FSM) []entry {
	var out []entry
	if err := f.Messages(func(seq uint64, data []byte, returns uint32) bool {
		out = append(out, entry{seq: seq, data: append([]byte(nil), data...), returns: returns})
		return true
	}); err != nil {
		panic(err)
	}
	return out
}

func equalEntries(a, b []entry) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d messages, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i].seq != b[i].seq || a[i].returns != b[i].returns || !bytes.Equal(a[i].data, b[i].data) {
			return fmt.Errorf("message %d: %d/%d/%q, want %d/%d/%q", i, a[i].seq, a[i].returns, a[i].data, b[i].seq, b[i].returns, b[i].data)
		}
	}
	return nil
}

func newFSM(t testing.TB, st Store) *FSM {
	t.Helper()
	f, err := NewFSM(st, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// snapshotBytes takes a snapshot of f as its group would: Persist into a
// file snapshot store (the state alone), then the full stream the
// SnapshotStore sends a member.
func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	full, _ := snapshotFiles(t, f)
	return full
}

// snapshotFiles returns the full stream and what is on disk.
func snapshotFiles(t testing.TB, f *FSM) (full, onDisk []byte) {
	t.Helper()
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
		t.Fatalf("persist: %v", err)
	}
	_, rc, err := files.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err = io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	meta, rc, err := ss.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	full, err = io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(full)) != meta.Size {
		t.Fatalf("sent %d bytes, meta says %d", len(full), meta.Size)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, spoolPattern)); len(left) > 0 {
		t.Fatalf("spool files left: %v", left)
	}
	return full, onDisk
}

// key is a key in group top, as the core builds them.
func key(top byte, seq uint64) uint64 { return uint64(top)<<56 | seq<<1 }

func TestFSMApply(t *testing.T) {
	st := store.NewMemory()
	f := newFSM(t, st)
	a, b, c := key(0, 1), key(0, 2), key(3, 3)
	f.Apply(command(op{kind: opAppend, seq: a, data: []byte("aaaa")}, op{kind: opAppend, seq: b, data: []byte("bb")}))
	f.Apply(command(op{kind: opAppend, seq: c, data: []byte("cccccc")}, op{kind: opReturn, seq: b}, op{kind: opReturn, seq: b}))
	want := []entry{{a, []byte("aaaa"), 0}, {b, []byte("bb"), 2}, {c, []byte("cccccc"), 0}}
	if err := equalEntries(dump(f), want); err != nil {
		t.Fatal(err)
	}
	if f.Len() != 3 || f.Bytes() != 12 {
		t.Fatalf("len %d bytes %d", f.Len(), f.Bytes())
	}
	g := f.Groups()
	if len(g) != 2 || g[0] != (Group{Top: 0, Count: 2, Bytes: 6, MaxKey: b}) || g[1] != (Group{Top: 3, Count: 1, Bytes: 6, MaxKey: c}) {
		t.Fatalf("groups %+v", g)
	}
	// A malformed entry changes nothing and says so.
	bad := command(op{kind: opDelete, seq: a})
	bad.Data = append(bad.Data, 99)
	if err, _ := f.Apply(bad).(error); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("malformed entry: %v", err)
	}
	if f.Len() != 3 {
		t.Fatal("malformed entry applied")
	}
	f.Apply(command(op{kind: opDelete, seq: b}, op{kind: opDelete, seq: a}))
	if err := equalEntries(dump(f), []entry{{c, []byte("cccccc"), 0}}); err != nil {
		t.Fatal(err)
	}
	if f.Returns(b) != 0 || f.Len() != 1 || f.Bytes() != 6 {
		t.Fatalf("after deletes: returns %d len %d bytes %d", f.Returns(b), f.Len(), f.Bytes())
	}
	if g := f.Groups(); g[0].Count != 0 || g[0].Bytes != 0 || g[0].MaxKey != b {
		t.Fatalf("emptied group %+v", g[0])
	}
	// An entry at or below the applied index is skipped (a replay).
	old := &raft.Log{Index: 1, Type: raft.LogCommand, Data: encodeOps([]op{{kind: opAppend, seq: key(0, 9), data: []byte("x")}})}
	f.Apply(old)
	if f.Len() != 1 {
		t.Fatal("an entry below the applied index was applied")
	}
	if err := f.Drop(); err != nil {
		t.Fatal(err)
	}
	if len(dump(f)) != 0 {
		t.Fatal("Drop left messages")
	}
}

// TestFSMRestartReplay: an FSM started over the Store of one that stopped
// (crashed) takes its state from the last record and skips the entries
// it covers; entries after it are applied again harmlessly.
func TestFSMRestartReplay(t *testing.T) {
	st := store.NewMemory()
	f := newFSM(t, st)
	var logs []*raft.Log
	for i := uint64(1); i <= 50; i++ {
		ops := []op{{kind: opAppend, seq: key(0, i), data: []byte(fmt.Sprint(i))}}
		if i%2 == 0 {
			ops = append(ops, op{kind: opDelete, seq: key(0, i-1)})
		}
		if i%5 == 0 {
			ops = append(ops, op{kind: opReturn, seq: key(0, i)})
		}
		logs = append(logs, command(ops...))
	}
	f.ApplyBatch(logs[:30])
	snap := snapshotBytes(t, f) // writes the state record at entry 30
	_ = snap
	f.ApplyBatch(logs[30:]) // within saveEvery: no record for these
	wantMsgs, wantLen, wantBytes := dump(f), f.Len(), f.Bytes()

	g := newFSM(t, st) // restart: state of entry 30, store with all 50
	if g.Applied() != logs[29].Index {
		t.Fatalf("restarted at index %d, want %d", g.Applied(), logs[29].Index)
	}
	g.ApplyBatch(logs) // Raft replays everything after its snapshot
	if err := equalEntries(dump(g), wantMsgs); err != nil {
		t.Fatal(err)
	}
	if g.Len() != wantLen || g.Bytes() != wantBytes {
		t.Fatalf("after replay: %d/%d, want %d/%d", g.Len(), g.Bytes(), wantLen, wantBytes)
	}
}

func TestFSMSnapshotRoundTrip(t *testing.T) {
	f := newFSM(t, store.NewMemory())
	for i := uint64(0); i < 1000; i++ {
		ops := []op{{kind: opAppend, seq: key(byte(i%3), i), data: bytes.Repeat([]byte{byte(i)}, int(i%50))}}
		if i%7 == 0 {
			ops = append(ops, op{kind: opReturn, seq: key(byte(i%3), i)})
		}
		if i%4 == 0 && i > 0 {
			ops = append(ops, op{kind: opDelete, seq: key(byte((i-1)%3), i-1)})
		}
		f.Apply(command(ops...))
	}
	// Two retries held aside, one released.
	f.Apply(command(op{kind: opHold, seq: 500, data: []byte("held-a")}, op{kind: opHold, seq: 600, data: []byte("held-b")}))
	f.Apply(command(op{kind: opRelease, seq: 500}))
	if f.Held() != 1 {
		t.Fatalf("held %d, want 1", f.Held())
	}
	b, onDisk := snapshotFiles(t, f)
	// On disk the snapshot holds the state alone: it cannot be installed.
	if len(onDisk) > 4<<10 || onDisk[0] != stateSnapshotVersion {
		t.Fatalf("snapshot on disk: %d bytes, version %d", len(onDisk), onDisk[0])
	}
	if err := newFSM(t, store.NewMemory()).Restore(io.NopCloser(bytes.NewReader(onDisk))); !errors.Is(err, ErrStateOnly) {
		t.Fatalf("restoring a state-only snapshot: %v", err)
	}
	// A member with other messages installs the full one sent to it.
	st2 := store.NewMemory()
	g := newFSM(t, st2)
	g.Apply(command(op{kind: opAppend, seq: key(9, 1), data: []byte("stale")}))
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if err := equalEntries(dump(g), dump(f)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Groups(), f.Groups()) || g.Applied() != f.Applied() {
		t.Fatalf("groups %+v applied %d, want %+v %d", g.Groups(), g.Applied(), f.Groups(), f.Applied())
	}
	var held []string
	_ = st2.ReadMessages(HoldQID(7), 0, func(k uint64, data []byte) bool {
		held = append(held, fmt.Sprintf("%d=%s", k, data))
		return true
	})
	if len(held) != 1 || held[0] != "600=held-b" || g.Held() != 1 {
		t.Fatalf("held after restore: %v (%d)", held, g.Held())
	}
	// The installed state is its Store's: a restart finds it.
	h := newFSM(t, st2)
	if !slices.Equal(h.Groups(), f.Groups()) || h.Applied() != f.Applied() || h.Len() != f.Len() {
		t.Fatal("restart after restore lost the state")
	}
}

// TestSnapshotCorrupt: every truncation and every flipped byte of a
// snapshot is refused with ErrCorrupt (never a panic), and the FSM's
// state stays as it was.
func TestSnapshotCorrupt(t *testing.T) {
	f := newFSM(t, store.NewMemory())
	for i := uint64(0); i < 20; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: []byte("message")}, op{kind: opReturn, seq: key(0, i)}))
	}
	b := snapshotBytes(t, f)
	g := newFSM(t, store.NewMemory())
	for n := 0; n < len(b); n++ {
		if err := g.Restore(io.NopCloser(bytes.NewReader(b[:n]))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated at %d: %v", n, err)
		}
	}
	for i := range b {
		c := slices.Clone(b)
		c[i] ^= 0x41
		if err := g.Restore(io.NopCloser(bytes.NewReader(c))); err == nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
	}
	if g.Len() != 0 || g.Applied() != 0 {
		t.Fatalf("a refused snapshot changed the state: %d messages, index %d", g.Len(), g.Applied())
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(append(slices.Clone(b), 0)))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func TestStateCodec(t *testing.T) {
	s := state{applied: 99}
	s.add(key(0, 1), 10)
	s.add(key(0, 2), 30)
	s.add(key(200, 3), 5)
	s.ret(key(0, 2))
	s.ret(key(0, 2))
	s.del(key(0, 1))
	if s.count() != 2 || s.bytes() != 25 {
		t.Fatalf("count %d bytes %d", s.count(), s.bytes())
	}
	got, err := decodeState(s.encode(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got.applied != 99 || got.stored != 0 || !slices.Equal(got.groups, s.groups) || len(got.returns) != 1 || got.returns[key(0, 2)] != 2 {
		t.Fatalf("decoded %+v, want %+v", got, s)
	}
	s.stored = 90
	if got, err := decodeState(s.encode(nil)); err != nil || got.stored != 90 {
		t.Fatalf("stored: %d, %v", got.stored, err)
	}
	// A record of an earlier build wrote 0 where the unstored span is:
	// everything it applied is in the Store.
	s.stored = 99
	if enc := s.encode(nil); enc[1+1+1] != 0 { // version, applied 99, appended 0
		t.Fatalf("unstored span of a fully stored state encodes as %d", enc[3])
	}
	// A span past the applied index is corrupt.
	bad := s.encode(nil)
	bad[3] = 100
	if _, err := decodeState(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("span past applied: %v", err)
	}
	enc := s.encode(nil)
	for n := 0; n < len(enc); n++ {
		if _, err := decodeState(enc[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated at %d: %v", n, err)
		}
	}
}

func FuzzReadSnapshot(f *testing.F) {
	fsm := newFSM(f, store.NewMemory())
	for i := uint64(0); i < 5; i++ {
		fsm.Apply(command(op{kind: opAppend, seq: key(byte(i), i), data: []byte("data")}, op{kind: opReturn, seq: key(byte(i), i)}))
	}
	f.Add(snapshotBytes(f, fsm))
	_, onDisk := snapshotFiles(f, fsm)
	f.Add(onDisk)
	f.Add([]byte{snapshotVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		var n int
		s, err := readSnapshot(bytes.NewReader(b), func(bool, uint64, []byte) { n++ })
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrStateOnly) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		// What decodes re-encodes to the same state.
		if _, err := decodeState(s.encode(nil)); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeState(f *testing.F) {
	s := state{applied: 5}
	s.add(key(1, 1), 3)
	s.ret(key(1, 1))
	f.Add(s.encode(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := decodeState(s.encode(nil))
		if err != nil || again.applied != s.applied || !slices.Equal(again.groups, s.groups) || len(again.returns) != len(s.returns) {
			t.Fatalf("round trip differs: %v", err)
		}
	})
}

// TestFSMSnapshotDue: once more than 64 MiB of messages were appended
// since the last snapshot one is due (it lets Raft drop them from its
// log), whatever the queue holds, across a restart too; a snapshot resets
// it.
func TestFSMSnapshotDue(t *testing.T) {
	st := store.NewMemory()
	f := newFSM(t, st)
	big := make([]byte, 1<<20)
	for i := uint64(1); i <= 60; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: big}))
	}
	if f.SnapshotDue() {
		t.Fatal("60 MiB appended: snapshot due")
	}
	for i := uint64(61); i <= 70; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: big}, op{kind: opDelete, seq: key(0, i)}))
	}
	if !f.SnapshotDue() {
		t.Fatal("70 MiB appended: no snapshot due")
	}
	_, onDisk := snapshotFiles(t, f) // writes the state record
	if f.SnapshotDue() {
		t.Fatal("still due right after a snapshot")
	}
	if len(onDisk) > 4<<10 {
		t.Fatalf("a snapshot of a 60 MiB queue takes %d bytes on disk", len(onDisk))
	}
	for i := uint64(100); i < 170; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: big}, op{kind: opDelete, seq: key(0, i)}))
	}
	f.mu.Lock()
	f.saveLocked()
	f.mu.Unlock()
	if g := newFSM(t, st); !g.SnapshotDue() {
		t.Fatal("a restart forgot what the log holds")
	}
}

// TestLegacyFormats: entries and snapshots of the builds that kept the
// messages in memory (version 1, keyed by seq alone) are still read, each
// seq becoming the core's key of that seq in priority level 0.
func TestLegacyFormats(t *testing.T) {
	// version 1, two messages: seq 5 (returned twice) and seq 9.
	b := []byte{1}
	b = binary.AppendUvarint(b, 2)
	for _, m := range []struct {
		delta, returns uint64
		data           string
	}{{5, 2, "aa"}, {4, 0, "bbb"}} {
		b = binary.AppendUvarint(b, m.delta)
		b = binary.AppendUvarint(b, m.returns)
		b = binary.AppendUvarint(b, uint64(len(m.data)))
		b = append(b, m.data...)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	f := newFSM(t, store.NewMemory())
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if err := equalEntries(dump(f), []entry{{10, []byte("aa"), 2}, {18, []byte("bbb"), 0}}); err != nil {
		t.Fatal(err)
	}
	if g := f.Groups(); len(g) != 1 || g[0].Count != 2 || g[0].MaxKey != 18 {
		t.Fatalf("groups %+v", g)
	}
	// A version-1 entry: append seq 20, delete seq 5.
	e := []byte{legacyEntryVersion, byte(opAppend)}
	e = binary.AppendUvarint(e, 20)
	e = binary.AppendUvarint(e, 1)
	e = append(e, 'x', byte(opDelete), 5)
	index++
	if r := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: e}); r != nil {
		t.Fatalf("legacy entry: %v", r)
	}
	if err := equalEntries(dump(f), []entry{{18, []byte("bbb"), 0}, {40, []byte("x"), 0}}); err != nil {
		t.Fatal(err)
	}
	// Hold ops did not exist in version 1.
	bad := []byte{legacyEntryVersion, byte(opHold), 1, 0}
	index++
	if r, _ := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: bad}).(error); !errors.Is(r, ErrCorrupt) {
		t.Fatalf("legacy hold: %v", r)
	}
}

// TestFSMReplayOverBadger replays, over the node's real store, entries
// whose appends reached the disk before a crash but whose deletes did
// not: the store's group commit must not cancel a replayed append and its
// delete in one batch and so leave the message on disk, more messages
// there than the FSM counts (a leader that pages its backlog would read
// the wrong ones).
func TestFSMReplayOverBadger(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenBadger(dir, store.BadgerOptions{MemTableSize: 16 << 20, NumMemtables: 2, BlockCacheSize: 8 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const n = 2000
	var logs []*raft.Log
	for i := uint64(1); i <= n; i++ {
		logs = append(logs, command(op{kind: opAppend, seq: key(0, i), data: []byte(fmt.Sprint(i))}))
	}
	for i := uint64(1); i <= n; i++ {
		logs = append(logs, command(op{kind: opDelete, seq: key(0, i)}))
	}
	logs = append(logs, command(op{kind: opAppend, seq: key(0, n+1), data: []byte("kept")}))
	// Before the crash: the appends are on disk, no delete and no state
	// record yet.
	for i := uint64(1); i <= n; i++ {
		st.AppendMessage(7, key(0, i), []byte(fmt.Sprint(i)), nil)
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	f := newFSM(t, st)
	f.ApplyBatch(logs)
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	want := []entry{{seq: key(0, n+1), data: []byte("kept")}}
	if err := equalEntries(dump(f), want); err != nil {
		t.Fatalf("store after replay: %v (the FSM counts %d)", err, f.Len())
	}
	if f.Len() != 1 {
		t.Fatalf("FSM counts %d messages, want 1", f.Len())
	}
}
