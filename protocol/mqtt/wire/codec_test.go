package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// golden are whole client packets with what they must decode to.
var golden = []struct {
	name    string
	version byte
	raw     []byte
	typ     byte
	check   func(*testing.T, Packet)
	err     bool
}{
	{name: "connect 3.1.1", version: 0, typ: packets.Connect,
		raw: []byte{0x10, 16, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 4, 'c', 'l', 'i', 'd'},
		check: func(t *testing.T, p Packet) {
			if p.ProtocolVersion != 4 || p.Connect.ClientIdentifier != "clid" || !p.Connect.Clean || p.Connect.Keepalive != 60 {
				t.Fatalf("%+v", p.Connect)
			}
		}},
	{name: "connect 5 with session expiry", version: 0, typ: packets.Connect,
		raw: []byte{0x10, 19, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x00, 0, 30, 5, 17, 0, 0, 0, 9, 0, 1, 'x'},
		check: func(t *testing.T, p Packet) {
			if p.ProtocolVersion != 5 || p.Properties.SessionExpiryInterval != 9 || p.Connect.ClientIdentifier != "x" {
				t.Fatalf("%+v", p)
			}
		}},
	{name: "publish qos1", version: 4, typ: packets.Publish,
		raw: []byte{0x32, 9, 0, 3, 'a', '/', 'b', 0, 7, 'h', 'i'},
		check: func(t *testing.T, p Packet) {
			if p.TopicName != "a/b" || p.PacketID != 7 || string(p.Payload) != "hi" || p.FixedHeader.Qos != 1 {
				t.Fatalf("%+v", p)
			}
		}},
	{name: "publish qos3 is malformed", version: 4, raw: []byte{0x36, 5, 0, 1, 'a', 0, 1}, err: true},
	{name: "puback", version: 4, typ: packets.Puback, raw: []byte{0x40, 2, 0x12, 0x34},
		check: func(t *testing.T, p Packet) {
			if p.PacketID != 0x1234 {
				t.Fatalf("pid %x", p.PacketID)
			}
		}},
	{name: "subscribe v5 options", version: 5, typ: packets.Subscribe,
		raw: []byte{0x82, 8, 0, 1, 0, 0, 2, 'a', '#', 0x2E},
		check: func(t *testing.T, p Packet) {
			f := p.Filters[0]
			if f.Filter != "a#" || f.Qos != 2 || !f.NoLocal || !f.RetainAsPublished || f.RetainHandling != 2 {
				t.Fatalf("%+v", f)
			}
		}},
	{name: "subscribe v5 truncated options", version: 5, raw: []byte{0x82, 7, 0, 1, 0, 0, 2, 'a', '#'}, err: true},
	{name: "subscribe bad flags", version: 4, raw: []byte{0x80, 6, 0, 1, 0, 1, 'a', 0}, err: true},
	{name: "pingreq", version: 4, typ: packets.Pingreq, raw: []byte{0xC0, 0}},
	{name: "pingreq with body", version: 4, raw: []byte{0xC0, 1, 0}, err: true},
	{name: "connack from a client", version: 4, raw: []byte{0x20, 2, 0, 0}, err: true},
	{name: "disconnect v5 reason", version: 5, typ: packets.Disconnect, raw: []byte{0xE0, 1, 0x04},
		check: func(t *testing.T, p Packet) {
			if p.ReasonCode != 0x04 {
				t.Fatalf("reason %x", p.ReasonCode)
			}
		}},
}

func TestGolden(t *testing.T) {
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			p, err := Read(bufio.NewReader(bytes.NewReader(g.raw)), g.version, 0)
			if g.err {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.FixedHeader.Type != g.typ {
				t.Fatalf("type %d, want %d", p.FixedHeader.Type, g.typ)
			}
			if g.check != nil {
				g.check(t, p)
			}
			// What decodes re-encodes to the same bytes (for the
			// packets whose encoding is canonical).
			if g.typ == packets.Publish || g.typ == packets.Puback || g.typ == packets.Pingreq {
				var buf bytes.Buffer
				if err := Encode(&buf, &p); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), g.raw) {
					t.Fatalf("re-encoded %x, want %x", buf.Bytes(), g.raw)
				}
			}
		})
	}
}

func TestReadLimits(t *testing.T) {
	// The size limit applies before the body is read.
	_, err := Read(bufio.NewReader(bytes.NewReader([]byte{0x30, 0xff, 0xff, 0xff, 0x7f})), 4, 1024)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	// A five-byte length is malformed.
	_, err = Read(bufio.NewReader(bytes.NewReader([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01})), 4, 0)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
	// A truncated body is an unexpected EOF.
	_, err = Read(bufio.NewReader(bytes.NewReader([]byte{0x30, 10, 0, 1})), 4, 0)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want ErrUnexpectedEOF", err)
	}
}

func TestAppendAck(t *testing.T) {
	for _, tc := range []struct {
		typ  byte
		code byte
		v5   bool
		want []byte
	}{
		{packets.Puback, 0, false, []byte{0x40, 2, 1, 2}},
		{packets.Puback, 0x87, false, []byte{0x40, 2, 1, 2}},
		{packets.Puback, 0x10, true, []byte{0x40, 3, 1, 2, 0x10}},
		{packets.Pubrel, 0, true, []byte{0x62, 2, 1, 2}},
		{packets.Pubcomp, 0x92, true, []byte{0x70, 3, 1, 2, 0x92}},
	} {
		got := AppendAck(nil, tc.typ, 0x0102, tc.code, tc.v5)
		if !bytes.Equal(got, tc.want) {
			t.Errorf("AppendAck(%d, %x, %v) = %x, want %x", tc.typ, tc.code, tc.v5, got, tc.want)
		}
		v := byte(4)
		if tc.v5 {
			v = 5
		}
		p, err := Read(bufio.NewReader(bytes.NewReader(got)), v, 0)
		if err != nil || p.PacketID != 0x0102 {
			t.Errorf("decode %x: %+v %v", got, p, err)
		}
	}
}

// FuzzRead feeds arbitrary bytes, whole and split at random points, to
// Read for every protocol version: it must never panic, and whatever it
// decodes must have a type a client may send; ReadBody into a buffer of
// the caller's reads the same, and an MQTT 5 PUBLISH decodes as mochi's
// decoder has it (decodePublish skips it for an empty property list).
func FuzzRead(f *testing.F) {
	for _, g := range golden {
		f.Add(g.raw, g.version)
	}
	f.Add([]byte{0x82, 7, 0, 1, 0, 0, 2, 'a', '#'}, byte(5))
	f.Add([]byte{0x30, 6, 0, 1, 'a', 0, 'x', 'y'}, byte(3))        // MQTT 5 PUBLISH, no properties
	f.Add([]byte{0x32, 9, 0, 1, 'a', 0, 7, 2, 1, 1, 'x'}, byte(3)) // QoS 1, payload format
	f.Add([]byte{0x30, 7, 0, 1, 'a', 2, 1, 1, 'x'}, byte(3))       // QoS 0, payload format
	f.Fuzz(func(t *testing.T, data []byte, version byte) {
		version = []byte{0, 3, 4, 5}[version%4]
		r := bufio.NewReaderSize(&splitReader{data: data, rnd: rand.New(rand.NewSource(int64(len(data))))}, 16)
		for i := 0; i < 64; i++ {
			p, raw, err := ReadRaw(r, version, 1<<16)
			if err != nil {
				return
			}
			if p.FixedHeader.Type == packets.Connack || p.FixedHeader.Type == packets.Suback {
				t.Fatalf("decoded a server-only packet %d", p.FixedHeader.Type)
			}
			// raw is the packet as it came: it reads back alone.
			rr := bufio.NewReader(bytes.NewReader(raw))
			if q, err := Read(rr, version, 1<<16); err != nil || q.FixedHeader.Type != p.FixedHeader.Type || rr.Buffered() != 0 {
				t.Fatalf("raw %x does not read back: %v", raw, err)
			}
			// Read into a buffer of the caller's, too small or not, the
			// same packet.
			hr := bufio.NewReader(bytes.NewReader(raw))
			if h, err := ReadHeader(hr, 1<<16); err != nil {
				t.Fatalf("raw %x: header: %v", raw, err)
			} else if q, qraw, err := ReadBody(hr, h, version, make([]byte, 3, 3+i*7)); err != nil || !bytes.Equal(qraw, raw) || q.FixedHeader.Type != p.FixedHeader.Type {
				t.Fatalf("ReadBody of %x gave %x: %v", raw, qraw, err)
			}
			if p.FixedHeader.Type == packets.Publish && version == 5 {
				// decodePublish's short cut decodes as mochi does.
				var q Packet
				q.ProtocolVersion, q.FixedHeader = 5, p.FixedHeader
				body := raw[len(raw)-p.FixedHeader.Remaining:]
				if err := q.PublishDecode(body); err != nil || q.TopicName != p.TopicName || q.PacketID != p.PacketID || !bytes.Equal(q.Payload, p.Payload) {
					t.Fatalf("PUBLISH %x: mochi decodes %q %d %x (%v), we %q %d %x", raw, q.TopicName, q.PacketID, q.Payload, err, p.TopicName, p.PacketID, p.Payload)
				}
			}
			if p.FixedHeader.Type == packets.Publish && p.FixedHeader.Qos > 0 {
				off, ok := PublishIDOffset(raw)
				if !ok || binary.BigEndian.Uint16(raw[off:]) != p.PacketID {
					t.Fatalf("PublishIDOffset(%x) = %d, %v; packet id %d", raw, off, ok, p.PacketID)
				}
			}
		}
	})
}

// splitReader returns data in random-sized pieces.
type splitReader struct {
	data []byte
	rnd  *rand.Rand
}

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := 1 + s.rnd.Intn(len(s.data))
	n = min(n, len(p))
	copy(p, s.data[:n])
	s.data = s.data[n:]
	return n, nil
}

// TestAppendPublishHeader: the delivery path's v3 PUBLISH encoding is
// byte for byte mochi's PublishEncode.
func TestAppendPublishHeader(t *testing.T) {
	cases := []struct {
		name        string
		topic       string
		qos         byte
		dup, retain bool
		pid         uint16
		payload     int
	}{
		{"qos0", "a/b", 0, false, false, 0, 16},
		{"qos1", "sensors/x/temp", 1, false, false, 513, 3},
		{"qos2 dup retain", "t", 2, true, true, 65535, 0},
		{"two-byte length", "long/topic", 1, false, false, 7, 300},
		{"three-byte length", "big", 1, false, false, 9, 20000},
		{"four-byte length", "huge", 0, false, true, 0, 2100000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			payload := bytes.Repeat([]byte{'x'}, tc.payload)
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: tc.qos, Dup: tc.dup,
				Retain: tc.retain}, TopicName: tc.topic, PacketID: tc.pid, Payload: payload, ProtocolVersion: 4}
			var want bytes.Buffer
			if err := pk.PublishEncode(&want); err != nil {
				t.Fatal(err)
			}
			got := append(AppendPublishHeader(nil, tc.topic, tc.qos, tc.dup, tc.retain, tc.pid, len(payload)), payload...)
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("got  %x\nwant %x", got[:min(len(got), 32)], want.Bytes()[:min(want.Len(), 32)])
			}
			if tc.qos == 0 {
				return
			}
			// The packet id is found where it is, also in an MQTT 5
			// PUBLISH (properties after the id).
			pk.ProtocolVersion = 5
			pk.Properties.ContentType, pk.Properties.User = "text/plain", []packets.UserProperty{{Key: "k", Val: "v"}}
			var v5 bytes.Buffer
			if err := pk.PublishEncode(&v5); err != nil {
				t.Fatal(err)
			}
			for _, b := range [][]byte{got, v5.Bytes()} {
				off, ok := PublishIDOffset(b)
				if !ok || binary.BigEndian.Uint16(b[off:]) != tc.pid || off != 1+varintLen(len(b))+2+len(tc.topic) {
					t.Fatalf("PublishIDOffset(%x...) = %d, %v", b[:min(len(b), 16)], off, ok)
				}
			}
		})
	}
}

// varintLen is the length of the remaining-length field of a packet of n
// bytes in all.
func varintLen(n int) int {
	for l := 1; ; l++ {
		rem := n - 1 - l
		if rem < 1<<(7*l) {
			return l
		}
	}
}

func TestPublishIDOffsetShort(t *testing.T) {
	for _, b := range [][]byte{nil, {0x32}, {0x32, 0x80}, {0x32, 3, 0, 5}, {0x32, 4, 0, 1, 'a', 0}, {0x32, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		if off, ok := PublishIDOffset(b); ok {
			t.Errorf("PublishIDOffset(%x) = %d, true", b, off)
		}
	}
}

// connectVersions are ConnectVersion's golden cases: a CONNECT body's
// first bytes and the level they show.
var connectVersions = []struct {
	body []byte
	want byte
}{
	{[]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0xC2, 0, 60}, 5},
	{[]byte{0, 4, 'M', 'Q', 'T', 'T', 5}, 5},
	{[]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 2}, 4},
	{[]byte{0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 3}, 3},
	{[]byte{0, 4, 'M', 'Q', 'T', 'T'}, 0},    // level not yet read
	{[]byte{0, 4, 'M', 'Q'}, 0},              // name cut
	{[]byte{0}, 0},                           // length cut
	{nil, 0},                                 // nothing
	{[]byte{0, 4, 'M', 'Q', 'T', 'T', 6}, 0}, // unknown level
	{[]byte{0, 4, 'M', 'Q', 'T', 'X', 5}, 0}, // not MQTT
	{[]byte{0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 5}, 0},
	{[]byte{0xFF, 0xFF, 'M', 'Q', 'T', 'T', 5}, 0}, // absurd name length
}

func TestConnectVersion(t *testing.T) {
	for _, tc := range connectVersions {
		if got := ConnectVersion(tc.body); got != tc.want {
			t.Errorf("ConnectVersion(%x) = %d, want %d", tc.body, got, tc.want)
		}
	}
}

// FuzzConnectVersion: ConnectVersion never panics, and a level it reports
// is one Decode of a CONNECT starting with those bytes agrees with when
// the whole body decodes.
func FuzzConnectVersion(f *testing.F) {
	for _, tc := range connectVersions {
		f.Add(tc.body)
	}
	for _, g := range golden {
		if len(g.raw) > 2 && g.raw[0]>>4 == packets.Connect {
			f.Add(g.raw[2:])
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v := ConnectVersion(body)
		if v != 0 && v != 3 && v != 4 && v != 5 {
			t.Fatalf("ConnectVersion(%x) = %d", body, v)
		}
		// Any prefix shows the same level or none yet.
		for i := 0; i <= len(body) && i < 12; i++ {
			if p := ConnectVersion(body[:i]); p != 0 && p != v {
				t.Fatalf("prefix %x shows %d, whole %x shows %d", body[:i], p, body, v)
			}
		}
		if v == 0 || len(body) > 1<<16 {
			return
		}
		pk, err := Decode(Header{First: packets.Connect << 4, Remaining: len(body)}, body, 0)
		if err == nil && pk.ProtocolVersion != v {
			t.Fatalf("body %x: ConnectVersion %d, Decode %d", body, v, pk.ProtocolVersion)
		}
	})
}
