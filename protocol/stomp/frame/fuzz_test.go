package frame

import (
	"bytes"
	"errors"
	"io"
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
		if cap(r.buf) > r.lim.MaxFrameSize+2*minRead {
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
