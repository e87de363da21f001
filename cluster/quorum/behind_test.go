package quorum

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/store"
)

// countingStore counts the message puts and deletes that reach a Store.
type countingStore struct {
	Store
	puts, deletes int
}

func (c *countingStore) PutMessage(qid, seq uint64, data []byte, done func(error)) {
	if qid != StateQID {
		c.puts++
	}
	c.Store.PutMessage(qid, seq, data, done)
}

func (c *countingStore) DeleteMessage(qid, seq uint64) {
	if qid != StateQID {
		c.deletes++
	}
	c.Store.DeleteMessage(qid, seq)
}

func behindFSM(t *testing.T, st Store, after uint64) *FSM {
	t.Helper()
	f := newFSM(t, st)
	f.EnableWriteBehind()
	f.WriteBehindAfter(after)
	t.Cleanup(func() { kill(f) }) // behindTotal is the process's
	return f
}

// kill drops what f buffered, as kill -9 would, and stops its timer.
func kill(f *FSM) {
	f.mu.Lock()
	f.stopLocked()
	f.buf.reset()
	f.mu.Unlock()
}

// buffered is what f's buffer holds.
func buffered(f *FSM) (int, int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.len(), f.buf.bytes
}

// storeDump reads the Store itself, not through the FSM (which flushes).
func storeDump(t *testing.T, st Store) []entry {
	t.Helper()
	var out []entry
	if err := st.ReadMessages(7, 0, func(k uint64, data []byte) bool {
		out = append(out, entry{seq: k, data: append([]byte(nil), data...)})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWriteBehindCancels: a message deleted while buffered never reaches
// the Store; what is left reaches it at a flush; the watermark says how
// far the Store holds every append.
func TestWriteBehindCancels(t *testing.T) {
	cs := &countingStore{Store: store.NewMemory()}
	f := behindFSM(t, cs, 0)
	var stored []uint64
	f.OnStored(func(k uint64) { stored = append(stored, k) })
	for i := uint64(1); i <= 100; i++ {
		ops := []op{{kind: opAppend, seq: key(0, i), data: []byte(fmt.Sprint(i))}}
		if i > 1 {
			ops = append(ops, op{kind: opDelete, seq: key(0, i-1)})
		}
		f.Apply(command(ops...))
	}
	if cs.puts != 0 || cs.deletes != 0 {
		t.Fatalf("%d puts, %d deletes reached the store; want none", cs.puts, cs.deletes)
	}
	if n, _ := buffered(f); f.Len() != 1 || n != 1 {
		t.Fatalf("len %d, buffered %d", f.Len(), n)
	}
	// Every append but the last is deleted: the watermark is the one
	// before it.
	if len(stored) == 0 || stored[len(stored)-1] != key(0, 99) {
		t.Fatalf("stored watermarks %v, want last %d", stored, key(0, 99))
	}
	if got := storeDump(t, cs); len(got) != 0 {
		t.Fatalf("store holds %d messages before the flush", len(got))
	}
	f.Flush()
	if err := equalEntries(storeDump(t, cs), []entry{{seq: key(0, 100), data: []byte("100")}}); err != nil {
		t.Fatal(err)
	}
	if stored[len(stored)-1] != key(0, 100) || cs.puts != 1 {
		t.Fatalf("after flush: watermark %d, %d puts", stored[len(stored)-1], cs.puts)
	}
	// A delete of a message in the Store goes there.
	f.Apply(command(op{kind: opDelete, seq: key(0, 100)}))
	if cs.deletes != 1 || len(storeDump(t, cs)) != 0 {
		t.Fatalf("%d deletes, %d left", cs.deletes, len(storeDump(t, cs)))
	}
	if behindTotal.Load() != 0 {
		t.Fatalf("process total %d after everything left the buffer", behindTotal.Load())
	}
}

// TestWriteBehindBounded: the buffer never holds more than its limits; the
// oldest messages go to the Store first and the watermark follows them.
func TestWriteBehindBounded(t *testing.T) {
	cs := &countingStore{Store: store.NewMemory()}
	f := behindFSM(t, cs, 0)
	var last uint64
	f.OnStored(func(k uint64) { last = k })
	n := uint64(behindMsgs + 500)
	for i := uint64(1); i <= n; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(1, i), data: []byte("x")}))
		if n, _ := buffered(f); n > behindMsgs {
			t.Fatalf("buffer holds %d messages after %d appends", n, i)
		}
	}
	if cs.puts != 500 || last != key(1, 500) {
		t.Fatalf("%d puts, watermark %d; want 500, %d", cs.puts, last, key(1, 500))
	}
	big := bytes.Repeat([]byte("b"), 64<<10)
	for i := n + 1; i <= n+200; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(1, i), data: big}))
		if _, b := buffered(f); b > behindBytes {
			t.Fatalf("buffer holds %d bytes", b)
		}
	}
	if f.Len() != int(n+200) || len(dump(f)) != int(n+200) {
		t.Fatalf("len %d, %d messages in the store after Messages", f.Len(), len(dump(f)))
	}
}

// TestWriteBehindCrash: a member killed after it flushed messages that no
// state record covers, its Raft log holding entries it had not applied,
// restarts over the same Store
// with the Raft log's last index as WriteBehindAfter: replaying the log
// leaves the Store with exactly the messages of the FSM that crashed.
// With a later index, a replayed append that had reached the Store would
// be buffered, its delete would stay in the buffer, and the message would
// be left on disk (the test checks that it would).
func TestWriteBehindCrash(t *testing.T) {
	build := func() []*raft.Log {
		index = 0
		var logs []*raft.Log
		for i := uint64(1); i <= 60; i++ {
			ops := []op{{kind: opAppend, seq: key(0, i), data: []byte(fmt.Sprint(i))}}
			if i%3 == 0 {
				ops = append(ops, op{kind: opDelete, seq: key(0, i-2)})
			}
			logs = append(logs, command(ops...))
		}
		return logs
	}
	run := func(t *testing.T, after func(last uint64) uint64) (got, want []entry) {
		logs := build()
		st := store.NewMemory()
		f := behindFSM(t, st, 0)
		f.ApplyBatch(logs[:20])
		if _, err := f.Snapshot(); err != nil { // a state record at entry 20
			t.Fatal(err)
		}
		f.ApplyBatch(logs[20:40])
		f.Flush() // 21-40 reach the store, no record covers them
		kill(f)   // kill -9 before it applies 41-60, which its log holds
		ref := newFSM(t, store.NewMemory())
		ref.ApplyBatch(logs)
		want = dump(ref)

		g := behindFSM(t, st, 0)
		g.WriteBehindAfter(after(logs[len(logs)-1].Index))
		if g.Applied() != logs[19].Index {
			t.Fatalf("restarted at %d, want %d", g.Applied(), logs[19].Index)
		}
		g.ApplyBatch(logs) // Raft replays its log
		g.Flush()
		return storeDump(t, st), want
	}
	got, want := run(t, func(last uint64) uint64 { return last })
	if err := equalEntries(got, stripReturns(want)); err != nil {
		t.Fatal(err)
	}
	got, want = run(t, func(last uint64) uint64 { return last - 30 })
	if equalEntries(got, stripReturns(want)) == nil {
		t.Fatal("buffering replayed entries left the store right: the test no longer shows why WriteBehindAfter matters")
	}
}

func stripReturns(es []entry) []entry {
	out := make([]entry, len(es))
	for i, e := range es {
		out[i] = entry{seq: e.seq, data: e.data}
	}
	return out
}

// TestWriteBehindRestore: after a full snapshot is installed, the entries
// that follow may append its newest messages again; those are written
// through, so their deletes reach the Store.
func TestWriteBehindRestore(t *testing.T) {
	src := newFSM(t, store.NewMemory())
	for i := uint64(1); i <= 10; i++ {
		src.Apply(command(op{kind: opAppend, seq: key(0, i), data: []byte(fmt.Sprint(i))}))
	}
	full := snapshotBytes(t, src)
	st := store.NewMemory()
	f := behindFSM(t, st, 0)
	if err := f.Restore(io.NopCloser(bytes.NewReader(full))); err != nil {
		t.Fatal(err)
	}
	// An entry after the snapshot's index appends 10 again (the stream
	// was read after it was applied), then deletes it; 11 is new.
	f.Apply(command(op{kind: opAppend, seq: key(0, 10), data: []byte("10")}, op{kind: opAppend, seq: key(0, 11), data: []byte("11")}))
	if n, _ := buffered(f); n != 1 {
		t.Fatalf("%d buffered, want 1 (the new message)", n)
	}
	f.Apply(command(op{kind: opDelete, seq: key(0, 10)}, op{kind: opDelete, seq: key(0, 11)}))
	got := storeDump(t, st)
	if len(got) != 9 || got[len(got)-1].seq != key(0, 9) {
		t.Fatalf("store holds %d messages, last %d; want 9, last %d", len(got), got[len(got)-1].seq, key(0, 9))
	}
}

// TestWriteBehindIdleFlush: a queue whose applies stop (a backlog that
// nobody consumes) gets its buffer to the Store within saveEveryBehind,
// under a state record, and its watermark reported; Close after Drop or a
// stop does nothing more.
func TestWriteBehindIdleFlush(t *testing.T) {
	st := store.NewMemory()
	f := behindFSM(t, st, 0)
	stored := make(chan uint64, 16)
	f.OnStored(func(k uint64) { stored <- k })
	for i := uint64(1); i <= 10; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: []byte("x")}))
	}
	if len(storeDump(t, st)) != 0 {
		t.Fatal("written before the idle flush")
	}
	deadline := time.After(5 * saveEveryBehind)
	for k := uint64(0); k != key(0, 10); {
		select {
		case k = <-stored:
		case <-deadline:
			t.Fatalf("no idle flush (stored watermark %d)", k)
		}
	}
	if got := storeDump(t, st); len(got) != 10 {
		t.Fatalf("%d messages in the store after the idle flush", len(got))
	}
	g := newFSM(t, st) // the record covers them: a restart applies nothing again
	if g.Applied() != f.Applied() {
		t.Fatalf("record at %d, applied %d", g.Applied(), f.Applied())
	}
	f.Apply(command(op{kind: opAppend, seq: key(0, 11), data: []byte("y")}))
	f.Close() // a stopped member: the buffer goes under a record
	if got := storeDump(t, st); len(got) != 11 || newFSM(t, st).Applied() != f.Applied() {
		t.Fatalf("after Close: %d messages, record at %d", len(got), newFSM(t, st).Applied())
	}
}

// TestWriteBehindBudget: once all FSMs' buffers together pass
// behindBudget, an FSM that applies flushes its own buffer.
func TestWriteBehindBudget(t *testing.T) {
	cs := &countingStore{Store: store.NewMemory()}
	f := behindFSM(t, cs, 0)
	for i := uint64(1); i <= 10; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: []byte("x")}))
	}
	if cs.puts != 0 {
		t.Fatalf("%d puts under the budget", cs.puts)
	}
	behindTotal.Add(behindBudget) // the other FSMs of the process
	defer behindTotal.Add(-behindBudget)
	f.Apply(command(op{kind: opAppend, seq: key(0, 11), data: []byte("x")}))
	if n, _ := buffered(f); cs.puts != 11 || n != 0 {
		t.Fatalf("over the budget: %d puts, %d buffered; want 11, 0", cs.puts, n)
	}
}

// TestWriteBehindRecordKeepsBuffer: a periodic state record leaves the
// buffer alone and says from which entry the Store may lack ops; a member
// killed after it (its buffer lost) and restarted over the same Store
// applies those entries' ops to the Store again, not to its counts, and
// ends with exactly the messages and counts of a member that never
// crashed. Without that replay the buffered messages would be lost (the
// test checks that the Store lacked them).
func TestWriteBehindRecordKeepsBuffer(t *testing.T) {
	index = 0
	var logs []*raft.Log
	for i := uint64(1); i <= 60; i++ {
		ops := []op{{kind: opAppend, seq: key(0, i), data: []byte(fmt.Sprint(i))}}
		if i%3 == 0 {
			ops = append(ops, op{kind: opDelete, seq: key(0, i-2)}, op{kind: opReturn, seq: key(0, i-1)})
		}
		logs = append(logs, command(ops...))
	}
	cs := &countingStore{Store: store.NewMemory()}
	f := behindFSM(t, cs, 0)
	f.ApplyBatch(logs[:40])
	f.mu.Lock()
	f.lastSave = time.Now().Add(-2 * saveEveryBehind)
	f.mu.Unlock()
	f.Apply(logs[40]) // a record is due
	n, _ := buffered(f)
	if n == 0 || cs.puts != 0 {
		t.Fatalf("after the record: %d buffered, %d puts; want the buffer kept", n, cs.puts)
	}
	f.mu.Lock()
	stored, applied := f.s.stored, f.s.applied
	f.mu.Unlock()
	if applied != logs[40].Index || stored >= logs[1].Index {
		t.Fatalf("record: applied %d stored %d; want %d and before the first live append", applied, stored, logs[40].Index)
	}
	f.Apply(logs[41])
	kill(f) // kill -9: the buffer is gone, 42-60 are in the log only
	if len(storeDump(t, cs)) != 0 {
		t.Fatal("the store holds messages: the test no longer shows a lost buffer")
	}

	ref := newFSM(t, store.NewMemory())
	ref.ApplyBatch(logs)
	g := behindFSM(t, cs.Store, 0)
	g.WriteBehindAfter(logs[len(logs)-1].Index)
	if g.Applied() != logs[40].Index {
		t.Fatalf("restarted at %d, want %d", g.Applied(), logs[40].Index)
	}
	g.ApplyBatch(logs) // Raft replays its log
	g.Flush()
	if err := equalEntries(storeDump(t, cs.Store), stripReturns(dump(ref))); err != nil {
		t.Fatal(err)
	}
	if err := equalEntries(dump(g), dump(ref)); err != nil {
		t.Fatal("returns:", err)
	}
	if g.Len() != ref.Len() || g.Bytes() != ref.Bytes() {
		t.Fatalf("counts %d/%d, want %d/%d", g.Len(), g.Bytes(), ref.Len(), ref.Bytes())
	}
}

// TestWriteBehindAged: a record writes out what has been buffered for
// behindAge, so the span a restart applies again stays bounded under a
// backlog nobody consumes while appends keep coming.
func TestWriteBehindAged(t *testing.T) {
	index = 0
	cs := &countingStore{Store: store.NewMemory()}
	f := behindFSM(t, cs, 0)
	t0 := time.Now()
	for i := uint64(1); i <= 10; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: []byte("x")}))
	}
	f.mu.Lock()
	f.flushAgedLocked(t0) // a record's mark at entry 10
	f.mu.Unlock()
	for i := uint64(11); i <= 20; i++ {
		f.Apply(command(op{kind: opAppend, seq: key(0, i), data: []byte("x")}))
	}
	f.mu.Lock()
	f.flushAgedLocked(t0.Add(behindAge / 2))
	if cs.puts != 0 {
		f.mu.Unlock()
		t.Fatalf("%d puts before anything is behindAge old", cs.puts)
	}
	f.flushAgedLocked(t0.Add(behindAge))
	f.recordLocked(t0.Add(behindAge))
	stored := f.s.stored
	f.mu.Unlock()
	if cs.puts != 10 {
		t.Fatalf("%d puts, want the 10 appends of the entries up to the old mark", cs.puts)
	}
	if n, _ := buffered(f); n != 10 || stored != 10 {
		t.Fatalf("%d buffered, stored %d; want 10, 10", n, stored)
	}
}
