package mqtt

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/protocol/frontend"
)

// rawSubscribe1 connects an MQTT 3.1.1 client id over a raw socket and
// subscribes to filter at QoS 1.
func rawSubscribe1(t *testing.T, addr, id, filter string) net.Conn {
	t.Helper()
	nc, ack := rawConnect3(t, addr, "guest", "guest", id, 0xC2, 0, 30*time.Second)
	if ack[1] != 0 {
		t.Fatalf("CONNACK: %x", ack)
	}
	_ = nc.SetReadDeadline(time.Time{})
	var body []byte
	body = binary.BigEndian.AppendUint16(body, 1)
	body = benchString(body, filter)
	body = append(body, 1)
	if _, err := nc.Write(benchPacket(nil, 0x82, body)); err != nil {
		t.Fatal(err)
	}
	if first, _ := benchReadPacket(t, nc); first>>4 != packets.Suback {
		t.Fatalf("SUBACK: %x", first)
	}
	return nc
}

// TestSlowSubscriberBackPressure: a QoS 1 subscriber that stops reading
// while a publisher sends QoS 1 and QoS 0 messages to it does not make
// the broker buffer them without bound: its output stops near
// frontend.High, its consumer is paused and the rest stays in its queue;
// once it reads again every QoS 1 message arrives, in order.
func TestSlowSubscriberBackPressure(t *testing.T) {
	s, addr := testServer(t)
	sub := rawSubscribe1(t, addr, "bp-sub", "bp/t")
	c := serverConn(t, s, "bp-sub")
	pub := benchMQTTDial(t, addr, "bp-pub", 4, "")
	go func() { // the publisher's PUBACKs
		b := make([]byte, 64<<10)
		for {
			if _, err := pub.Read(b); err != nil {
				return
			}
		}
	}()
	// More than High and both sockets' buffers hold.
	const n, size = 2000, 16 << 10
	body := make([]byte, size)
	for i := range n {
		var pk []byte
		payload := fmt.Appendf(nil, "%06d", i)
		// QoS 1, packet id i+1.
		v := benchString(nil, "bp/t")
		v = binary.BigEndian.AppendUint16(v, uint16(i%60000+1))
		pk = benchPacket(pk, 0x32, append(append(v, payload...), body...))
		if i%5 == 0 { // and a QoS 0 one
			pk = benchPacket(pk, 0x30, append(benchString(nil, "bp/t"), "qos0"...))
		}
		if _, err := pub.Write(pk); err != nil {
			t.Fatal(err)
		}
	}
	// The broker's output for the subscriber stops near High: the consumer
	// is paused and messages stay in the queue.
	var queued, paused, ready int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c.ob.Mu.Lock()
		if !c.ob.Idle() {
			queued, paused = len(c.ob.Buf), len(c.ob.Paused)
		}
		c.ob.Mu.Unlock()
		c.consMu.Lock()
		if len(c.consumers) > 0 {
			ready, _, _ = c.consumers[0].Queue().Stats()
		}
		c.consMu.Unlock()
		if paused > 0 && ready > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if paused == 0 || ready == 0 {
		t.Fatalf("no back-pressure: %d bytes queued, %d consumers paused, %d messages ready in the queue", queued, paused, ready)
	}
	time.Sleep(200 * time.Millisecond) // nothing grows meanwhile
	c.ob.Mu.Lock()
	queued = len(c.ob.Buf)
	c.ob.Mu.Unlock()
	if queued > frontend.High+2*size {
		t.Fatalf("%d bytes queued for a subscriber that does not read, past High (%d)", queued, frontend.High)
	}
	t.Logf("paused at %d bytes queued, %d messages ready in the queue", queued, ready)

	// The subscriber reads again and acknowledges: all of QoS 1 arrives, in order.
	_ = sub.SetReadDeadline(time.Now().Add(60 * time.Second))
	next := 0
	for next < n {
		first, pb := benchReadPacket(t, sub)
		if first>>4 != packets.Publish {
			t.Fatalf("after %d: packet %x", next, first)
		}
		tl := int(binary.BigEndian.Uint16(pb))
		rest := pb[2+tl:]
		if (first>>1)&3 == 0 {
			continue // QoS 0
		}
		pid := rest[:2]
		if got, want := string(rest[2:8]), fmt.Sprintf("%06d", next); got != want {
			t.Fatalf("QoS 1 message %q, want %q", got, want)
		}
		next++
		if _, err := sub.Write([]byte{packets.Puback << 4, 2, pid[0], pid[1]}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIdleConnectionsHoldNoWriter: after a burst to many subscribers,
// once they are idle (parked) none holds a writer goroutine, an output
// state (buffers) or a packetWriter.
func TestIdleConnectionsHoldNoWriter(t *testing.T) {
	s, addr := testServer(t)
	const n = 50
	before := runtime.NumGoroutine()
	subs := make([]net.Conn, n)
	conns := make([]*conn, n)
	for i := range n {
		id := fmt.Sprintf("idle-%d", i)
		subs[i] = benchMQTTDial(t, addr, id, 4, "burst/t")
		conns[i] = serverConn(t, s, id)
	}
	pub := benchMQTTDial(t, addr, "idle-pub", 4, "")
	var pk []byte
	for i := range 20 {
		pk = benchPacket(pk, 0x30, append(benchString(nil, "burst/t"), fmt.Sprintf("%04d%01000d", i, 0)...))
	}
	if _, err := pub.Write(pk); err != nil {
		t.Fatal(err)
	}
	for i, sub := range subs {
		_ = sub.SetReadDeadline(time.Now().Add(30 * time.Second))
		for range 20 {
			if first, _ := benchReadPacket(t, sub); first>>4 != packets.Publish {
				t.Fatalf("subscriber %d: packet %x", i, first)
			}
		}
	}
	_ = pub.Close()
	for i, c := range conns {
		if !waitParked(c, 10*time.Second) {
			t.Fatalf("subscriber %d did not park", i)
		}
	}
	var held int
	deadline := time.Now().Add(10 * time.Second)
	for {
		held = 0
		for _, c := range conns {
			c.ob.Mu.Lock()
			if !c.ob.Idle() || c.w != nil {
				held++
			}
			c.ob.Mu.Unlock()
		}
		if held == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held > 0 {
		t.Fatalf("%d of %d idle subscribers hold their output's state or packetWriter", held, n)
	}
	// No goroutine per connection: the parked readers and the writers
	// are gone (some slack for the runtime's and the server's own).
	var after int
	for time.Now().Before(deadline) {
		if after = runtime.NumGoroutine(); after < before+n/5 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after >= before+n/5 {
		t.Fatalf("%d goroutines before %d connections, %d once they are idle", before, n, after)
	}
}

// TestNonReadingClientBounded: a client that sends PINGREQs without
// reading the PINGRESPs does not grow its output past frontend.High: its
// reader stops reading until the output is under it, so that the client's
// writes stop going through.
func TestNonReadingClientBounded(t *testing.T) {
	s, addr := testServer(t)
	nc := benchMQTTDial(t, addr, "flood", 4, "")
	c := serverConn(t, s, "flood")
	chunk := make([]byte, 64<<10)
	for i := 0; i < len(chunk); i += 2 {
		chunk[i] = packets.Pingreq << 4
	}
	sent := 0
	for sent < 64<<20 {
		_ = nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := nc.Write(chunk)
		sent += n
		if err != nil {
			break // the broker reads no more
		}
	}
	if sent >= 64<<20 {
		t.Fatalf("the broker took all of %d bytes of PINGREQs from a client that reads nothing", sent)
	}
	c.ob.Mu.Lock()
	queued := 0
	if !c.ob.Idle() {
		queued = len(c.ob.Buf)
	}
	c.ob.Mu.Unlock()
	if queued > frontend.High+64<<10 {
		t.Fatalf("%d bytes queued for a client that does not read, past High (%d)", queued, frontend.High)
	}
	t.Logf("%d bytes sent, %d queued", sent, queued)
}
