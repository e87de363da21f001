package mux

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// headerCases are golden encodings.
var headerCases = []struct {
	name string
	h    Header
	wire []byte
}{
	{"minimal", Header{Stream: "s"}, []byte("TRMX\x02\x01s\x00\x00")},
	{"raft", Header{Stream: "raft/meta", Nonce: "secret", Addr: "10.0.0.1:25673"},
		[]byte("TRMX\x02\x09raft/meta\x06secret\x0e10.0.0.1:25673")},
	{"max", Header{Stream: strings.Repeat("a", 255), Nonce: strings.Repeat("b", 255), Addr: strings.Repeat("c", 255)},
		[]byte("TRMX\x02\xff" + strings.Repeat("a", 255) + "\xff" + strings.Repeat("b", 255) + "\xff" + strings.Repeat("c", 255))},
}

func TestHeaderGolden(t *testing.T) {
	for _, tc := range headerCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AppendHeader(nil, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.wire) {
				t.Fatalf("encode = %q, want %q", got, tc.wire)
			}
			h, n, err := DecodeHeader(append(tc.wire, "trailing"...))
			if err != nil || n != len(tc.wire) || h != tc.h {
				t.Fatalf("decode = %+v, %d, %v", h, n, err)
			}
			if len(tc.wire) > MaxHeaderLen {
				t.Fatalf("len %d > MaxHeaderLen", len(tc.wire))
			}
			// Every prefix is short and asks for more, but never past the header.
			for i := range len(tc.wire) {
				_, need, err := DecodeHeader(tc.wire[:i])
				if !errors.Is(err, ErrShortHeader) || need <= i || need > len(tc.wire) {
					t.Fatalf("prefix %d: need %d, %v", i, need, err)
				}
			}
		})
	}
}

func TestHeaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire string
		want error
	}{
		{"magic", "HTTP/1.1", ErrBadMagic},
		{"magic prefix", "GE", ErrBadMagic},
		{"version", "TRMX\x01\x01s\x00\x00", ErrBadVersion},
		{"empty stream", "TRMX\x02\x00\x00\x00", ErrBadHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := DecodeHeader([]byte(tc.wire)); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := AppendHeader(nil, Header{}); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("empty stream: %v", err)
	}
	if _, err := AppendHeader(nil, Header{Stream: "s", Nonce: strings.Repeat("x", 256)}); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("long cookie: %v", err)
	}
}

// FuzzDecodeHeader: the decoder never panics, never asks for more than
// MaxHeaderLen, and what it decodes re-encodes to the bytes it took; fed
// in random pieces it reaches the same result.
func FuzzDecodeHeader(f *testing.F) {
	for _, tc := range headerCases {
		f.Add(tc.wire, uint8(3))
	}
	f.Add([]byte("TRMX\x01"), uint8(1))
	f.Add([]byte("garbage"), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, seed uint8) {
		h, n, err := DecodeHeader(b)
		switch {
		case errors.Is(err, ErrShortHeader):
			if n <= len(b) || n > MaxHeaderLen {
				t.Fatalf("short: need %d with %d bytes", n, len(b))
			}
		case err == nil:
			enc, err := AppendHeader(nil, h)
			if err != nil || !bytes.Equal(enc, b[:n]) {
				t.Fatalf("re-encode %q != %q (%v)", enc, b[:n], err)
			}
		}
		// Incremental: read exactly as much as asked, in random pieces.
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		var buf []byte
		for {
			h2, need, err2 := DecodeHeader(buf)
			if !errors.Is(err2, ErrShortHeader) {
				if (err2 == nil) != (err == nil) || h2 != h {
					t.Fatalf("incremental %+v %v, whole %+v %v", h2, err2, h, err)
				}
				return
			}
			if len(buf) == len(b) { // all there is, and still short
				if !errors.Is(err, ErrShortHeader) {
					t.Fatalf("incremental short at %d bytes, whole said %v", len(b), err)
				}
				return
			}
			step := len(buf) + 1 + r.IntN(need-len(buf))
			buf = b[:min(step, need, len(b))]
		}
	})
}
