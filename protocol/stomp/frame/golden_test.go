package frame

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// golden is a table of wire inputs and what they decode to.
type golden struct {
	name string
	in   string
	v    Version
	lim  Limits
	want []Frame // frames in order (heart-beats skipped)
	err  string  // Error.Message expected after the frames, "" for clean EOF
}

var goldens = []golden{
	{name: "connect 1.2", in: "CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:gu\\cest\n\n\x00", v: V10,
		want: []Frame{{Command: "CONNECT", Headers: []Header{{"accept-version", "1.2"}, {"host", "/"}, {"login", "guest"}, {"passcode", `gu\cest`}}}}},
	{name: "send with body", in: "SEND\ndestination:/queue/a\n\nhello\x00", v: V12,
		want: []Frame{{Command: "SEND", Headers: []Header{{"destination", "/queue/a"}}, Body: []byte("hello")}}},
	{name: "content-length with NULs", in: "SEND\ndestination:/queue/a\ncontent-length:5\n\na\x00b\x00c\x00", v: V12,
		want: []Frame{{Command: "SEND", Headers: []Header{{"destination", "/queue/a"}, {"content-length", "5"}}, Body: []byte("a\x00b\x00c")}}},
	{name: "crlf lines", in: "SEND\r\ndestination:/queue/a\r\n\r\nx\x00", v: V12,
		want: []Frame{{Command: "SEND", Headers: []Header{{"destination", "/queue/a"}}, Body: []byte("x")}}},
	{name: "heart-beats between frames", in: "\n\r\n\nDISCONNECT\n\n\x00\n\nBEGIN\ntransaction:t\n\n\x00\r\n", v: V12,
		want: []Frame{{Command: "DISCONNECT"}, {Command: "BEGIN", Headers: []Header{{"transaction", "t"}}}}},
	{name: "1.2 escapes", in: "SEND\na\\cb:c\\nd\\re\\\\f\n\n\x00", v: V12,
		want: []Frame{{Command: "SEND", Headers: []Header{{"a:b", "c\nd\re\\f"}}}}},
	{name: "1.1 has no \\r escape", in: "SEND\na:b\\r\n\n\x00", v: V11, err: "Bad header"},
	{name: "undefined escape", in: "SEND\na:b\\t\n\n\x00", v: V12, err: "Bad header"},
	{name: "1.0 keeps backslashes and trims", in: "SEND\na: b\\c\n\n\x00", v: V10,
		want: []Frame{{Command: "SEND", Headers: []Header{{"a", `b\c`}}}}},
	{name: "repeated header kept in order", in: "SEND\na:1\na:2\n\n\x00", v: V12,
		want: []Frame{{Command: "SEND", Headers: []Header{{"a", "1"}, {"a", "2"}}}}},
	{name: "colon in value", in: "SEND\nx:a:b\n\n\x00", v: V10,
		want: []Frame{{Command: "SEND", Headers: []Header{{"x", "a:b"}}}}},
	{name: "header without colon", in: "SEND\nnocolon\n\n\x00", v: V12, err: "Bad header"},
	{name: "lowercase command", in: "send\n\n\x00", v: V12, err: "Bad frame"},
	{name: "bad content-length", in: "SEND\ncontent-length:x\n\n\x00", v: V12, err: "Bad content-length"},
	{name: "negative content-length", in: "SEND\ncontent-length:-1\n\n\x00", v: V12, err: "Bad content-length"},
	{name: "content-length without NUL", in: "SEND\ncontent-length:1\n\nab\x00", v: V12, err: "Bad frame"},
	{name: "body too large by length", in: "SEND\ncontent-length:11\n\n", v: V12, lim: Limits{MaxBodySize: 10}, err: "Frame too large"},
	{name: "body too large without length", in: "SEND\n\n" + strings.Repeat("x", 40), v: V12, lim: Limits{MaxBodySize: 10}, err: "Frame too large"},
	{name: "too many headers", in: "SEND\na:1\nb:2\nc:3\n\n\x00", v: V12, lim: Limits{MaxHeaders: 2}, err: "Too many headers"},
	{name: "header too long", in: "SEND\na:" + strings.Repeat("y", 100) + "\n\n\x00", v: V12, lim: Limits{MaxHeaderLength: 50}, err: "Header too long"},
	{name: "endless header", in: "SEND\na:" + strings.Repeat("y", 100), v: V12, lim: Limits{MaxHeaderLength: 50}, err: "Header too long"},
	{name: "truncated", in: "SEND\ndestination:/queue/a\n\nabc", v: V12, err: "EOF"},
}

// chunkReader returns its data in pieces of the given sizes (then the rest).
type chunkReader struct {
	data  []byte
	sizes []int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = min(n, c.sizes[0])
		c.sizes = c.sizes[1:]
	}
	n = min(n, len(p))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func readAll(t testing.TB, src io.Reader, g golden) ([]Frame, error) {
	r := NewReader(src, g.lim)
	r.SetVersion(g.v)
	var out []Frame
	for {
		f, err := r.Read()
		if err != nil {
			return out, err
		}
		hs := append([]Header(nil), f.Headers...) // Headers are reused by the next Read
		out = append(out, Frame{Command: f.Command, Headers: hs, Body: f.Body})
	}
}

func checkGolden(t *testing.T, g golden, got []Frame, err error) {
	t.Helper()
	if len(got) != len(g.want) {
		t.Fatalf("got %d frames %+v, want %d (err %v)", len(got), got, len(g.want), err)
	}
	for i := range got {
		if got[i].Command != g.want[i].Command || !reflect.DeepEqual(nonNil(got[i].Headers), nonNil(g.want[i].Headers)) ||
			!bytes.Equal(got[i].Body, g.want[i].Body) {
			t.Fatalf("frame %d: got %+v, want %+v", i, got[i], g.want[i])
		}
	}
	switch {
	case g.err == "":
		if !errors.Is(err, io.EOF) {
			t.Fatalf("want clean EOF, got %v", err)
		}
	case g.err == "EOF":
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("want unexpected EOF, got %v", err)
		}
	default:
		var fe *Error
		if !errors.As(err, &fe) || fe.Message != g.err {
			t.Fatalf("want *Error %q, got %v", g.err, err)
		}
	}
}

func nonNil(h []Header) []Header {
	if h == nil {
		return []Header{}
	}
	return h
}

func TestGolden(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			got, err := readAll(t, strings.NewReader(g.in), g)
			checkGolden(t, g, got, err)
			// One byte at a time.
			got, err = readAll(t, &chunkReader{data: []byte(g.in), sizes: ones(len(g.in))}, g)
			checkGolden(t, g, got, err)
			// Split at random points.
			rng := rand.New(rand.NewSource(int64(len(g.in))))
			for k := 0; k < 20; k++ {
				var sizes []int
				for rest := len(g.in); rest > 0; {
					n := 1 + rng.Intn(rest)
					sizes = append(sizes, n)
					rest -= n
				}
				got, err = readAll(t, &chunkReader{data: []byte(g.in), sizes: sizes}, g)
				checkGolden(t, g, got, err)
			}
		})
	}
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	for _, v := range []Version{V10, V11, V12} {
		f := Frame{Command: MESSAGE, Headers: []Header{{"destination", "/queue/a"}, {"weird", "a:b\\c\nd"}}, Body: []byte("x\x00y")}
		b := Append(nil, &f, v)
		r := NewReader(bytes.NewReader(b), Limits{})
		r.SetVersion(v)
		got, err := r.Read()
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		if !bytes.Equal(got.Body, f.Body) || got.Value("destination") != "/queue/a" {
			t.Fatalf("%v: got %+v", v, got)
		}
		if v >= V11 && got.Value("weird") != "a:b\\c\nd" {
			t.Fatalf("%v: escaped header came back as %q", v, got.Value("weird"))
		}
	}
}

// TestLargeBodyLinear checks that a big body without content-length arriving
// in small pieces is not rescanned per piece (it would time out).
func TestLargeBodyLinear(t *testing.T) {
	body := bytes.Repeat([]byte("z"), 8<<20)
	in := append([]byte("SEND\n\n"), body...)
	in = append(in, 0)
	sizes := make([]int, len(in)/1024+1)
	for i := range sizes {
		sizes[i] = 1024
	}
	r := NewReader(&chunkReader{data: in, sizes: sizes}, Limits{})
	f, err := r.Read()
	if err != nil || len(f.Body) != len(body) {
		t.Fatalf("got %d bytes, %v", len(f.Body), err)
	}
}

func BenchmarkParseSend(b *testing.B) {
	in := []byte("SEND\ndestination:/queue/bench\ncontent-length:16\n\n0123456789abcdef\x00")
	lim := Limits{}.WithDefaults()
	var hs []Header
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for i := 0; i < b.N; i++ {
		f, _, _, err := parse(in, V12, lim, hs)
		if err != nil {
			b.Fatal(err)
		}
		hs = f.Headers
	}
}

// TestParseErrors: Parse's error is nil (a nil interface, not a nil
// *Error in one) for a frame, heart-beats and incomplete input, and an
// *Error for a bad frame; it skips heart-beats as HeartBeats counts them.
func TestParseErrors(t *testing.T) {
	for _, in := range []string{"SEND\ndestination:/queue/a\n\nx\x00", "\n\r\n", "SEND\ndest", ""} {
		if _, _, err := Parse([]byte(in), V12, Limits{}, nil); err != nil {
			t.Errorf("%q: err %v (%T), want nil", in, err, err)
		}
	}
	_, _, err := Parse([]byte("SEND\ncontent-length:x\n\n\x00"), V12, Limits{}, nil)
	var fe *Error
	if !errors.As(err, &fe) || fe.Message != "Bad content-length" {
		t.Errorf("bad content-length: err %v", err)
	}
	for _, c := range []struct {
		in string
		n  int
	}{{"", 0}, {"\r", 0}, {"\n\r\n\nX", 4}, {"\r\r\n", 0}, {"X\n", 0}} {
		if n := HeartBeats([]byte(c.in)); n != c.n {
			t.Errorf("HeartBeats(%q) = %d, want %d", c.in, n, c.n)
		}
		if _, n, _ := Parse([]byte(c.in), V12, Limits{}, nil); c.n > 0 && n != c.n {
			t.Errorf("Parse(%q) took %d, want the %d EOLs", c.in, n, c.n)
		}
	}
}
