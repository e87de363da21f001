package quorum

import (
	"bytes"
	"errors"
	"testing"
)

// entryCases is the golden table of the entry codec: the ops and their
// exact encoding.
var entryCases = []struct {
	name string
	ops  []op
	enc  []byte
}{
	{"empty", nil, []byte{2}},
	{"append", []op{dop(opAppend, 5, []byte("hi"))}, []byte{2, 1, 5, 2, 'h', 'i'}},
	{"append empty data", []op{dop(opAppend, 0, []byte{})}, []byte{2, 1, 0, 0}},
	{"delete", []op{dop(opDelete, 300, nil)}, []byte{2, 2, 0xac, 0x02}},
	{"return", []op{dop(opReturn, 1, nil)}, []byte{2, 3, 1}},
	{"hold", []op{dop(opHold, 7, []byte("r"))}, []byte{2, 4, 7, 1, 'r'}},
	{"release", []op{dop(opRelease, 7, nil)}, []byte{2, 5, 7}},
	{"mixed", []op{dop(opAppend, 1, []byte("a")), dop(opReturn, 1, nil), dop(opDelete, 1, nil), dop(opAppend, 1<<64-1, []byte("bc"))},
		[]byte{2, 1, 1, 1, 'a', 3, 1, 2, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2, 'b', 'c'}},
	// An entry with a range delete is of version 3.
	{"delete range", []op{rop(10, 300, 290, 1000)}, []byte{3, 6, 10, 0xac, 0x02, 0xa2, 0x02, 0xe8, 0x07}},
	{"delete range of one", []op{rop(0, 1, 0, 0)}, []byte{3, 6, 0, 1, 0, 0}},
	{"delete range, top group", []op{rop(0xff<<56, 1<<64-1, 3, 9)},
		[]byte{3, 6, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0xff, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 3, 9}},
	{"mixed with a range", []op{dop(opAppend, 9, []byte("z")), rop(2, 5, 3, 30), dop(opHold, 4, []byte("h")), dop(opDelete, 9, nil)},
		[]byte{3, 1, 9, 1, 'z', 6, 2, 5, 3, 30, 4, 4, 1, 'h', 2, 9}},
}

// dop is an op without range fields; rop a range delete.
func dop(kind opKind, seq uint64, data []byte) op { return op{kind: kind, seq: seq, data: data} }

func rop(from, to, count, bytes uint64) op {
	return op{kind: opDeleteRange, seq: from, to: to, count: count, bytes: bytes}
}

// Version 2 entries written before ranges existed decode as they did:
// the table's version 2 cases are such entries, byte for byte.

var entryErrors = []struct {
	name string
	enc  []byte
}{
	{"nil", nil},
	{"version 0", []byte{0}},
	{"kind 0", []byte{2, 0, 1}},
	{"kind 6 in a version 2 entry", []byte{2, 6, 1, 2, 1, 1}},
	{"kind 7", []byte{3, 7, 1}},
	{"range in a legacy entry", []byte{1, 6, 1, 2, 1, 1}},
	{"version 4", []byte{4}},
	{"range without its end", []byte{3, 6, 1}},
	{"range without its count", []byte{3, 6, 1, 2}},
	{"range without its bytes", []byte{3, 6, 1, 2, 1}},
	{"empty range", []byte{3, 6, 5, 5, 0, 0}},
	{"range backwards", []byte{3, 6, 5, 4, 0, 0}},
	{"range count past its width", []byte{3, 6, 5, 7, 3, 0}},
	{"range across key groups", []byte{3, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 1, 0}},
	{"range bytes past int64", []byte{3, 6, 1, 2, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	{"hold in a legacy entry", []byte{1, 4, 1, 0}},
	{"legacy seq out of range", []byte{1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0x01}},
	{"no seq", []byte{2, 2}},
	{"seq overflow", []byte{2, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
	{"no length", []byte{2, 1, 1}},
	{"short data", []byte{2, 1, 1, 3, 'a', 'b'}},
	{"huge length", []byte{2, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
}

func sameOp(a, b op) bool {
	return a.kind == b.kind && a.seq == b.seq && bytes.Equal(a.data, b.data) &&
		a.to == b.to && a.count == b.count && a.bytes == b.bytes
}

func encodeOps(ops []op) []byte {
	b := newEntry(0)
	for _, o := range ops {
		n := len(b)
		b = appendOp(b, o)
		if len(b)-n != opSize(o) {
			panic("opSize disagrees with appendOp")
		}
	}
	return b
}

func TestEntryCodec(t *testing.T) {
	for _, c := range entryCases {
		t.Run(c.name, func(t *testing.T) {
			if got := encodeOps(c.ops); !bytes.Equal(got, c.enc) {
				t.Fatalf("encode = %v, want %v", got, c.enc)
			}
			ops, err := decodeEntry(c.enc, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != len(c.ops) {
				t.Fatalf("decoded %d ops, want %d", len(ops), len(c.ops))
			}
			for i, o := range ops {
				w := c.ops[i]
				if !sameOp(o, w) {
					t.Errorf("op %d = %+v, want %+v", i, o, w)
				}
			}
		})
	}
	for _, c := range entryErrors {
		t.Run("error/"+c.name, func(t *testing.T) {
			if _, err := decodeEntry(c.enc, nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzDecodeEntry: any input decodes or fails with ErrCorrupt; what
// decodes re-encodes to the same bytes (the encoding is canonical but for
// over-long varints, which re-encode shorter, so those are compared as
// ops).
func FuzzDecodeEntry(f *testing.F) {
	for _, c := range entryCases {
		f.Add(c.enc)
	}
	for _, c := range entryErrors {
		f.Add(c.enc)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := decodeEntry(b, nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, not ErrCorrupt", err)
			}
			return
		}
		if len(ops) > len(b)/2 {
			t.Fatalf("%d ops from %d bytes", len(ops), len(b))
		}
		again, err := decodeEntry(encodeOps(ops), nil)
		if err != nil || len(again) != len(ops) {
			t.Fatalf("re-decode: %v, %d ops, want %d", err, len(again), len(ops))
		}
		for i := range ops {
			if !sameOp(again[i], ops[i]) {
				t.Fatalf("op %d changed by a round trip", i)
			}
		}
		// Applying whatever decodes never panics.
		var s state
		for _, o := range ops {
			switch o.kind {
			case opAppend:
				s.add(o.seq, len(o.data))
			case opDelete:
				s.del(o.seq)
			case opReturn:
				s.ret(o.seq)
			case opDeleteRange:
				if !validRange(o.seq, o.to, o.count) {
					t.Fatalf("decoded a bad range %+v", o)
				}
				s.delRange(o.seq, o.to, int64(o.count), int64(o.bytes))
			}
		}
		if s.count() < 0 || s.bytes() < 0 {
			t.Fatalf("negative counts: %d, %d", s.count(), s.bytes())
		}
	})
}
