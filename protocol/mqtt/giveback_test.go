package mqtt

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestGiveBackAfterManyEnded: a wave of ended connections runs one
// collection that gives memory back, after the delay; fewer run none.
func TestGiveBackAfterManyEnded(t *testing.T) {
	var calls atomic.Int32
	old := giveBack
	giveBack = func() { calls.Add(1) }
	defer func() { giveBack = old }()

	g := &giveBackState{delay: 50 * time.Millisecond}
	for range giveBackAfter - 1 {
		g.noteEnded()
	}
	time.Sleep(200 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d collections after %d ended connections, want none", n, giveBackAfter-1)
	}
	for range 3 * giveBackAfter {
		g.noteEnded()
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d collections for one wave of disconnections, want 1", n)
	}
	// The next wave runs another.
	for range giveBackAfter {
		g.noteEnded()
	}
	deadline = time.Now().Add(5 * time.Second)
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d collections after two waves, want 2", n)
	}
}

// TestParkGivesBackBurstState: a subscriber that took a burst of QoS 1
// messages keeps nothing of it once it parks: no packet-id table, no
// settled-acknowledgement batch, no publish topic cache, no encoding
// cache, no writer state; and it receives and acknowledges QoS 1 messages as before.
func TestParkGivesBackBurstState(t *testing.T) {
	s, addr := testServer(t)
	sub := benchMQTTDial(t, addr, "burst-sub", 4, "")
	// SUBSCRIBE burst/t at QoS 1.
	body := benchString(binary.BigEndian.AppendUint16(nil, 1), "burst/t")
	if _, err := sub.Write(benchPacket(nil, 0x82, append(body, 1))); err != nil {
		t.Fatal(err)
	}
	if first, ack := benchReadPacket(t, sub); first>>4 != packets.Suback || ack[2] != 1 {
		t.Fatalf("SUBACK: %x %x", first, ack)
	}
	pub := benchMQTTDial(t, addr, "burst-pub", 4, "")
	c := serverConn(t, s, "burst-sub")
	for round := range 2 {
		var pkts []byte
		for i := range 50 {
			vh := binary.BigEndian.AppendUint16(benchString(nil, "burst/t"), uint16(i+1))
			pkts = benchPacket(pkts, 0x32, append(vh, fmt.Sprintf("m%d", i)...))
		}
		if _, err := pub.Write(pkts); err != nil {
			t.Fatal(err)
		}
		_ = sub.SetReadDeadline(time.Now().Add(10 * time.Second))
		var acks []byte
		for i := range 50 {
			first, b := benchReadPacket(t, sub)
			if first>>4 != packets.Publish || (first>>1)&3 != 1 {
				t.Fatalf("round %d message %d: packet %x", round, i, first)
			}
			pid := b[2+len("burst/t") : 4+len("burst/t")]
			acks = append(acks, packets.Puback<<4, 2, pid[0], pid[1])
		}
		c.infMu.Lock()
		held := len(c.inflight.slots)
		c.infMu.Unlock()
		if held == 0 {
			t.Fatalf("round %d: no packet-id table while 50 are in flight: the test measures nothing", round)
		}
		if _, err := sub.Write(acks); err != nil {
			t.Fatal(err)
		}
		// The subscriber reads its PUBACKs (it may have been parked
		// meanwhile), then parks parkAfter later.
		deadline := time.Now().Add(parkAfter + 10*time.Second)
		for time.Now().Before(deadline) {
			c.infMu.Lock()
			n := c.inflight.len()
			c.infMu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for !c.parked.Load() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !c.parked.Load() {
			t.Fatalf("round %d: the subscriber did not park", round)
		}
		c.infMu.Lock()
		slots, n := c.inflight.slots, c.inflight.len()
		c.infMu.Unlock()
		if slots != nil || n != 0 {
			t.Fatalf("round %d: parked with a packet-id table of %d slots, %d in flight", round, len(slots), n)
		}
		if c.rd != nil {
			t.Fatalf("round %d: parked with the reader's state (settled acknowledgements)", round)
		}
		waitWriterGone(t, c)
		if _, _, kept := outputOf(c); kept {
			t.Fatalf("round %d: parked with the writer's state or lists", round)
		}
	}
}

// TestGiveBackAfterWaveNotDuringChurn: a wave of connections (coming,
// here) gives memory back once it has been quiet for the delay, not
// while connections keep coming; an accepted connection counts, and so
// does its parking.
func TestGiveBackAfterWaveNotDuringChurn(t *testing.T) {
	var calls atomic.Int32
	old := giveBack
	giveBack = func() { calls.Add(1) }
	defer func() { giveBack = old }()

	const delay = 100 * time.Millisecond
	g := &giveBackState{delay: delay}
	for range giveBackAfter {
		g.noteConnected()
	}
	// A churn that never stops for the delay: no collection meanwhile.
	for range 20 {
		time.Sleep(delay / 4)
		g.noteConnected()
		if n := calls.Load(); n != 0 {
			t.Fatalf("%d collections while connections keep coming", n)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * delay)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d collections once the wave was over, want 1", n)
	}

	s, addr := testServer(t)
	benchMQTTDial(t, addr, "counted", 4, "")
	if !waitParked(serverConn(t, s, "counted"), 10*time.Second) {
		t.Fatal("not parked after CONNECT")
	}
	for deadline := time.Now().Add(5 * time.Second); s.giveBack.churn.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // counted just after parking
	}
	if n := s.giveBack.churn.Load(); n != 2 {
		t.Fatalf("an accepted connection that parked counted %d times towards the give-back, want 2", n)
	}
}

// TestGiveBackEmptiesPools: the give-back frees what sync.Pools hold
// (one collection only moves it to their victim caches), so that the read
// buffers, readers and writer states a burst left in them are given back
// with the rest.
func TestGiveBackEmptiesPools(t *testing.T) {
	var pool sync.Pool
	b := new([4096]byte)
	w := weak.Make(b)
	pool.Put(b)
	b = nil
	giveBack()
	if w.Value() != nil {
		t.Fatal("an object a sync.Pool held is still there after the give-back")
	}
	runtime.KeepAlive(&pool)
}
