package quorum

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/hashicorp/raft"
)

// memSink is a raft.SnapshotSink over a buffer.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

func command(ops ...op) *raft.Log {
	return &raft.Log{Type: raft.LogCommand, Data: encodeOps(ops)}
}

// dump returns the FSM's state through Messages.
func dump(f *FSM) []entry {
	var out []entry
	f.Messages(func(seq uint64, data []byte, returns uint32) bool {
		out = append(out, entry{seq: seq, data: data, returns: returns})
		return true
	})
	return out
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var sink memSink
	if err := s.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v, closed %v", err, sink.closed)
	}
	return sink.Bytes()
}

func TestFSMApply(t *testing.T) {
	f := NewFSM()
	steps := []struct {
		log  *raft.Log
		want []entry
	}{
		{command(op{opAppend, 2, []byte("b")}, op{opAppend, 1, []byte("a")}), []entry{{1, []byte("a"), 0, false}, {2, []byte("b"), 0, false}}},
		{command(op{opReturn, 2, nil}, op{opReturn, 2, nil}, op{opReturn, 9, nil}), []entry{{1, []byte("a"), 0, false}, {2, []byte("b"), 2, false}}},
		{command(op{opDelete, 1, nil}, op{opDelete, 7, nil}), []entry{{2, []byte("b"), 2, false}}},
		{command(op{opAppend, 2, []byte("B")}), []entry{{2, []byte("B"), 2, false}}},
		{&raft.Log{Type: raft.LogNoop}, []entry{{2, []byte("B"), 2, false}}},
		{command(op{opDelete, 2, nil}, op{opAppend, 2, []byte("new")}), []entry{{2, []byte("new"), 0, false}}},
	}
	for i, s := range steps {
		if res := f.Apply(s.log); res != nil {
			t.Fatalf("step %d: %v", i, res)
		}
		if err := equalEntries(dump(f), s.want); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	// A corrupt entry is an error and changes nothing, even if a prefix decodes.
	bad := append(encodeOps([]op{{opDelete, 2, nil}}), 9)
	if res, _ := f.Apply(&raft.Log{Type: raft.LogCommand, Data: bad}).(error); !errors.Is(res, ErrCorrupt) {
		t.Fatalf("corrupt entry: %v", res)
	}
	if f.Len() != 1 || f.Bytes() != 3 {
		t.Fatalf("Len %d Bytes %d", f.Len(), f.Bytes())
	}
	// The FSM copies data: the log's buffer may be reused.
	l := command(op{opAppend, 3, []byte("xyz")})
	f.ApplyBatch([]*raft.Log{l})
	clear(l.Data)
	if got := dump(f); string(got[1].data) != "xyz" {
		t.Fatalf("data not copied: %q", got[1].data)
	}
}

func TestFSMSnapshotRoundTrip(t *testing.T) {
	f := NewFSM()
	for i := uint64(0); i < 5000; i++ {
		f.Apply(command(op{opAppend, i * 3, []byte(fmt.Sprintf("m%d", i))}))
		if i%7 == 0 {
			f.Apply(command(op{opReturn, i * 3, nil}))
		}
		if i%5 == 0 {
			f.Apply(command(op{opDelete, i * 3, nil}))
		}
	}
	f.Apply(command(op{opAppend, 1<<64 - 1, make([]byte, 200<<10)})) // a chunked read
	s, _ := f.Snapshot()
	f.Apply(command(op{opDelete, 3, nil})) // after the snapshot: not in it
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	g.Apply(command(op{opAppend, 1, []byte("stale")}))
	if err := g.Restore(io.NopCloser(iotest.HalfReader(bytes.NewReader(sink.Bytes())))); err != nil {
		t.Fatal(err)
	}
	f.Apply(command(op{opAppend, 3, []byte("m1")})) // back as in the snapshot
	if err := equalEntries(dump(f), dump(g)); err != nil {
		t.Fatal(err)
	}
	if f.Len() != g.Len() || f.Bytes() != g.Bytes() {
		t.Fatalf("Len/Bytes %d/%d vs %d/%d", f.Len(), f.Bytes(), g.Len(), g.Bytes())
	}
	// A corrupt snapshot leaves the state alone.
	b := bytes.Clone(sink.Bytes())
	b[len(b)/2] ^= 1
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt snapshot: %v", err)
	}
	if err := equalEntries(dump(f), dump(g)); err != nil {
		t.Fatal(err)
	}
}

// snapshotCases is the golden table of the snapshot format.
var snapshotCases = []struct {
	name string
	ents []entry
	body []byte // without the CRC
	crc  uint32
}{
	{"empty", nil, []byte{1, 0}, 0},
	{"two", []entry{{seq: 1, data: []byte("a")}, {seq: 3, data: []byte("bc"), returns: 2}},
		[]byte{1, 2, 1, 0, 1, 'a', 2, 2, 2, 'b', 'c'}, 0},
	{"seq zero, empty data", []entry{{seq: 0, data: []byte{}}, {seq: 200}},
		[]byte{1, 2, 0, 0, 0, 200, 1, 0, 0}, 0},
}

func init() {
	for i := range snapshotCases {
		snapshotCases[i].crc = crc32.Checksum(snapshotCases[i].body, crc32.MakeTable(crc32.Castagnoli))
	}
}

func TestSnapshotCodec(t *testing.T) {
	for _, c := range snapshotCases {
		t.Run(c.name, func(t *testing.T) {
			want := binary.BigEndian.AppendUint32(bytes.Clone(c.body), c.crc)
			var buf bytes.Buffer
			if err := writeSnapshot(&buf, c.ents); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Fatalf("encode = %v, want %v", buf.Bytes(), want)
			}
			ents, err := readSnapshot(iotest.OneByteReader(bytes.NewReader(want)))
			if err != nil {
				t.Fatal(err)
			}
			if err := equalEntries(ents, c.ents); err != nil {
				t.Fatal(err)
			}
		})
	}
	withCRC := func(body ...byte) []byte {
		return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	}
	bad := []struct {
		name string
		b    []byte
	}{
		{"nothing", nil},
		{"version", withCRC(2, 0)},
		{"no crc", []byte{1, 0}},
		{"bad crc", []byte{1, 0, 0, 0, 0, 0}},
		{"trailing", append(withCRC(1, 0), 0)},
		{"seq not increasing", withCRC(1, 2, 5, 0, 0, 0, 0, 0)},
		{"seq overflow", withCRC(1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 1, 0, 0)},
		{"varint overflow", withCRC(1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)},
		{"returns overflow", withCRC(1, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0)},
		{"count past the end", withCRC(1, 3, 1, 0, 0)},
		{"data past the end", withCRC(1, 1, 1, 0, 5, 'a')},
		{"huge data", withCRC(1, 1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f)},
	}
	for _, c := range bad {
		t.Run("error/"+c.name, func(t *testing.T) {
			if _, err := readSnapshot(bytes.NewReader(c.b)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
	// A reader's own error is passed on, not called corruption.
	boom := errors.New("boom")
	if _, err := readSnapshot(iotest.ErrReader(boom)); !errors.Is(err, boom) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("reader error: %v", err)
	}
}

// TestSnapshotLyingLengths: counts and lengths that the stream does not
// back cost no more memory than the stream holds.
func TestSnapshotLyingLengths(t *testing.T) {
	b := []byte{1}
	b = binary.AppendUvarint(b, 1<<62) // count
	b = append(b, 1, 0)
	b = binary.AppendUvarint(b, maxMessageBytes) // a 1 GiB message
	b = append(b, "only this"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := readSnapshot(bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
		t.Fatalf("allocated %d bytes for a %d-byte snapshot", n, len(b))
	}
}

// FuzzReadSnapshot feeds the decoder arbitrary streams, read in pieces
// whose sizes come from split: it fails with ErrCorrupt or decodes a
// state that re-encodes and decodes to itself.
func FuzzReadSnapshot(f *testing.F) {
	for _, c := range snapshotCases {
		f.Add(binary.BigEndian.AppendUint32(bytes.Clone(c.body), c.crc), uint64(0))
		f.Add(binary.BigEndian.AppendUint32(bytes.Clone(c.body), c.crc), uint64(0x123456789))
		f.Add(c.body, uint64(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, split uint64) {
		ents, err := readSnapshot(&splitReader{b: b, split: split})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, not ErrCorrupt", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := writeSnapshot(&buf, ents); err != nil {
			t.Fatal(err)
		}
		again, err := readSnapshot(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := equalEntries(again, ents); err != nil {
			t.Fatal(err)
		}
	})
}

// splitReader returns b in pieces of 1 to 16 bytes, sizes taken from the
// nibbles of split.
type splitReader struct {
	b     []byte
	split uint64
	i     int
}

func (r *splitReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := int(r.split>>(4*(r.i%16))&15) + 1
	r.i++
	n = min(n, len(p), len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// TestFSMMessagesConcurrent walks the state while entries are applied
// (run with -race): every message present throughout is seen once, in
// order.
func TestFSMMessagesConcurrent(t *testing.T) {
	f := NewFSM()
	for i := uint64(0); i < 2000; i++ {
		f.Apply(command(op{opAppend, i, []byte("stable")}))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(2000); i < 6000; i++ {
			f.Apply(command(op{opAppend, i, []byte("new")}, op{opDelete, i - 1000, nil}))
		}
	}()
	for k := 0; k < 20; k++ {
		seen := map[uint64]bool{}
		prev := int64(-1)
		f.Messages(func(seq uint64, data []byte, _ uint32) bool {
			if int64(seq) <= prev {
				t.Errorf("seq %d after %d", seq, prev)
			}
			prev = int64(seq)
			seen[seq] = true
			_ = f.Len() // the walk holds no lock
			return true
		})
		for i := uint64(0); i < 1000; i++ { // never deleted
			if !seen[i] {
				t.Fatalf("walk %d missed seq %d", k, i)
			}
		}
	}
	wg.Wait()
	n := 0
	f.Messages(func(uint64, []byte, uint32) bool { n++; return n < 10 })
	if n != 10 {
		t.Fatalf("walk did not stop: %d", n)
	}
}
