package frame

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

// TestReaderGrowsAsBytesArrive: a frame that declares a large body and
// sends little of it costs about what it sent, never the declared size.
func TestReaderGrowsAsBytesArrive(t *testing.T) {
	const declared = 100 << 20
	sent := 64 << 10
	in := []byte("SEND\ndestination:/queue/a\ncontent-length:" + strconv.Itoa(declared) + "\n\n")
	in = append(in, bytes.Repeat([]byte("b"), sent)...)
	r := NewReader(&chunkReader{data: in, sizes: chunks(len(in), 4096)}, Limits{MaxBodySize: 128 << 20})
	_, err := r.Read()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err %v, want unexpected EOF", err)
	}
	if c := cap(r.buf); c > 2*len(in)+initialBuf {
		t.Fatalf("buffer of %d bytes for %d bytes read (declared %d)", c, len(in), declared)
	}
}

// TestReaderPreAuthBound: under a small limit (before login) neither a
// declared content-length, an unterminated body nor an endless header makes
// the buffer exceed the limit; the Reader answers "Frame too large" or
// "Header too long". SetLimits then raises the bound for what follows.
func TestReaderPreAuthBound(t *testing.T) {
	const bound = 8 << 10
	lim := Limits{MaxFrameSize: bound, MaxBodySize: bound, MaxHeaderLength: bound}
	for _, c := range []struct{ name, in, err string }{
		{"declared", "CONNECT\ncontent-length:120000000\n\n" + strings.Repeat("x", 64<<10), "Frame too large"},
		{"unterminated body", "CONNECT\nlogin:a\n\n" + strings.Repeat("x", 64<<10), "Frame too large"},
		{"long header", "CONNECT\nlogin:" + strings.Repeat("x", 64<<10), "Frame too large"},
		{"many headers", "CONNECT\n" + strings.Repeat("a:b\n", 16<<10), "Frame too large"},
		{"long command", strings.Repeat("C", 64<<10), "Frame too large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(&chunkReader{data: []byte(c.in), sizes: chunks(len(c.in), 1000)}, lim)
			_, err := r.Read()
			var fe *Error
			if !errors.As(err, &fe) || fe.Message != c.err {
				t.Fatalf("err %v, want %s", err, c.err)
			}
			if cap(r.buf) > max(bound, initialBuf) {
				t.Fatalf("buffer grew to %d bytes, bound %d", cap(r.buf), bound)
			}
		})
	}
	// A CONNECT within the bound, then a larger SEND once the limits are
	// raised (what the server does after login).
	body := strings.Repeat("y", 3*bound)
	in := "CONNECT\nlogin:a\n\n\x00SEND\ndestination:/queue/a\n\n" + body + "\x00"
	r := NewReader(&chunkReader{data: []byte(in), sizes: chunks(len(in), 1000)}, lim)
	if f, err := r.Read(); err != nil || f.Command != CONNECT {
		t.Fatalf("connect: %v %v", f.Command, err)
	}
	r.SetLimits(Limits{})
	if f, err := r.Read(); err != nil || string(f.Body) != body {
		t.Fatalf("send after SetLimits: %d bytes, %v", len(f.Body), err)
	}
	// A frame of exactly the bound fits.
	exact := "CONNECT\n\n" + strings.Repeat("z", bound-len("CONNECT\n\n")-1) + "\x00"
	r = NewReader(&chunkReader{data: []byte(exact), sizes: chunks(len(exact), 700)}, lim)
	if f, err := r.Read(); err != nil || len(f.Body) != bound-len("CONNECT\n\n")-1 {
		t.Fatalf("frame of exactly %d bytes: %d, %v", bound, len(f.Body), err)
	}
}

// chunks returns sizes of n bytes, enough pieces to cover total.
func chunks(total, n int) []int {
	s := make([]int, total/n+1)
	for i := range s {
		s[i] = n
	}
	return s
}
