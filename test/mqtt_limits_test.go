package test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/trident-broker/trident/conf"
)

// TestMQTTMinKeepAlive: with mqtt.min_keep_alive set, an MQTT 5 client
// asking for a shorter keep-alive (or none) is told the minimum in
// CONNACK and held to it; a longer one keeps its own; an MQTT 3.1.1
// client asking for less is refused (return code 3), one asking for more
// connects.
func TestMQTTMinKeepAlive(t *testing.T) {
	b := startMQTTBroker(t, func(c *conf.Config) { c.MQTT.MinKeepAlive = 2 * time.Second })
	_, ack := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "minka-short", CleanStart: true, KeepAlive: 1})
	if ack.Properties == nil || ack.Properties.ServerKeepAlive == nil || *ack.Properties.ServerKeepAlive != 2 {
		t.Fatalf("CONNACK for keep-alive 1: %+v, want Server Keep Alive 2", ack.Properties)
	}
	_, ack = dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "minka-long", CleanStart: true, KeepAlive: 60})
	if ack.Properties != nil && ack.Properties.ServerKeepAlive != nil {
		t.Fatalf("CONNACK for keep-alive 60 carries Server Keep Alive %d", *ack.Properties.ServerKeepAlive)
	}

	// Held to it: a raw MQTT 5 client that asked for none and never
	// pings is disconnected (0x8D keep alive timeout) after about 3 s.
	nc, err := net.Dial("tcp", b.mqttAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "minka-none", CleanStart: true,
		Properties: &packets.Properties{}}
	if _, err := cp.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	p, err := packets.ReadPacket(nc)
	if err != nil {
		t.Fatal(err)
	}
	if ca, ok := p.Content.(*packets.Connack); !ok || ca.Properties == nil || ca.Properties.ServerKeepAlive == nil ||
		*ca.Properties.ServerKeepAlive != 2 {
		t.Fatalf("CONNACK for keep-alive 0: %+v", p.Content)
	}
	p, err = packets.ReadPacket(nc)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := p.Content.(*packets.Disconnect); !ok || d.ReasonCode != 0x8D {
		t.Fatalf("got %s %+v, want DISCONNECT 0x8D", p.PacketType(), p.Content)
	}
	if el := time.Since(start); el < 2*time.Second {
		t.Fatalf("disconnected after %v, before 1.5 × the 2 s minimum", el)
	}

	// MQTT 3.1.1: refused below the minimum (and with none), accepted above.
	for _, ka := range []time.Duration{time.Second, 0} {
		_, err = tryDial3("tcp://"+b.mqttAddr(), fmt.Sprintf("minka3-%v", ka), true,
			func(o *mqtt3.ClientOptions) { o.SetKeepAlive(ka) })
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unavailable") {
			t.Fatalf("3.1.1 keep-alive %v: %v, want refused (server unavailable)", ka, err)
		}
	}
	dial3(t, "tcp://"+b.mqttAddr(), "minka3-ok", true, func(o *mqtt3.ClientOptions) { o.SetKeepAlive(5 * time.Second) })
}

// TestMQTTMaxInflight: mqtt.max_inflight is the Receive Maximum an MQTT 5
// CONNACK announces and the most unacknowledged QoS 1 messages a client
// is sent: a 3.1.1 subscriber that does not acknowledge gets that many
// of five, and one more for each PUBACK.
func TestMQTTMaxInflight(t *testing.T) {
	b := startMQTTBroker(t, func(c *conf.Config) { c.MQTT.MaxInflight = 2 })
	_, ack := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "inflight5", CleanStart: true})
	if ack.Properties == nil || ack.Properties.ReceiveMaximum == nil || *ack.Properties.ReceiveMaximum != 2 {
		t.Fatalf("CONNACK: %+v, want Receive Maximum 2", ack.Properties)
	}

	nc, br := rawSubscriber3(t, b.mqttAddr(), "inflight3", "inflight/t")
	pub := dial3(t, "tcp://"+b.mqttAddr(), "inflight-pub", true)
	for i := range 5 {
		pub.publish(t, "inflight/t", 1, false, fmt.Sprint(i))
	}
	pids := readPublishes(t, nc, br, 2, time.Second)
	if len(pids) != 2 {
		t.Fatalf("%d unacknowledged deliveries, want 2", len(pids))
	}
	if _, err := nc.Write([]byte{0x40, 2, byte(pids[0] >> 8), byte(pids[0])}); err != nil {
		t.Fatal(err)
	}
	if more := readPublishes(t, nc, br, 1, time.Second); len(more) != 1 {
		t.Fatalf("%d deliveries after one PUBACK, want 1", len(more))
	}
}

// rawSubscriber3 connects a raw MQTT 3.1.1 client (keep-alive off) and
// subscribes it to filter at QoS 1.
func rawSubscriber3(t *testing.T, addr, id, filter string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	var b []byte
	body := append(rawStr(nil, "MQTT"), 4, 0x02, 0, 0)
	b = rawPkt(b, 0x10, rawStr(body, id))
	sub := rawStr(binary.BigEndian.AppendUint16(nil, 1), filter)
	b = rawPkt(b, 0x82, append(sub, 1))
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []byte{0x20, 0x90} {
		first, _, err := rawRead(br)
		if err != nil || first != want {
			t.Fatalf("got %#x (%v), want %#x", first, err, want)
		}
	}
	return nc, br
}

// readPublishes reads PUBLISH packets until max arrived or quiet passes
// without one, and returns their packet ids.
func readPublishes(t *testing.T, nc net.Conn, br *bufio.Reader, max int, quiet time.Duration) []uint16 {
	t.Helper()
	var pids []uint16
	for len(pids) < max+1 {
		_ = nc.SetReadDeadline(time.Now().Add(quiet))
		first, body, err := rawRead(br)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return pids
			}
			t.Fatal(err)
		}
		if first>>4 != 3 {
			continue
		}
		tl := int(binary.BigEndian.Uint16(body))
		pids = append(pids, binary.BigEndian.Uint16(body[2+tl:]))
	}
	return pids
}

func rawStr(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}

func rawPkt(b []byte, first byte, body []byte) []byte {
	b = append(b, first)
	for n := len(body); ; {
		d := byte(n % 128)
		if n /= 128; n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			break
		}
	}
	return append(b, body...)
}

func rawRead(br *bufio.Reader) (byte, []byte, error) {
	first, err := br.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mul := 0, 1
	for {
		d, err := br.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(d&0x7f) * mul
		mul *= 128
		if d&0x80 == 0 {
			break
		}
	}
	body := make([]byte, n)
	_, err = io.ReadFull(br, body)
	return first, body, err
}

// TestMQTTIdleConnectionsHoldNoGoroutine: an idle MQTT connection over
// plain TCP waits in the front end's event loop, not on a goroutine of its
// own: 300 subscribed, idle connections add far fewer than 300
// goroutines to the (in-process) broker, and each of them still gets a
// broadcast, answers a PINGREQ and is noticed when its client goes away.
func TestMQTTIdleConnectionsHoldNoGoroutine(t *testing.T) {
	b := startMQTTBroker(t)
	const n = 300
	time.Sleep(200 * time.Millisecond)
	base := runtime.NumGoroutine()
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range conns {
		conns[i], readers[i] = rawSubscriber3(t, b.mqttAddr(), fmt.Sprintf("idle-%d", i), "idle/all")
	}
	var grown int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if grown = runtime.NumGoroutine() - base; grown < n/10 || time.Now().After(deadline) {
			break
		}
	}
	if grown >= n/10 {
		t.Fatalf("%d idle connections added %d goroutines, want fewer than %d", n, grown, n/10)
	}

	pub := dial3(t, "tcp://"+b.mqttAddr(), "idle-pub", true)
	pub.publish(t, "idle/all", 0, false, "hello")
	for i, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		first, body, err := rawRead(readers[i])
		if err != nil || first>>4 != 3 || !strings.HasSuffix(string(body), "hello") {
			t.Fatalf("connection %d: %#x %q %v, want the broadcast", i, first, body, err)
		}
		if _, err := nc.Write([]byte{0xC0, 0}); err != nil {
			t.Fatal(err)
		}
		if first, _, err := rawRead(readers[i]); err != nil || first != 0xD0 {
			t.Fatalf("connection %d: %#x %v, want PINGRESP", i, first, err)
		}
	}
	for _, nc := range conns {
		nc.Close()
	}
	// Their clean sessions end, and their queues go with them.
	vh, _ := b.n.Broker().VHost("/")
	left := func() int {
		k := 0
		for _, q := range vh.Queues() {
			if strings.HasPrefix(q.Name(), "mqtt-subscription-idle-") {
				k++
			}
		}
		return k
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for left() > 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d sessions still open after their clients left", left())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
