package mqtt

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// waitParked waits up to d for c to park, and reports whether it did.
func waitParked(c *conn, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c.parked.Load() {
			return true
		}
	}
	return false
}

// TestParkEagerly: a reader parks as soon as its socket is empty after a
// SUBSCRIBE or a PINGREQ, and after a PUBLISH from a connection woken
// only a few times lately (a device that sends now and then); one woken
// more often (a stream) waits parkAfter in the runtime as before, until
// its wakes fall back below the count. parkAfter is raised far above the
// waits here, so that a reader that waited it out would fail them.
func TestParkEagerly(t *testing.T) {
	const window = 3 * time.Second
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) {
		s.parkAfter = time.Minute
		s.streamWindow = window
	})
	dev := benchMQTTDial(t, addr, "eager-dev", 4, "eager/cmd")
	c := serverConn(t, s, "eager-dev")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked after SUBSCRIBE")
	}
	_ = dev.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := dev.Write([]byte{packets.Pingreq << 4, 0}); err != nil {
		t.Fatal(err)
	}
	if first, _ := benchReadPacket(t, dev); first>>4 != packets.Pingresp {
		t.Fatalf("PINGRESP: %x", first)
	}
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked after PINGREQ")
	}
	sent := uint64(0)
	// publish sends a PUBLISH, waits for the reader to have handled it
	// and reports whether it then parked within a second.
	publish := func() bool {
		t.Helper()
		time.Sleep(window + 100*time.Millisecond) // a new window
		if _, err := dev.Write(benchPacket(nil, 0x30, append(benchString(nil, "eager/tm"), 'x'))); err != nil {
			t.Fatal(err)
		}
		sent++
		for deadline := time.Now().Add(10 * time.Second); c.recvPublish.Load() < sent && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		return waitParked(c, time.Second)
	}
	// A device: woken once in a window, it parks again at once.
	if !publish() {
		t.Fatal("a device that publishes now and then did not park again after its PUBLISH")
	}
	// A stream: woken again and again within the window, it stops
	// parking at once.
	streaming := false
	for range streamWakes + 2 {
		if _, err := dev.Write(benchPacket(nil, 0x30, append(benchString(nil, "eager/tm"), 'y'))); err != nil {
			t.Fatal(err)
		}
		sent++
		for deadline := time.Now().Add(10 * time.Second); c.recvPublish.Load() < sent && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if !waitParked(c, time.Second) {
			streaming = true
			break
		}
	}
	if !streaming {
		t.Fatalf("a connection woken %d times in a row kept parking at once", streamWakes+2)
	}
}

// TestParkedWriterState: a parked subscriber's writer gives back its state
// and lists after a round, and keeps them once the core streams to it
// (more than streamRounds rounds within streamWindow), so that a stream
// does not grow them again every round.
func TestParkedWriterState(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) {
		s.parkAfter = time.Minute
		s.streamWindow = time.Minute
	})
	sub := benchMQTTDial(t, addr, "stream-sub", 4, "stream/t")
	pub := benchMQTTDial(t, addr, "stream-pub", 4, "")
	c := serverConn(t, s, "stream-sub")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("the subscriber did not park")
	}
	_ = sub.SetReadDeadline(time.Now().Add(30 * time.Second))
	kept := func() bool {
		waitWriterGone(t, c)
		_, _, kept := outputOf(c)
		return kept
	}
	for round := range streamRounds + 4 {
		if _, err := pub.Write(benchPacket(nil, 0x30, append(benchString(nil, "stream/t"), 'm'))); err != nil {
			t.Fatal(err)
		}
		if first, _ := benchReadPacket(t, sub); first>>4 != packets.Publish {
			t.Fatalf("round %d: packet %x", round, first)
		}
		if !c.parked.Load() {
			t.Fatalf("round %d: the subscriber is not parked: the test measures nothing", round)
		}
		switch k := kept(); {
		case round == 0 && k:
			t.Fatal("the writer state was kept after one round")
		case round == streamRounds+3 && !k:
			t.Fatalf("the writer state was given back after %d rounds in a row", round+1)
		}
	}
}
