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
	{"append", []op{{opAppend, 5, []byte("hi")}}, []byte{2, 1, 5, 2, 'h', 'i'}},
	{"append empty data", []op{{opAppend, 0, []byte{}}}, []byte{2, 1, 0, 0}},
	{"delete", []op{{opDelete, 300, nil}}, []byte{2, 2, 0xac, 0x02}},
	{"return", []op{{opReturn, 1, nil}}, []byte{2, 3, 1}},
	{"hold", []op{{opHold, 7, []byte("r")}}, []byte{2, 4, 7, 1, 'r'}},
	{"release", []op{{opRelease, 7, nil}}, []byte{2, 5, 7}},
	{"mixed", []op{{opAppend, 1, []byte("a")}, {opReturn, 1, nil}, {opDelete, 1, nil}, {opAppend, 1<<64 - 1, []byte("bc")}},
		[]byte{2, 1, 1, 1, 'a', 3, 1, 2, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2, 'b', 'c'}},
}

var entryErrors = []struct {
	name string
	enc  []byte
}{
	{"nil", nil},
	{"version", []byte{3}},
	{"kind 0", []byte{2, 0, 1}},
	{"kind 6", []byte{2, 6, 1}},
	{"hold in a legacy entry", []byte{1, 4, 1, 0}},
	{"legacy seq out of range", []byte{1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0x01}},
	{"no seq", []byte{2, 2}},
	{"seq overflow", []byte{2, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
	{"no length", []byte{2, 1, 1}},
	{"short data", []byte{2, 1, 1, 3, 'a', 'b'}},
	{"huge length", []byte{2, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
}

func encodeOps(ops []op) []byte {
	b := newEntry(0)
	for _, o := range ops {
		n := len(b)
		b = appendOp(b, o.kind, o.seq, o.data)
		if len(b)-n != opSize(o.kind, o.seq, o.data) {
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
				if o.kind != w.kind || o.seq != w.seq || !bytes.Equal(o.data, w.data) {
					t.Errorf("op %d = %v %d %q, want %v %d %q", i, o.kind, o.seq, o.data, w.kind, w.seq, w.data)
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
			if again[i].kind != ops[i].kind || again[i].seq != ops[i].seq || !bytes.Equal(again[i].data, ops[i].data) {
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
			}
		}
		if s.count() < 0 || s.bytes() < 0 {
			t.Fatalf("negative counts: %d, %d", s.count(), s.bytes())
		}
	})
}
