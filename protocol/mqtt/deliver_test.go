package mqtt

import (
	"bufio"
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// TestSharedPublish: a PUBLISH written from a message's shared encoding is
// byte for byte the one encoded for the delivery alone (AppendPublishHeader
// for MQTT 3, publishPacket and PublishEncode for MQTT 5), whatever the
// QoS, packet id, DUP and retain flags, and the encoding is made once per
// key.
func TestSharedPublish(t *testing.T) {
	newMsg := func() *exchange.Message {
		return &exchange.Message{Exchange: "amq.topic", RoutingKey: "a.b", Body: []byte("payload"),
			Props: exchange.Properties{ContentType: "text/plain", ReplyTo: "r.s", CorrelationID: "cid",
				Headers: exchange.Table{"k": "v", hdrFormat: uint8(1), hdrRetain: true}}}
	}
	for _, version := range []byte{3, 4, 5} {
		m := newMsg()
		for qos := byte(0); qos <= 2; qos++ {
			for _, retain := range []bool{false, true} {
				for _, dup := range []bool{false, true} {
					if qos == 0 && dup {
						continue
					}
					for _, pid := range []uint16{1, 258, 65535} {
						if qos == 0 && pid != 1 {
							continue
						}
						name := fmt.Sprintf("v%d/qos%d/retain=%v/dup=%v/pid=%d", version, qos, retain, dup, pid)
						t.Run(name, func(t *testing.T) {
							c := &conn{version: version}
							var want bytes.Buffer
							if version != 5 {
								var id uint16
								if qos > 0 {
									id = pid
								}
								want.Write(wire.AppendPublishHeader(nil, "a/b", qos, dup, retain, id, len(m.Body)))
								want.Write(m.Body)
							} else {
								pk := c.publishPacket(m, "a/b", qos, retain, nil, 0)
								if qos > 0 {
									pk.PacketID = pid
								}
								pk.FixedHeader.Dup = dup
								if err := pk.PublishEncode(&want); err != nil {
									t.Fatal(err)
								}
							}
							w := &packetWriter{c: c}
							b := w.sharedPublish(m, "a/b", qos, retain)
							if b == nil {
								t.Fatal("no shared encoding")
							}
							w.writeShared(b, qos, dup, pid)
							if w.err != nil {
								t.Fatal(w.err)
							}
							if !bytes.Equal(w.buf, want.Bytes()) {
								t.Fatalf("got  %x\nwant %x", w.buf, want.Bytes())
							}
							if again := w.sharedPublish(m, "a/b", qos, retain); &again[0] != &b[0] {
								t.Fatal("encoded twice")
							}
						})
					}
				}
			}
		}
	}
}

// TestSharedPublishConcurrent: writers racing to encode one message all
// write the same bytes, and one encoding stays (run with -race).
func TestSharedPublishConcurrent(t *testing.T) {
	m := &exchange.Message{RoutingKey: "a.b", Body: []byte("x")}
	const n = 8
	got := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := packetWriter{c: &conn{version: []byte{4, 5}[i%2]}}
			got[i] = w.sharedPublish(m, "a/b", 1, false)
		}()
	}
	wg.Wait()
	for i := range n {
		if want := m.Encoding(encKey(i%2 == 1, 1, false)); &got[i][0] != &want[0] {
			t.Fatalf("writer %d wrote another encoding than the one cached", i)
		}
	}
}

// TestToMessageShared: a QoS 0 or 1 PUBLISH as it came, DUP and retain
// flags and an over-long remaining length included, becomes the message's
// encoding for subscribers of its protocol version and QoS: for MQTT 3
// what AppendPublishHeader gives for a delivery (at QoS 1 with the
// publisher's packet id, which each delivery patches), for MQTT 5 (no
// properties) what the writer's own encoding gives; the body aliases it.
// QoS 2 and MQTT 5 publishes with properties get none. Each case is read
// both ways readPacket reads: into a buffer of its own (wire.ReadRaw) and
// into a pooled message's (pooledPublish: an unretained QoS 0 or 1
// PUBLISH), which becomes the message only if the packet is its encoding.
func TestToMessageShared(t *testing.T) {
	payload := []byte("0123456789")
	want := append(wire.AppendPublishHeader(nil, "a/b", 0, false, false, 0, len(payload)), payload...)
	// The same at MQTT 5: no properties (length 0) after the topic.
	v5 := append([]byte{0x30, byte(len(want) - 1)}, want[2:7]...)
	v5 = append(append(v5, 0), payload...)
	// With a content type property (3, "a").
	v5props := append([]byte{0x30, byte(len(want) + 3)}, want[2:7]...)
	v5props = append(append(v5props, 4, 3, 0, 1, 'a'), payload...)
	long := append([]byte{0x31, 0x80 | byte(len(want)-2), 0x00}, want[2:]...) // retain, length in two bytes
	q1 := append(wire.AppendPublishHeader(nil, "a/b", 1, false, false, 7, len(payload)), payload...)
	q1dupRetain := append([]byte{q1[0] | 0x09}, q1[1:]...)
	// MQTT 5 at QoS 1: topic, packet id 7, an empty property list.
	v5q1 := append([]byte{0x32, byte(len(v5) - 2 + 2)}, v5[2:7]...)
	v5q1 = append(append(v5q1, 0, 7), v5[7:]...)
	v5q1props := append([]byte{0x32, byte(len(v5props) - 2 + 2)}, v5props[2:7]...)
	v5q1props = append(append(v5q1props, 0, 7), v5props[7:]...)
	cases := []struct {
		name    string
		version byte
		qos     byte
		in      []byte
		shared  []byte
		pooled  bool
	}{
		{"v4 qos0 retain", 4, 0, append([]byte{0x31}, want[1:]...), want, false},
		{"v3 qos0", 3, 0, want, want, true},
		{"v4 qos0 long length", 4, 0, long, want, false},
		{"v4 qos0 long length no retain", 4, 0, append([]byte{0x30}, long[1:]...), want, true},
		{"v4 qos1", 4, 1, q1, q1, true},
		{"v4 qos1 dup retain", 4, 1, q1dupRetain, q1, false},
		{"v4 qos2", 4, 2, append(wire.AppendPublishHeader(nil, "a/b", 2, false, false, 7, len(payload)), payload...), nil, false},
		{"v5 qos0", 5, 0, v5, v5, true},
		{"v5 qos0 properties", 5, 0, v5props, nil, true},
		{"v5 qos1", 5, 1, v5q1, v5q1, true},
		{"v5 qos1 properties", 5, 1, v5q1props, nil, true},
	}
	for _, tc := range cases {
		for _, pool := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s pool=%v", tc.name, pool), func(t *testing.T) {
				r := bufio.NewReader(bytes.NewReader(tc.in))
				var (
					pk  wire.Packet
					raw []byte
					sm  *sharedMsg
					err error
				)
				if pool {
					h, herr := wire.ReadHeader(r, 0)
					if herr != nil {
						t.Fatal(herr)
					}
					if sm = pooledPublish(h); (sm != nil) != tc.pooled {
						t.Fatalf("pooled %v, want %v", sm != nil, tc.pooled)
					}
					var buf []byte
					if sm != nil {
						buf = sm.buf
					}
					pk, raw, err = wire.ReadBody(r, h, tc.version, buf)
				} else {
					pk, raw, err = wire.ReadRaw(r, tc.version, 0)
				}
				if err != nil {
					t.Fatal(err)
				}
				c := &conn{version: tc.version}
				m := c.toMessage(&pk, raw, sm, "amq.topic", c.routingKey(pk.TopicName))
				if string(m.Body) != string(payload) || m.RoutingKey != "a.b" {
					t.Fatalf("message %q %q", m.RoutingKey, m.Body)
				}
				if reused := sm != nil && m == &sm.m; reused != (tc.pooled && pool && tc.shared != nil) {
					t.Fatalf("message reused %v", reused)
				}
				got := m.Encoding(encKey(tc.version == 5, tc.qos, false))
				if tc.shared == nil {
					if got != nil {
						t.Fatalf("encoding %x cached", got)
					}
					return
				}
				if !bytes.Equal(got, tc.shared) {
					t.Fatalf("got  %x\nwant %x", got, tc.shared)
				}
				if tc.version == 5 {
					w := &packetWriter{c: c}
					if enc := w.encodeShared5(m, "a/b", tc.qos, false, uint16(tc.qos)*7); !bytes.Equal(enc, got) {
						t.Fatalf("the writer encodes %x, the packet was %x", enc, got)
					}
				}
			})
		}
	}
}
