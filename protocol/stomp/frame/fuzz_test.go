package frame

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the Reader, whole and split at a
// point chosen by the fuzzer, for each version. It checks that the Reader
// never panics, that both feedings decode the same frames, that memory
// stays within the limits, and that every frame re-encodes to something
// that decodes to the same frame.
func FuzzReader(f *testing.F) {
	for _, g := range goldens {
		f.Add([]byte(g.in), uint16(len(g.in)/2), uint8(g.v))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint16, ver uint8) {
		v := Version(ver%3) + V10
		lim := Limits{MaxFrameSize: 4096, MaxHeaders: 16, MaxHeaderLength: 256, MaxBodySize: 2048}
		whole, werr := decodeAll(bytes.NewReader(in), v, lim)
		cut := int(split) % (len(in) + 1)
		parts, perr := decodeAll(&chunkReader{data: in, sizes: []int{cut}}, v, lim)
		if len(whole) != len(parts) {
			t.Fatalf("whole gave %d frames (%v), split gave %d (%v)", len(whole), werr, len(parts), perr)
		}
		for i := range whole {
			if !sameFrame(&whole[i], &parts[i]) {
				t.Fatalf("frame %d differs: %+v vs %+v", i, whole[i], parts[i])
			}
			if len(whole[i].Body) > lim.MaxBodySize || len(whole[i].Headers) > lim.MaxHeaders {
				t.Fatalf("frame %d over the limits", i)
			}
			// Re-encode and decode again.
			enc := Append(nil, &whole[i], v)
			again, err := decodeAll(bytes.NewReader(enc), v, Limits{})
			if err != nil && !errors.Is(err, io.EOF) || len(again) != 1 {
				t.Fatalf("re-encoded frame %q does not decode: %v", enc, err)
			}
			if !bytes.Equal(again[0].Body, whole[i].Body) || again[0].Command != whole[i].Command {
				t.Fatalf("round trip changed frame %d", i)
			}
		}
		var fe *Error
		if errors.As(werr, &fe) != errors.As(perr, &fe) {
			t.Fatalf("whole error %v, split error %v", werr, perr)
		}
	})
}

func decodeAll(src io.Reader, v Version, lim Limits) ([]Frame, error) {
	r := NewReader(src, lim)
	r.SetVersion(v)
	var out []Frame
	for {
		f, err := r.Read()
		if err != nil {
			return out, err
		}
		if cap(r.buf) > max(r.lim.MaxFrameSize, initialBuf) {
			return out, errors.New("buffer grew past the frame limit")
		}
		out = append(out, Frame{Command: f.Command, Headers: append([]Header(nil), f.Headers...), Body: f.Body})
	}
}

func sameFrame(a, b *Frame) bool {
	if a.Command != b.Command || !bytes.Equal(a.Body, b.Body) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i] != b.Headers[i] {
			return false
		}
	}
	return true
}

// FuzzReaderPreAuth reads the first frame under a small bound (a server's
// limit before login), then raises the limits (SetLimits, after login)
// and reads on. Whole and split feedings must agree, and before the first
// frame is returned the buffer never exceeds the small bound.
func FuzzReaderPreAuth(f *testing.F) {
	for _, g := range goldens {
		f.Add([]byte(g.in), uint16(len(g.in)/2))
	}
	f.Add([]byte("CONNECT\ncontent-length:120000000\n\n"+strings.Repeat("x", 2000)), uint16(40))
	f.Add([]byte("CONNECT\nlogin:a\n\n\x00SEND\ndestination:/queue/a\n\n"+strings.Repeat("y", 3000)+"\x00"), uint16(17))
	f.Fuzz(func(t *testing.T, in []byte, split uint16) {
		pre := Limits{MaxFrameSize: 1024, MaxHeaders: 16, MaxHeaderLength: 256, MaxBodySize: 1024}
		post := Limits{MaxFrameSize: 8192, MaxHeaders: 16, MaxHeaderLength: 256, MaxBodySize: 4096}
		read := func(src io.Reader) ([]Frame, error) {
			r := NewReader(src, pre)
			var out []Frame
			for {
				fr, err := r.Read()
				if len(out) == 0 && cap(r.buf) > max(pre.MaxFrameSize, initialBuf) {
					t.Fatalf("buffer of %d bytes before the first frame", cap(r.buf))
				}
				if err != nil {
					return out, err
				}
				if len(out) == 0 {
					if len(fr.Body)+len(fr.Command) > pre.MaxFrameSize {
						t.Fatalf("first frame over the pre-login bound")
					}
					r.SetLimits(post)
				}
				out = append(out, Frame{Command: fr.Command, Headers: append([]Header(nil), fr.Headers...), Body: fr.Body})
			}
		}
		whole, werr := read(bytes.NewReader(in))
		cut := int(split) % (len(in) + 1)
		parts, perr := read(&chunkReader{data: in, sizes: []int{cut}})
		if len(whole) != len(parts) {
			t.Fatalf("whole gave %d frames (%v), split gave %d (%v)", len(whole), werr, len(parts), perr)
		}
		for i := range whole {
			if !sameFrame(&whole[i], &parts[i]) {
				t.Fatalf("frame %d differs", i)
			}
		}
		var fe *Error
		if errors.As(werr, &fe) != errors.As(perr, &fe) {
			t.Fatalf("whole error %v, split error %v", werr, perr)
		}
	})
}
