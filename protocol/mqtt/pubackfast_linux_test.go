package mqtt

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// qos1Device connects a raw MQTT 3.1.1 client (flags: clean session or
// not) subscribed to filter at QoS 1, and returns it with its server
// connection.
func qos1Device(t *testing.T, s *Server, addr, id string, flags byte, filter string) (net.Conn, *conn) {
	t.Helper()
	nc, ack := rawConnect3(t, addr, "guest", "guest", id, flags, 60, 30*time.Second)
	if ack[1] != 0 {
		t.Fatalf("CONNACK: %x", ack)
	}
	body := binary.BigEndian.AppendUint16(nil, 1)
	body = append(benchString(body, filter), 1)
	if _, err := nc.Write(benchPacket(nil, 0x82, body)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if first, sa := benchReadPacket(t, nc); first>>4 != 9 || sa[len(sa)-1] != 1 {
		t.Fatalf("SUBACK: %x %x", first, sa)
	}
	return nc, serverConn(t, s, id)
}

// commandAndAck publishes one QoS 1 message to topic from pub, reads it
// on dev and answers its PUBACK.
func commandAndAck(t *testing.T, pub, dev net.Conn, topic string, pid uint16) {
	t.Helper()
	body := binary.BigEndian.AppendUint16(benchString(nil, topic), pid)
	if _, err := pub.Write(benchPacket(nil, 0x32, append(body, "go"...))); err != nil {
		t.Fatal(err)
	}
	_ = pub.SetReadDeadline(time.Now().Add(30 * time.Second))
	if first, _ := benchReadPacket(t, pub); first>>4 != 4 {
		t.Fatalf("publisher's PUBACK: %x", first)
	}
	first, pk := benchReadPacket(t, dev)
	if first>>4 != 3 || (first>>1)&3 != 1 {
		t.Fatalf("device got %x, not a QoS 1 PUBLISH", first)
	}
	tl := int(binary.BigEndian.Uint16(pk))
	if _, err := dev.Write([]byte{0x40, 2, pk[2+tl], pk[3+tl]}); err != nil {
		t.Fatal(err)
	}
}

// settledEventually waits until c's session queue holds nothing unacked.
func settledEventually(t *testing.T, c *conn) {
	t.Helper()
	c.consMu.Lock()
	q := c.consumers[0].Queue()
	c.consMu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ready, unacked, _ := q.Stats(); ready == 0 && unacked == 0 {
			return
		}
		if time.Now().After(deadline) {
			ready, unacked, _ := q.Stats()
			t.Fatalf("queue %s: %d ready, %d unacked", q.Name(), ready, unacked)
		}
	}
}

// TestLoopSettlesPubacks: a parked device's PUBACK is settled by the
// event loop itself (no reader taken), and the device stays parked; its
// session's queue holds nothing afterwards, and its credit is given back
// (the next command comes). A persistent session's PUBACK (a durable
// queue, whose settling may wait for the store) goes to a reader.
func TestLoopSettlesPubacks(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) {
		s.parkAfter = time.Minute
		s.streamWindow = time.Nanosecond // every wake a window of its own: none is a stream (a command takes ~150 µs: five fitted in a millisecond)
	})
	pub := benchMQTTDial(t, addr, "ack-pub", 4, "")
	// The publisher's reader stays in the runtime: the readers counted
	// below are the devices'.
	serverConn(t, s, "ack-pub").wakeReader()
	dev, c := qos1Device(t, s, addr, "ack-dev", 0xC2, "ack/dev")
	for i := range 5 {
		if !waitParked(c, 10*time.Second) {
			t.Fatalf("command %d: not parked", i)
		}
		readers, acks := s.parkedReaders.Load(), s.loopAcks.Load()
		recv := c.recvBytes.Load()
		commandAndAck(t, pub, dev, "ack/dev", uint16(i+1))
		settledEventually(t, c)
		if got := s.loopAcks.Load() - acks; got != 1 {
			t.Fatalf("command %d: the loop settled %d PUBACKs", i, got)
		}
		if got := s.parkedReaders.Load() - readers; got != 0 {
			t.Fatalf("command %d: %d readers taken for a PUBACK", i, got)
		}
		if got := c.recvBytes.Load() - recv; got != 4 {
			t.Fatalf("command %d: %d bytes counted for a PUBACK", i, got)
		}
	}
	// The device still answers PINGREQs and gets commands.
	if _, err := dev.Write(pingreq); err != nil {
		t.Fatal(err)
	}
	expectPingresps(t, dev, 1)

	durable, dc := qos1Device(t, s, addr, "ack-durable", 0xC0, "ack/durable")
	if !waitParked(dc, 10*time.Second) {
		t.Fatal("the durable session's device did not park")
	}
	readers, acks := s.parkedReaders.Load(), s.loopAcks.Load()
	commandAndAck(t, pub, durable, "ack/durable", 100)
	settledEventually(t, dc)
	if got := s.loopAcks.Load() - acks; got != 0 {
		t.Fatalf("the loop settled %d PUBACKs of a durable queue", got)
	}
	if got := s.parkedReaders.Load() - readers; got != 1 {
		t.Fatalf("%d readers taken for a durable queue's PUBACK", got)
	}
}

// TestLoopPubackStreamToReader: a subscriber whose PUBACKs wake it more
// than streamWakes times within streamWindow (QoS 1 messages flow to it)
// is given a reader, which stays for more, rather than the loop taking
// an event for every few PUBACKs.
func TestLoopPubackStreamToReader(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) {
		s.parkAfter = time.Minute
		s.streamWindow = time.Hour
	})
	pub := benchMQTTDial(t, addr, "st-pub", 4, "")
	serverConn(t, s, "st-pub").wakeReader()
	dev, c := qos1Device(t, s, addr, "st-dev", 0xC2, "st/dev")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked")
	}
	// Count the wakes from here, as the reader (park.go's rule: whoever
	// clears parked reads; nothing wakes the device meanwhile).
	if !c.parked.CompareAndSwap(true, false) {
		t.Fatal("not parked")
	}
	c.wakes = 0
	c.parked.Store(true)
	readers, acks := s.parkedReaders.Load(), s.loopAcks.Load()
	for i := range 8 {
		commandAndAck(t, pub, dev, "st/dev", uint16(i+1))
		settledEventually(t, c)
	}
	if got := s.loopAcks.Load() - acks; got != streamWakes {
		t.Fatalf("the loop settled %d PUBACKs, want the first %d", got, streamWakes)
	}
	if got := s.parkedReaders.Load() - readers; got != 1 {
		t.Fatalf("%d readers taken, want one that stays", got)
	}
	if c.parked.Load() {
		t.Fatal("the streaming subscriber parked again")
	}
}

// TestParkedPublishesNoneLost: a device that publishes now and then, and
// sometimes twice in quick succession, while its reader parks after each
// without reading the socket again (handOver's drained) loses none:
// what came meanwhile wakes it at once.
func TestParkedPublishesNoneLost(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) {
		s.parkAfter = time.Minute
		s.streamWindow = time.Millisecond
	})
	sub := benchMQTTDial(t, addr, "pl-sub", 4, "pl/t")
	dev := pingDial(t, addr, "pl-dev", 60)
	c := serverConn(t, s, "pl-dev")
	publish := benchPacket(nil, 0x30, append(benchString(nil, "pl/t"), "x"...)) // QoS 0
	const n = 200
	go func() {
		for i := range n {
			_, _ = dev.Write(publish)
			if i%3 != 0 {
				time.Sleep(time.Duration(i%5) * 300 * time.Microsecond)
			}
		}
	}()
	_ = sub.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := range n {
		if first, _ := benchReadPacket(t, sub); first>>4 != 3 {
			t.Fatalf("message %d: %x", i, first)
		}
	}
	if !waitParked(c, 10*time.Second) {
		t.Fatal("the device did not park again")
	}
	if got := c.recvPublish.Load(); got != n {
		t.Fatalf("%d publishes counted, %d sent", got, n)
	}
}
