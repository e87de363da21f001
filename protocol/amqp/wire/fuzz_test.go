package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// The fuzz property of every target: no panic; a failure is a typed
// *Error (or io.ErrUnexpectedEOF / io.EOF for frames); whatever decodes
// re-encodes, and the re-encoding decodes to the same value.

func checkWireError(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *wire.Error", err, err)
	}
	if !e.ConnectionScope || !IsHardError(e.Code) || len(e.Text) > 255 {
		t.Fatalf("bad error %+v", e)
	}
}

func FuzzDecodeMethod(f *testing.F) {
	for _, tc := range goldenMethods {
		f.Add(tc.payload)
	}
	for _, m := range allMethods() {
		fill(m, true)
		b, _ := AppendMethod(nil, m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMethod(data)
		if err != nil {
			checkWireError(t, err)
			return
		}
		b, err := AppendMethod(nil, m)
		if err != nil {
			t.Fatalf("re-encoding %#v: %v", m, err)
		}
		m2, err := DecodeMethod(b)
		if err != nil {
			t.Fatalf("decoding re-encoded %x: %v", b, err)
		}
		if !same(m, m2) {
			t.Fatalf("round trip changed %#v into %#v", m, m2)
		}
	})
}

func FuzzDecodeContentHeader(f *testing.F) {
	for _, tc := range goldenHeaders {
		f.Add(tc.payload)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		class, size, p, err := DecodeContentHeader(data)
		if err != nil {
			checkWireError(t, err)
			return
		}
		b, err := AppendContentHeader(nil, class, size, &p)
		if err != nil {
			t.Fatalf("re-encoding %#v: %v", p, err)
		}
		class2, size2, p2, err := DecodeContentHeader(b)
		if err != nil {
			t.Fatalf("decoding re-encoded %x: %v", b, err)
		}
		if class != class2 || size != size2 || !same(p, p2) {
			t.Fatalf("round trip changed %#v into %#v", p, p2)
		}
	})
}

func FuzzTable(f *testing.F) {
	for _, tc := range goldenTables {
		f.Add(tc)
	}
	f.Add(goldenHeaders[0].payload[25:37])
	f.Add(goldenMethods[4].payload[13:])
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := DecodeTable(data)
		if err != nil {
			checkWireError(t, err)
			return
		}
		b, err := AppendTable(nil, tab)
		if err != nil {
			t.Fatalf("re-encoding %#v: %v", tab, err)
		}
		if len(b) > len(data) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(data), len(b))
		}
		tab2, err := DecodeTable(b)
		if err != nil {
			t.Fatalf("decoding re-encoded %x: %v", b, err)
		}
		if !same(tab, tab2) {
			t.Fatalf("round trip changed %#v into %#v", tab, tab2)
		}
	})
}

// FuzzReadFrame feeds a stream whole and split at a fuzzer-chosen point
// (and byte by byte), and requires ReadFrame and ParseFrame to agree.
func FuzzReadFrame(f *testing.F) {
	all := bytes.Join(goldenFrames, nil)
	f.Add(all, uint16(3), uint32(0))
	f.Add(all, uint16(100), uint32(4096))
	f.Add(goldenFrames[0], uint16(0), uint32(30))
	f.Fuzz(func(t *testing.T, data []byte, split uint16, maxSize uint32) {
		if maxSize != 0 && maxSize < FrameOverhead {
			maxSize = FrameOverhead
		}
		type result struct {
			frames [][]byte
			err    error
		}
		read := func(r io.Reader) result {
			var res result
			br := bufio.NewReaderSize(r, 16)
			var buf []byte
			for {
				fr, err := ReadFrame(br, maxSize, buf)
				if err != nil {
					res.err = err
					return res
				}
				res.frames = append(res.frames, AppendFrame(nil, fr.Type, fr.Channel, fr.Payload))
				buf = fr.Payload[:0]
			}
		}
		whole := read(bytes.NewReader(data))
		at := int(split) % (len(data) + 1)
		parts := []io.Reader{read2(data[:at], data[at:]), oneByte(data)}
		for _, r := range parts {
			got := read(r)
			if len(got.frames) != len(whole.frames) || !sameErr(got.err, whole.err) {
				t.Fatalf("split reading gave %d frames, %v; whole %d, %v", len(got.frames), got.err, len(whole.frames), whole.err)
			}
		}
		// Frames re-encode to exactly the bytes they came from, and
		// ParseFrame finds the same frames and the same failure.
		rest := data
		for i, want := range whole.frames {
			if !bytes.HasPrefix(rest, want) {
				t.Fatalf("frame %d re-encoded %x, input %x", i, want, rest[:min(len(rest), len(want))])
			}
			fr, n, err := ParseFrame(rest, maxSize)
			if err != nil || n != len(want) || !bytes.Equal(AppendFrame(nil, fr.Type, fr.Channel, fr.Payload), want) {
				t.Fatalf("ParseFrame %d: %v", i, err)
			}
			rest = rest[n:]
		}
		switch err := whole.err; {
		case err == io.EOF:
			if len(rest) != 0 {
				t.Fatalf("io.EOF with %d bytes left", len(rest))
			}
		case err == io.ErrUnexpectedEOF:
			if _, _, perr := ParseFrame(rest, maxSize); perr != io.ErrUnexpectedEOF {
				t.Fatalf("ParseFrame on truncated input: %v", perr)
			}
		default:
			checkWireError(t, err)
			if _, _, perr := ParseFrame(rest, maxSize); !sameErr(perr, err) {
				t.Fatalf("ParseFrame: %v, ReadFrame: %v", perr, err)
			}
		}
	})
}

func read2(a, b []byte) io.Reader { return io.MultiReader(bytes.NewReader(a), bytes.NewReader(b)) }

func oneByte(b []byte) io.Reader { return &oneByteReader{b} }

type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

func sameErr(a, b error) bool {
	var ea, eb *Error
	if errors.As(a, &ea) && errors.As(b, &eb) {
		return *ea == *eb
	}
	return a == b
}
