package mqtt

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/trident-broker/trident/protocol/frontend"
)

// TestStalledSubscriberPaused: a QoS 1 subscriber that stops reading
// while a publisher sends it QoS 1 and QoS 0 messages is bounded: its
// output stays under frontend.High (and a message), its consumer is
// paused (the Receive Maximum is not what holds it back) and the rest
// waits in its queue, not in the connection. Once it reads again it gets
// every message, each QoS in order.
func TestStalledSubscriberPaused(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, nil)
	sub, c := qos1Device(t, s, addr, "stall-sub", 0xC2, "stall/t")
	pub := benchMQTTDial(t, addr, "stall-pub", 4, "")
	go func() { _, _ = io.Copy(io.Discard, pub) }() // the publisher's PUBACKs

	const n, size = 1600, 32 << 10 // 50 MiB: the socket buffers hold a few
	var level, paused, ready, unacked int
	sample := func() {
		c.ob.Mu.Lock()
		if c.ob.OutputState != nil {
			level = max(level, c.ob.Level())
			paused = len(c.ob.Paused)
		}
		c.ob.Mu.Unlock()
	}
	payload := make([]byte, size)
	for i := range n {
		// Every fourth message is QoS 0; the payload starts with its
		// number.
		binary.BigEndian.PutUint32(payload, uint32(i))
		body := benchString(nil, "stall/t")
		first := byte(0x30)
		if i%4 != 3 {
			first = 0x32
			body = binary.BigEndian.AppendUint16(body, uint16(i%60000+1))
		}
		if _, err := pub.Write(benchPacket(nil, first, append(body, payload...))); err != nil {
			t.Fatal(err)
		}
		if i%64 == 0 {
			sample()
		}
	}
	c.consMu.Lock()
	q := c.consumers[0].Queue()
	c.consMu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		sample()
		ready, unacked, _ = q.Stats()
		if paused > 0 && ready > 0 {
			time.Sleep(200 * time.Millisecond) // and it stays so
			sample()
			ready, unacked, _ = q.Stats()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled subscriber's consumer is not paused: %d paused, queue %d ready %d unacked, output at most %d bytes",
				paused, ready, unacked, level)
		}
	}
	sample()
	t.Logf("stalled: output at most %d bytes, queue %d ready, %d unacked (receive maximum %d)",
		level, ready, unacked, s.cfg.ReceiveMaximum)
	if bound := frontend.High + itemCost + size + 64; level > bound {
		t.Fatalf("the stalled subscriber's output grew to %d bytes, over %d", level, bound)
	}
	if ready == 0 || unacked >= int(s.cfg.ReceiveMaximum) {
		t.Fatalf("queue %d ready, %d unacked: not held back by the output's watermark", ready, unacked)
	}

	// Reading again: every message, in order within its QoS, each QoS 1
	// one acknowledged.
	_ = sub.SetReadDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReaderSize(sub, 256<<10)
	next := [2]int{0, 3} // the next QoS 1 and QoS 0 numbers
	for got := 0; got < n; got++ {
		first, body := readPacketFrom(t, r)
		if first>>4 != 3 {
			t.Fatalf("packet %x after %d messages", first, got)
		}
		tl := int(binary.BigEndian.Uint16(body))
		rest := body[2+tl:]
		k := 1
		if (first>>1)&3 == 1 {
			k = 0
			if _, err := sub.Write([]byte{0x40, 2, rest[0], rest[1]}); err != nil {
				t.Fatal(err)
			}
			rest = rest[2:]
		}
		if i := int(binary.BigEndian.Uint32(rest)); i != next[k] {
			t.Fatalf("QoS %d: message %d, want %d", 1-k, i, next[k])
		}
		next[k]++
		for next[k] < n && (next[k]%4 == 3) != (k == 1) {
			next[k]++
		}
	}
	settledEventually(t, c)
}

// readPacketFrom reads one MQTT packet from r: its first byte and body.
func readPacketFrom(t *testing.T, r *bufio.Reader) (byte, []byte) {
	t.Helper()
	first, body, err := readPacketErr(r)
	if err != nil {
		t.Fatal(err)
	}
	return first, body
}

// TestIdleAfterBurstHoldsNoOutput: after a burst of QoS 0 and QoS 1
// messages to a fleet of devices (each reads and acknowledges them), no
// connection holds a writer goroutine, a writer state or an output buffer,
// and the goroutines are back to what they were before the burst.
func TestIdleAfterBurstHoldsNoOutput(t *testing.T) {
	const devices = 50
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, nil)
	type dev struct {
		nc net.Conn
		c  *conn
	}
	devs := make([]dev, devices)
	for i := range devs {
		id := fmt.Sprintf("burst-%d", i)
		nc, c := qos1Device(t, s, addr, id, 0xC2, "burst/"+id)
		devs[i] = dev{nc, c}
	}
	pub := benchMQTTDial(t, addr, "burst-pub", 4, "")
	go func() { _, _ = io.Copy(io.Discard, pub) }()
	for i := range devs {
		if !waitParked(devs[i].c, 10*time.Second) {
			t.Fatalf("device %d did not park", i)
		}
	}
	before := runtime.NumGoroutine()

	const msgs = 40
	done := make(chan error, devices)
	for i := range devs {
		go func(d dev) {
			_ = d.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			r := bufio.NewReader(d.nc)
			for range msgs {
				first, body, err := readPacketErr(r)
				if err != nil {
					done <- err
					return
				}
				if (first>>1)&3 == 1 {
					tl := int(binary.BigEndian.Uint16(body))
					if _, err := d.nc.Write([]byte{0x40, 2, body[2+tl], body[3+tl]}); err != nil {
						done <- err
						return
					}
				}
			}
			done <- nil
		}(devs[i])
	}
	var burst []byte
	for m := range msgs {
		for i := range devs {
			body := benchString(nil, fmt.Sprintf("burst/burst-%d", i))
			first := byte(0x30)
			if m%2 == 0 {
				first = 0x32
				body = binary.BigEndian.AppendUint16(body, uint16(m+1))
			}
			burst = benchPacket(burst, first, append(body, make([]byte, 512)...))
		}
	}
	if _, err := pub.Write(burst); err != nil {
		t.Fatal(err)
	}
	for range devices {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i, d := range devs {
		settledEventually(t, d.c)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			d.c.ob.Mu.Lock()
			active, kept, attached := d.c.ob.Active(), d.c.w != nil, d.c.ob.OutputState != nil
			d.c.ob.Mu.Unlock()
			if !active && !kept && !attached && d.c.parked.Load() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("device %d after the burst: writer %v, writer state %v, output state %v, parked %v",
					i, active, kept, attached, d.c.parked.Load())
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the burst, %d before", runtime.NumGoroutine(), before)
		}
	}
}

// readPacketErr reads one MQTT packet from r (readPacketFrom), and
// returns the error, for a goroutine of a test's.
func readPacketErr(r *bufio.Reader) (byte, []byte, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	l, mul := 0, 1
	for {
		b, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		l += int(b&0x7f) * mul
		mul *= 128
		if b&0x80 == 0 {
			break
		}
	}
	body := make([]byte, l)
	_, err = io.ReadFull(r, body)
	return first, body, err
}

// TestStreamEndedHoldsNoOutput: a device that only receives, to which the
// core streamed (its writer kept its state from round to round), holds
// no output state once the stream has ended, though nothing wakes it.
func TestStreamEndedHoldsNoOutput(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) {
		s.streamWindow = 300 * time.Millisecond
	})
	dev := benchMQTTDial(t, addr, "stream-dev", 4, "stream/dev")
	c := serverConn(t, s, "stream-dev")
	pub := benchMQTTDial(t, addr, "stream-pub", 4, "")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("the device did not park")
	}
	_ = dev.SetReadDeadline(time.Now().Add(30 * time.Second))
	pkt := benchPacket(nil, 0x30, append(benchString(nil, "stream/dev"), "x"...))
	streamed := false
	for i := range 4 * streamRounds {
		if _, err := pub.Write(pkt); err != nil {
			t.Fatal(err)
		}
		if first, _ := benchReadPacket(t, dev); first>>4 != 3 {
			t.Fatalf("message %d: packet %x", i, first)
		}
		waitWriterGone(t, c)
		if _, _, kept := outputOf(c); kept && c.parked.Load() {
			streamed = true
		}
	}
	if !streamed {
		t.Fatal("the writer never kept its state: the test measures nothing")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, _, kept := outputOf(c); !kept {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the device keeps its output state after the stream ended")
		}
	}
}

// TestNeverParkingOutputReleased: a connection whose reader never parks
// (TLS, WebSocket: not a *net.TCPConn) gives its output state back when
// its writer is done, as a parked one does.
func TestNeverParkingOutputReleased(t *testing.T) {
	s, _ := testServer(t)
	a, b := net.Pipe()
	defer b.Close()
	go func() { _, _ = io.Copy(io.Discard, b) }()
	c := newConn(s, a, "websocket")
	c.version = 4
	for i := range 20 {
		c.sendAck(0x04, uint16(i+1), 0) // PUBACKs
	}
	waitWriterGone(t, c)
	if _, _, kept := outputOf(c); kept {
		t.Fatal("the connection keeps its output state with its writer gone")
	}
	c.stopWriter()
	a.Close()
}
