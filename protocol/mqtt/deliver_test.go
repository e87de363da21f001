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
							var got bytes.Buffer
							w := packetWriter{c: c, bw: bufio.NewWriter(&got)}
							b := w.sharedPublish(m, "a/b", qos, retain)
							if b == nil {
								t.Fatal("no shared encoding")
							}
							w.writeShared(b, qos, dup, pid)
							if err := w.bw.Flush(); err != nil || w.err != nil {
								t.Fatal(err, w.err)
							}
							if !bytes.Equal(got.Bytes(), want.Bytes()) {
								t.Fatalf("got  %x\nwant %x", got.Bytes(), want.Bytes())
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

// TestToMessageShared: an MQTT 3 QoS 0 PUBLISH as it came, retain flag
// and an over-long remaining length included, becomes the message's
// encoding for MQTT 3 subscribers: what AppendPublishHeader gives for a
// delivery, the body aliasing it. QoS 1 and MQTT 5 publishes get none.
func TestToMessageShared(t *testing.T) {
	payload := []byte("0123456789")
	want := append(wire.AppendPublishHeader(nil, "a/b", 0, false, false, 0, len(payload)), payload...)
	// The same at MQTT 5: no properties (length 0) after the topic.
	v5 := append([]byte{0x30, byte(len(want) - 1)}, want[2:7]...)
	v5 = append(append(v5, 0), payload...)
	long := append([]byte{0x31, 0x80 | byte(len(want)-2), 0x00}, want[2:]...) // retain, length in two bytes
	cases := []struct {
		name    string
		version byte
		in      []byte
		shared  bool
	}{
		{"v4 qos0 retain", 4, append([]byte{0x31}, want[1:]...), true},
		{"v3 qos0", 3, want, true},
		{"v4 qos0 long length", 4, long, true},
		{"v4 qos1", 4, append(wire.AppendPublishHeader(nil, "a/b", 1, false, false, 7, len(payload)), payload...), false},
		{"v5 qos0", 5, v5, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pk, raw, err := wire.ReadRaw(bufio.NewReader(bytes.NewReader(tc.in)), tc.version, 0)
			if err != nil {
				t.Fatal(err)
			}
			c := &conn{version: tc.version}
			m := c.toMessage(&pk, raw, "amq.topic", c.routingKey(pk.TopicName))
			if string(m.Body) != string(payload) || m.RoutingKey != "a.b" {
				t.Fatalf("message %q %q", m.RoutingKey, m.Body)
			}
			got := m.Encoding(encKey(false, 0, false))
			if !tc.shared {
				if got != nil {
					t.Fatalf("encoding %x cached", got)
				}
				return
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got  %x\nwant %x", got, want)
			}
		})
	}
}
