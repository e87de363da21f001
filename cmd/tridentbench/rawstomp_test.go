package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// scanCase is one golden input of scanStomp: what the first frame is.
type scanCase struct {
	name    string
	in      string
	n       int // bytes the first frame takes (0: incomplete, -1: all of in)
	cmd     string
	body    string
	headers map[string]string // raw (escaped) values header returns
	err     bool
}

var scanCases = []scanCase{
	{name: "message with content-length", in: "MESSAGE\ndestination:/queue/a\ncontent-length:3\n\nabc\x00",
		n: -1, cmd: "MESSAGE", body: "abc", headers: map[string]string{"destination": "/queue/a", "content-length": "3"}},
	{name: "body with NUL and EOLs, by content-length", in: "MESSAGE\ncontent-length:6\n\n\x00\n\n\x00a\x00\x00",
		n: -1, cmd: "MESSAGE", body: "\x00\n\n\x00a\x00"},
	{name: "body up to the NUL", in: "RECEIPT\nreceipt-id:77\n\n\x00MESSAGE\n", n: 24, cmd: "RECEIPT", headers: map[string]string{"receipt-id": "77"}},
	{name: "body up to the NUL, not empty", in: "ERROR\nmessage:x\n\nsome text\x00", n: -1, cmd: "ERROR", body: "some text"},
	{name: "CRLF line ends", in: "MESSAGE\r\nack:1\r\ncontent-length:2\r\n\r\nhi\x00", n: -1, cmd: "MESSAGE", body: "hi",
		headers: map[string]string{"ack": "1"}},
	{name: "escaped headers are returned as sent", in: "MESSAGE\nack:T_a\\cb@@s\\\\x@@1\nx\\ny:c\\nd\ncontent-length:0\n\n\x00",
		n: -1, cmd: "MESSAGE", headers: map[string]string{"ack": `T_a\cb@@s\\x@@1`, `x\ny`: `c\nd`}},
	{name: "first header wins", in: "MESSAGE\nack:1\nack:2\ncontent-length:1\ncontent-length:5\n\nz\x00", n: -1, cmd: "MESSAGE", body: "z",
		headers: map[string]string{"ack": "1"}},
	{name: "key is a prefix of another", in: "MESSAGE\nacknowledged:no\nack:yes\n\n\x00", n: -1, cmd: "MESSAGE",
		headers: map[string]string{"ack": "yes"}},
	{name: "content-length with spaces", in: "MESSAGE\ncontent-length: 2 \n\nab\x00", n: -1, cmd: "MESSAGE", body: "ab"},
	{name: "heart-beats come alone", in: "\n\r\n\nMESSAGE\n\n\x00", n: 4},
	{name: "no body, no headers", in: "RECEIPT\n\n\x00", n: -1, cmd: "RECEIPT"},
	{name: "lone CR waits", in: "\r", n: 0},
	{name: "bad content-length", in: "MESSAGE\ncontent-length:x\n\n\x00", err: true},
	{name: "negative content-length", in: "MESSAGE\ncontent-length:-1\n\n\x00", err: true},
	{name: "huge content-length", in: "MESSAGE\ncontent-length:99999999999999999999\n\n\x00", err: true},
	{name: "no NUL after content-length bytes", in: "MESSAGE\ncontent-length:1\n\nab\x00", err: true},
}

func TestScanStompGolden(t *testing.T) {
	for _, tc := range scanCases {
		t.Run(tc.name, func(t *testing.T) {
			f, n, err := scanStomp([]byte(tc.in))
			if tc.n < 0 {
				tc.n = len(tc.in)
			}
			if tc.err {
				if err == nil {
					t.Fatalf("no error, n %d", n)
				}
				return
			}
			if err != nil || n != tc.n || string(f.cmd) != tc.cmd || string(f.body) != tc.body {
				t.Fatalf("got %q %q n %d err %v, want %q %q n %d", f.cmd, f.body, n, err, tc.cmd, tc.body, tc.n)
			}
			for k, want := range tc.headers {
				if v, ok := f.header(k); !ok || string(v) != want {
					t.Errorf("header %q = %q, %v; want %q", k, v, ok, want)
				}
			}
			if _, ok := f.header("absent"); ok {
				t.Error("absent header found")
			}
			// Every proper prefix of a frame is incomplete, never an error.
			if n > 0 && tc.cmd != "" {
				for i := range n {
					if _, m, err := scanStomp([]byte(tc.in[:i])); m != 0 || err != nil {
						t.Fatalf("prefix of %d bytes: n %d err %v", i, m, err)
					}
				}
			}
		})
	}
}

// chunkConn is the reading end of a connection that hands out what the
// writer wrote a few bytes at a time.
type chunkConn struct {
	net.Conn
	data []byte
	rnd  *rand.Rand
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, net.ErrClosed
	}
	n := min(len(p), len(c.data), 1+c.rnd.IntN(40))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// scanned is what the read loop made of one frame.
type scanned struct {
	cmd, body, ack string
}

// readAll runs a rawReader with a small buffer over in, handed out in
// random chunks, and scans it as the consumer does.
func readAll(t *testing.T, in []byte, seed uint64) []scanned {
	c := &rawReader{nc: &chunkConn{data: in, rnd: rand.New(rand.NewPCG(seed, 1))}, buf: make([]byte, 16)}
	var out []scanned
	var stop atomic.Bool
	var failed error
	c.readLoop("test", &stop, func(err error) { failed = err }, func() (int, error) {
		off := 0
		for {
			f, n, err := scanStomp(c.buf[off:c.have])
			if err != nil || n == 0 {
				return off, err
			}
			if len(f.cmd) > 0 {
				ack, _ := f.header("ack")
				out = append(out, scanned{string(f.cmd), string(f.body), string(ack)})
			}
			off += n
		}
	})
	if !errors.Is(failed, net.ErrClosed) {
		t.Fatalf("read loop ended with %v, want the end of the data", failed)
	}
	if c.have != 0 {
		t.Fatalf("%d bytes left unscanned", c.have)
	}
	return out
}

// TestScanStompSplitReads feeds frames encoded by the broker's codec,
// with heart-beats between them, split at random points across reads
// into a buffer that has to grow.
func TestScanStompSplitReads(t *testing.T) {
	var in []byte
	var want []scanned
	for i := range 200 {
		body := make([]byte, i%70)
		for j := range body {
			body[j] = byte(i * j) // NULs and EOLs among them
		}
		ack := "T_sub:" + strconv.Itoa(i) + "@@s\\e\ncr@@" + strconv.Itoa(i)
		f := frame.Frame{Command: frame.MESSAGE, Body: body, Headers: []frame.Header{
			{Key: "subscription", Value: "sub:" + strconv.Itoa(i)}, {Key: "ack", Value: ack}}}
		in = frame.Append(in, &f, frame.V12)
		if i%3 == 0 {
			in = append(in, "\n\r\n"...)
		}
		// The escaped value, as a consumer echoes it.
		esc := frame.AppendHeader(nil, "ack", ack, frame.V12)
		want = append(want, scanned{frame.MESSAGE, string(body), string(esc[4 : len(esc)-1])})
	}
	for seed := range uint64(20) {
		got := readAll(t, in, seed)
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d frames, want %d", seed, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seed %d frame %d: %q, want %q", seed, i, got[i], want[i])
			}
		}
	}
}

// TestStompAckEchoesTheAckHeader: the ACK built from a MESSAGE's ack
// header as sent names, once decoded, the value the broker meant.
func TestStompAckEchoesTheAckHeader(t *testing.T) {
	for _, id := range []string{"T_0@@session@@12", `T_a:b@@s\x@@1`, "T_line\nbreak@@s@@3", "T_cr\r@@s@@4"} {
		msg := frame.Append(nil, &frame.Frame{Command: frame.MESSAGE, Headers: []frame.Header{{Key: "ack", Value: id}}, Body: []byte("x")}, frame.V12)
		f, _, err := scanStomp(msg)
		if err != nil {
			t.Fatal(err)
		}
		raw, ok := f.header("ack")
		if !ok {
			t.Fatalf("%q: no ack header", id)
		}
		ack, n, perr := frame.Parse(appendStompAck(nil, raw), frame.V12, frame.Limits{}, nil)
		if perr != nil || n == 0 || ack.Command != frame.ACK || ack.Value("id") != id {
			t.Fatalf("%q: ACK decodes to %+v n %d err %v", id, ack, n, perr)
		}
	}
}

// TestStompSendBatch: a batch decodes, with the broker's codec, into the
// SENDs asked for: destination, persistence, content-length, stamp, and
// receipts where they are due and on the last one.
func TestStompSendBatch(t *testing.T) {
	const size = 16
	for _, persistent := range []bool{false, true} {
		s := newStompSend("/queue/a:b", size, persistent)
		var every uint64
		if persistent {
			every = 4
		}
		const n, k = 6, 11                     // messages 7..17: receipts at 8, 12, 16 and 17
		stamp := uint64(0x0a00_0000_0000_0a00) // holds NULs and an EOL
		b := s.appendBatch(nil, n, k, stamp, every)
		var receipts []string
		for i := range k {
			f, used, err := frame.Parse(b, frame.V12, frame.Limits{}, nil)
			if err != nil || used == 0 {
				t.Fatalf("frame %d: n %d err %v", i, used, err)
			}
			b = b[used:]
			if f.Command != frame.SEND || f.Value("destination") != "/queue/a:b" || len(f.Body) != size ||
				binary.LittleEndian.Uint64(f.Body) != stamp || !bytes.Equal(f.Body[8:], make([]byte, size-8)) {
				t.Fatalf("frame %d: %+v", i, f)
			}
			if p, _ := f.Get("persistent"); (p == "true") != persistent {
				t.Fatalf("frame %d: persistent %q", i, p)
			}
			if r, ok := f.Get("receipt"); ok {
				receipts = append(receipts, r)
			}
		}
		if len(b) != 0 {
			t.Fatalf("%d bytes after the batch", len(b))
		}
		want := "[]"
		if persistent {
			want = "[8 12 16 17]"
		}
		if got := "[" + strings.Join(receipts, " ") + "]"; got != want {
			t.Errorf("persistent %v: receipts %s, want %s", persistent, got, want)
		}
	}
	// Unstamped, the body stays zero.
	s := newStompSend("/queue/q", size, false)
	f, _, _ := scanStomp(s.appendBatch(nil, 0, 1, 0, 0))
	if !bytes.Equal(f.body, make([]byte, size)) {
		t.Errorf("unstamped body %q", f.body)
	}
}

// FuzzScanStomp: wherever the broker's codec decodes a whole frame, the
// scanner finds the same frame (command, length, body), and it never
// panics. Seeded with the golden cases.
func FuzzScanStomp(f *testing.F) {
	for _, tc := range scanCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, n, err := scanStomp(b)
		want, wn, werr := frame.Parse(b, frame.V12, frame.Limits{}, nil)
		if werr != nil || wn == 0 {
			return
		}
		if err != nil || n != wn || string(got.cmd) != want.Command || !bytes.Equal(got.body, want.Body) {
			t.Fatalf("scan: %q %q n %d err %v; codec: %q %q n %d", got.cmd, got.body, n, err, want.Command, want.Body, wn)
		}
	})
}
