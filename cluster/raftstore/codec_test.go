package raftstore

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

var codecGolden = []struct {
	name string
	log  raft.Log
	enc  []byte
}{
	{"zero", raft.Log{Index: 1}, []byte{1, 0, 0, 0, 0, 0}},
	{"command", raft.Log{Index: 2, Term: 300, Type: raft.LogCommand, Data: []byte("ab")},
		[]byte{1, 0, 0, 0xac, 0x02, 2, 'a', 'b', 0}},
	{"ext+time", raft.Log{Index: 3, Term: 1, Type: raft.LogConfiguration, Extensions: []byte{9},
		AppendedAt: time.Unix(0, 5).UTC()},
		[]byte{1, 1, 5, 1, 10, 0, 1, 9}},
}

func TestCodecGolden(t *testing.T) {
	for _, c := range codecGolden {
		t.Run(c.name, func(t *testing.T) {
			enc := encodeLog(nil, &c.log)
			if !bytes.Equal(enc, c.enc) {
				t.Fatalf("encode = %v, want %v", enc, c.enc)
			}
			var got raft.Log
			if err := decodeLog(enc, c.log.Index, &got); err != nil {
				t.Fatal(err)
			}
			if !sameLog(&got, &c.log) {
				t.Fatalf("decode = %+v, want %+v", got, c.log)
			}
		})
	}
}

func TestCodecRejects(t *testing.T) {
	for _, b := range [][]byte{
		nil, {1}, {2, 0, 0, 0, 0, 0}, {1, 4, 0, 0, 0, 0}, {1, 0, 0, 0, 5, 'a'},
		{1, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0x80}, {1, 1, 0, 0},
	} {
		var l raft.Log
		if err := decodeLog(b, 1, &l); err != ErrCorrupt {
			t.Errorf("decode(%v) = %v, want ErrCorrupt", b, err)
		}
	}
}

// FuzzCodec: decoding never panics, and what decodes re-encodes to bytes
// that decode to the same entry (not always the same bytes: a varint may
// have been written long).
func FuzzCodec(f *testing.F) {
	for _, c := range codecGolden {
		f.Add(c.enc)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeLog(b, 7, &l); err != nil {
			return
		}
		enc := encodeLog(nil, &l)
		var again raft.Log
		if err := decodeLog(enc, 7, &again); err != nil || !sameLog(&again, &l) {
			t.Fatalf("re-encoded %v decodes to %+v, %v; want %+v", enc, again, err, l)
		}
	})
}
