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
// SUBSCRIBE or a PINGREQ, and after a PUBLISH from a connection that was
// parked long (a device that sends now and then); one woken again soon
// after it parked (a stream) waits parkAfter in the runtime as before.
// parkAfter is raised far above the waits here, so that a reader that
// waited it out would fail them.
func TestParkEagerly(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, func(s *Server) {
		s.parkAfter = time.Minute
		s.parkedLong = 300 * time.Millisecond
	})
	dev := benchMQTTDial(t, addr, "eager-dev", 4, "eager/cmd")
	c := serverConn(t, s, "eager-dev")
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked after SUBSCRIBE")
	}
	_ = dev.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := dev.Write([]byte{packets.Pingreq << 4, 0}); err != nil {
		t.Fatal(err)
	}
	if first, _ := benchReadPacket(t, dev); first>>4 != packets.Pingresp {
		t.Fatalf("PINGRESP: %x", first)
	}
	if !waitParked(c, 10*time.Second) {
		t.Fatal("not parked after PINGREQ")
	}
	publish := func(body string) {
		t.Helper()
		if _, err := dev.Write(benchPacket(nil, 0x30, append(benchString(nil, "eager/tm"), body...))); err != nil {
			t.Fatal(err)
		}
	}
	// Parked long: a PUBLISH wakes it, and it parks again at once.
	time.Sleep(2 * s.parkedLong)
	publish("t1")
	for deadline := time.Now().Add(10 * time.Second); c.recvPublish.Load() < 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !waitParked(c, 10*time.Second) {
		t.Fatal("a device parked long did not park again after its PUBLISH")
	}
	// Woken right after parking: a stream, which waits in the runtime.
	publish("t2")
	for deadline := time.Now().Add(10 * time.Second); c.recvPublish.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if waitParked(c, time.Second) {
		t.Fatal("a connection woken right after parking parked again at once")
	}
}
