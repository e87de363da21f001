package meta

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/trident-broker/trident/exchange"
)

var entryCases = []struct {
	name string
	ops  []exchange.MetaOp
	wire []byte
}{
	{"empty", nil, []byte{1, 0}},
	{"put", []exchange.MetaOp{{Key: "vhost/a", Val: []byte("{}")}},
		[]byte("\x01\x01\x02\x07vhost/a\x02{}")},
	{"empty value", []exchange.MetaOp{{Key: "k", Val: []byte{}}}, []byte("\x01\x01\x02\x01k\x00")},
	{"create", []exchange.MetaOp{{Key: "k", Val: []byte("v"), Create: true}}, []byte("\x01\x01\x06\x01k\x01v")},
	{"delete and prefix", []exchange.MetaOp{{Key: "user/x"}, {Key: "perm/%2F/", Prefix: true}},
		[]byte("\x01\x02\x00\x06user/x\x01\x09perm/%2F/")},
}

func TestEntryGolden(t *testing.T) {
	for _, tc := range entryCases {
		t.Run(tc.name, func(t *testing.T) {
			got := EncodeOps(tc.ops)
			if !bytes.Equal(got, tc.wire) {
				t.Fatalf("encode = %q, want %q", got, tc.wire)
			}
			ops, err := DecodeOps(tc.wire)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != len(tc.ops) || (len(ops) > 0 && !reflect.DeepEqual(ops, tc.ops)) {
				t.Fatalf("decode = %+v", ops)
			}
			for i := range len(tc.wire) - 1 {
				if _, err := DecodeOps(tc.wire[:i]); !errors.Is(err, ErrBadEntry) {
					t.Fatalf("prefix %d: %v", i, err)
				}
			}
		})
	}
	for _, bad := range []string{"", "\x02\x00", "\x01\x01\x03\x01k\x00", "\x01\x01\x04\x01k", "\x01\x01\x05\x01k", "\x01\x00x", "\x01\xff\xff\xff\xff\x0f"} {
		if _, err := DecodeOps([]byte(bad)); !errors.Is(err, ErrBadEntry) {
			t.Errorf("DecodeOps(%q) = %v", bad, err)
		}
	}
}

// FuzzDecodeOps: no panic; what decodes survives a re-encode (varints
// need not be minimal, so the bytes may differ).
func FuzzDecodeOps(f *testing.F) {
	for _, tc := range entryCases {
		f.Add(tc.wire)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := DecodeOps(b)
		if err != nil {
			return
		}
		again, err := DecodeOps(EncodeOps(ops))
		if err != nil || len(again) != len(ops) || (len(ops) > 0 && !reflect.DeepEqual(again, ops)) {
			t.Fatalf("round trip %+v -> %+v, %v", ops, again, err)
		}
	})
}

func TestSnapshotCodec(t *testing.T) {
	b := appendSnapshotHeader(nil, 42)
	b = appendRecord(b, "queue/%2F/q", []byte("{}"))
	b = appendRecord(b, "vhost/%2F", []byte{})
	idx, recs, err := decodeSnapshot(b)
	if err != nil || idx != 42 || len(recs) != 2 || string(recs["queue/%2F/q"]) != "{}" || recs["vhost/%2F"] == nil {
		t.Fatalf("decode = %d %q %v", idx, recs, err)
	}
	for i := range len(b) {
		if i == 12 || i == 12+1+11+1+2 {
			continue // record boundaries: a shorter valid snapshot
		}
		if _, _, err := decodeSnapshot(b[:i]); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(appendRecord(appendSnapshotHeader(nil, 7), "k", []byte("v")))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = decodeSnapshot(b)
	})
}
