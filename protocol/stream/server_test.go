package stream

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
	"github.com/trident-broker/trident/store"
)

// Unit tests of the front end over the core and the in-memory store, with
// a hand-driven client (raw frames) on loopback.

type testServer struct {
	addr string
	b    *exchange.Broker
}

func newTestServer(t testing.TB) *testServer {
	t.Helper()
	return newTestServerOn(t, store.NewMemory())
}

// newTestServerOn is newTestServer over st.
func newTestServerOn(t testing.TB, st exchange.Store) *testServer {
	t.Helper()
	return newTestServerWith(t, st, exchange.WithAMQP10Codec(DecodeAMQP10))
}

// newTestServerWith is a server over st whose core has opts alone (the
// node wires the AMQP 1.0 codec: newTestServerOn).
func newTestServerWith(t testing.TB, st exchange.Store, opts ...exchange.Option) *testServer {
	t.Helper()
	br, err := exchange.New(st, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := br.EnsureVHost("/"); err != nil {
		t.Fatal(err)
	}
	users, err := auth.New(st, auth.Options{DefaultUser: "guest", DefaultPass: "guest"})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{FrameMax: 64 << 10}, br, users, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		_ = br.Close()
	})
	return &testServer{addr: ln.Addr().String(), b: br}
}

// messages is the count of messages stream holds.
func (s *testServer) messages(t testing.TB, stream string) int64 {
	t.Helper()
	v, _ := s.b.VHost("/")
	q, err := v.Queue(stream, nil)
	if err != nil {
		t.Fatal(err)
	}
	si, _ := q.StreamInfo()
	return si.Messages
}

// client is a raw stream protocol client.
type client struct {
	t    testing.TB
	nc   net.Conn
	r    *bufio.Reader
	corr uint32
}

// str and blob mark fields for frame.
type (
	str  string
	blob []byte
)

// frame builds a client frame: key, version, then the fields (uint8,
// uint16, uint32, uint64, str: int16 length, blob: int32 length, []byte
// raw).
func frame(key, ver uint16, fields ...any) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, key)
	b = binary.BigEndian.AppendUint16(b, ver)
	for _, f := range fields {
		switch v := f.(type) {
		case uint8:
			b = append(b, v)
		case uint16:
			b = binary.BigEndian.AppendUint16(b, v)
		case uint32:
			b = binary.BigEndian.AppendUint32(b, v)
		case uint64:
			b = binary.BigEndian.AppendUint64(b, v)
		case str:
			b = append(binary.BigEndian.AppendUint16(b, uint16(len(v))), v...)
		case blob:
			b = append(binary.BigEndian.AppendUint32(b, uint32(len(v))), v...)
		case []byte:
			b = append(b, v...)
		default:
			panic("frame: unknown field type")
		}
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func dial(t testing.TB, s *testServer) *client {
	t.Helper()
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *client) send(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) next() uint32 { c.corr++; return c.corr }

// read reads the next frame, skipping heartbeats.
func (c *client) read() []byte {
	c.t.Helper()
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		p, err := wire.ReadFrame(c.r, 1<<24, nil)
		if err != nil {
			c.t.Fatalf("reading a frame: %v", err)
		}
		if binary.BigEndian.Uint16(p) != wire.KeyHeartbeat {
			return p
		}
	}
}

// expect reads a frame with key; for a response it returns its code.
func (c *client) expect(key uint16) ([]byte, wire.Code) {
	c.t.Helper()
	p := c.read()
	if got := binary.BigEndian.Uint16(p); got != key {
		c.t.Fatalf("got frame %#04x (%x), want %#04x", got, p, key)
	}
	if key&wire.ResponseBit != 0 && len(p) >= 10 {
		return p, wire.Code(binary.BigEndian.Uint16(p[8:]))
	}
	return p, 0
}

// call sends a request and returns its response's code.
func (c *client) call(key uint16, fields ...any) ([]byte, wire.Code) {
	c.t.Helper()
	c.send(frame(key, 1, append([]any{c.next()}, fields...)...))
	return c.expect(key | wire.ResponseBit)
}

// open shakes hands as guest on "/".
func (c *client) open() {
	c.t.Helper()
	if _, code := c.call(wire.KeyPeerProperties, uint32(0)); code != wire.OK {
		c.t.Fatalf("peer properties: %v", code)
	}
	if _, code := c.call(wire.KeySaslHandshake); code != wire.OK {
		c.t.Fatalf("sasl handshake: %v", code)
	}
	if _, code := c.call(wire.KeySaslAuthenticate, str("PLAIN"), blob("\x00guest\x00guest")); code != wire.OK {
		c.t.Fatalf("sasl authenticate: %v", code)
	}
	c.expect(wire.KeyTune)
	c.send(frame(wire.KeyTune|wire.ResponseBit, 1, uint32(64<<10), uint32(0)))
	if _, code := c.call(wire.KeyOpen, str("/")); code != wire.OK {
		c.t.Fatalf("open: %v", code)
	}
}

// expectClose reads a Close with code, and then the connection's end.
func (c *client) expectClose(code wire.Code) {
	c.t.Helper()
	p, _ := c.expect(wire.KeyClose)
	if got := wire.Code(binary.BigEndian.Uint16(p[8:])); got != code {
		c.t.Fatalf("close with code %v, want %v", got, code)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.r.ReadByte(); err == nil {
		c.t.Fatal("connection open after the close")
	}
}

// createWithPublisher creates stream "s" and declares publisher 1 on it
// with reference ref ("": none).
func (c *client) createWithPublisher(ref string) {
	c.t.Helper()
	if _, code := c.call(wire.KeyCreate, str("s"), uint32(0)); code != wire.OK {
		c.t.Fatalf("create: %v", code)
	}
	if _, code := c.call(wire.KeyDeclarePublisher, uint8(1), str(ref), str("s")); code != wire.OK {
		c.t.Fatalf("declare publisher: %v", code)
	}
}

// amqpBody is a minimal AMQP 1.0 message: one data section.
func amqpBody(s string) []byte {
	return wire.AppendMessage(nil, &wire.Message{Body: []byte(s)})
}

// publish sends a Publish (version ver) of ids from publisher pub; with
// ver 2 each message has filter value filter.
func (c *client) publish(pub uint8, ver uint16, filter string, ids ...uint64) {
	c.t.Helper()
	fields := []any{pub, uint32(len(ids))}
	for _, id := range ids {
		fields = append(fields, id)
		if ver >= 2 {
			fields = append(fields, str(filter))
		}
		fields = append(fields, blob(amqpBody("m")))
	}
	c.send(frame(wire.KeyPublish, ver, fields...))
}

// confirms reads PublishConfirm frames of publisher pub until it has n
// ids, and returns them.
func (c *client) confirms(pub uint8, n int) []uint64 {
	c.t.Helper()
	var out []uint64
	for len(out) < n {
		p, _ := c.expect(wire.KeyPublishConfirm)
		if p[4] != pub {
			c.t.Fatalf("confirm for publisher %d, want %d", p[4], pub)
		}
		k := binary.BigEndian.Uint32(p[5:])
		for i := uint32(0); i < k; i++ {
			out = append(out, binary.BigEndian.Uint64(p[9+8*i:]))
		}
	}
	return out
}

func (c *client) sequence(ref, stream string) (uint64, wire.Code) {
	c.t.Helper()
	p, code := c.call(wire.KeyQueryPublisherSequence, str(ref), str(stream))
	return binary.BigEndian.Uint64(p[10:]), code
}

// TestPublishDedup: a named publisher's ids not above the highest stored
// are confirmed and not stored again; a publisher without a reference is
// not deduplicated; QueryPublisherSequence answers per reference.
func TestPublishDedup(t *testing.T) {
	s := newTestServer(t)
	c := dial(t, s)
	c.open()
	c.createWithPublisher("p")
	if seq, code := c.sequence("p", "s"); code != wire.OK || seq != 0 {
		t.Fatalf("sequence before any publish: %d %v", seq, code)
	}
	for _, step := range []struct {
		ids    []uint64
		stored int64 // messages in the stream after it
		seq    uint64
	}{
		{[]uint64{0, 0}, 1, 0}, // id 0 is an id: stored once
		{[]uint64{1, 2, 3}, 4, 3},
		{[]uint64{2, 3, 4}, 5, 4},    // a resend overlapping what is stored
		{[]uint64{4, 4, 1}, 5, 4},    // all duplicates
		{[]uint64{10, 7, 11}, 7, 11}, // a gap is fine; 7 is below 10
	} {
		c.publish(1, 1, "", step.ids...)
		got := c.confirms(1, len(step.ids))
		if len(got) != len(step.ids) {
			t.Fatalf("ids %v: confirms %v", step.ids, got)
		}
		if n := s.messages(t, "s"); n != step.stored {
			t.Fatalf("after ids %v the stream holds %d messages, want %d", step.ids, n, step.stored)
		}
		if seq, code := c.sequence("p", "s"); code != wire.OK || seq != step.seq {
			t.Fatalf("after ids %v sequence %d %v, want %d", step.ids, seq, code, step.seq)
		}
	}
	// Version 2 (a filter value) is deduplicated alike.
	c.publish(1, 2, "eu", 11, 12)
	c.confirms(1, 2)
	if n := s.messages(t, "s"); n != 8 {
		t.Fatalf("after a version 2 publish: %d messages, want 8", n)
	}
	// Another reference has its own sequence; no reference, none at all.
	if _, code := c.call(wire.KeyDeclarePublisher, uint8(2), str("q"), str("s")); code != wire.OK {
		t.Fatal(code)
	}
	if _, code := c.call(wire.KeyDeclarePublisher, uint8(3), str(""), str("s")); code != wire.OK {
		t.Fatal(code)
	}
	c.publish(2, 1, "", 1, 2)
	c.confirms(2, 2)
	c.publish(3, 1, "", 1, 1)
	c.confirms(3, 2)
	if n := s.messages(t, "s"); n != 12 {
		t.Fatalf("two more of q and two unnamed: %d messages, want 12", n)
	}
	if seq, _ := c.sequence("q", "s"); seq != 2 {
		t.Fatalf("q's sequence %d", seq)
	}
	if seq, code := c.sequence("", "s"); code != wire.OK || seq != 0 {
		t.Fatalf("empty reference: %d %v", seq, code)
	}
	if _, code := c.sequence("p", "nope"); code != wire.StreamDoesNotExist {
		t.Fatalf("sequence on a missing stream: %v", code)
	}
	// A second connection, as a client after a reconnect, sees p's id.
	c2 := dial(t, s)
	c2.open()
	if seq, _ := c2.sequence("p", "s"); seq != 12 {
		t.Fatalf("p's sequence on another connection: %d", seq)
	}
}

// TestPublishErrors: publishes the protocol refuses get a PublishError
// with its code; declares get their codes.
func TestPublishErrors(t *testing.T) {
	s := newTestServer(t)
	c := dial(t, s)
	c.open()
	if _, code := c.call(wire.KeyCreate, str("s"), uint32(0)); code != wire.OK {
		t.Fatal(code)
	}
	if _, code := c.call(wire.KeyDeclarePublisher, uint8(1), str("p"), str("missing")); code != wire.StreamDoesNotExist {
		t.Fatalf("declare on a missing stream: %v", code)
	}
	if _, code := c.call(wire.KeyDeclarePublisher, uint8(1), str("p"), str("s")); code != wire.OK {
		t.Fatal(code)
	}
	if _, code := c.call(wire.KeyDeclarePublisher, uint8(1), str("p"), str("s")); code != wire.PreconditionFailed {
		t.Fatalf("the same publisher id twice: %v", code)
	}
	// An undeclared publisher.
	c.publish(9, 1, "", 5)
	p, _ := c.expect(wire.KeyPublishError)
	if p[4] != 9 || binary.BigEndian.Uint32(p[5:]) != 1 || binary.BigEndian.Uint64(p[9:]) != 5 ||
		wire.Code(binary.BigEndian.Uint16(p[17:])) != wire.PublisherDoesNotExist {
		t.Fatalf("publish error %x", p)
	}
	// A message that is not AMQP 1.0.
	c.send(frame(wire.KeyPublish, 1, uint8(1), uint32(1), uint64(1), blob("garbage")))
	p, _ = c.expect(wire.KeyPublishError)
	if wire.Code(binary.BigEndian.Uint16(p[17:])) != wire.PreconditionFailed {
		t.Fatalf("a bad message: %x", p)
	}
	if n := s.messages(t, "s"); n != 0 {
		t.Fatalf("refused publishes stored %d messages", n)
	}
	if _, code := c.call(wire.KeyDeletePublisher, uint8(7)); code != wire.PublisherDoesNotExist {
		t.Fatalf("delete of an unknown publisher: %v", code)
	}
}

// TestBadFrames: frames the codec cannot read end the connection with
// the protocol's Close code; the server serves on.
func TestBadFrames(t *testing.T) {
	s := newTestServer(t)
	for _, tc := range []struct {
		name  string
		open  bool
		frame []byte
		code  wire.Code
	}{
		{"unknown key before open", false, frame(0x0777, 1, uint32(1)), wire.UnknownFrame},
		{"unknown key after open", true, frame(0x0777, 1, uint32(1)), wire.UnknownFrame},
		{"truncated declare publisher", true, frame(wire.KeyDeclarePublisher, 1, uint32(1), uint8(1), uint16(5)), wire.UnknownFrame},
		{"bytes left over", true, frame(wire.KeyHeartbeat, 1, uint32(0)), wire.UnknownFrame},
		{"publish count beyond the frame", true, frame(wire.KeyPublish, 1, uint8(1), uint32(1000)), wire.UnknownFrame},
		{"publish v2 message without its filter", true, frame(wire.KeyPublish, 2, uint8(1), uint32(1), uint64(1), blob("m")), wire.UnknownFrame},
		{"frame over the initial frame max", false, binary.BigEndian.AppendUint32(nil, 9<<10), wire.FrameTooLarge},
		{"frame over the frame max", true, binary.BigEndian.AppendUint32(nil, 65<<10), wire.FrameTooLarge},
		{"open twice", true, frame(wire.KeyOpen, 1, uint32(9), str("/")), wire.UnknownFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s)
			if tc.open {
				c.open()
			}
			c.send(tc.frame)
			c.expectClose(tc.code)
		})
	}
	c := dial(t, s)
	c.open()
	if _, code := c.call(wire.KeyCreate, str("still-serving"), uint32(0)); code != wire.OK {
		t.Fatalf("after bad frames: %v", code)
	}
}
