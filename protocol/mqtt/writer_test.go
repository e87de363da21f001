package mqtt

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// serverConn finds the server side of the connection with client id id.
func serverConn(t *testing.T, s *Server, id string) *conn {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, c := range s.conns.Snapshot() {
			if c.connected.Load() && c.clientID == id {
				return c
			}
		}
	}
	t.Fatalf("no connection %q", id)
	return nil
}

// outputOf reports c's output under its lock: whether a writer runs (or
// a write is under way), how many items its outbound list holds, and
// whether the connection keeps a writer state.
func outputOf(c *conn) (active bool, queued int, kept bool) {
	c.ob.Mu.Lock()
	defer c.ob.Mu.Unlock()
	if c.w != nil {
		queued = len(c.w.out)
	}
	return c.ob.Active(), queued, c.w != nil
}

// waitWriterGone waits until c has no writer goroutine.
func waitWriterGone(t *testing.T, c *conn) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if active, queued, _ := outputOf(c); !active && queued == 0 {
			return
		}
	}
	t.Fatal("the writer did not return")
}

// An idle subscriber has no writer goroutine; deliveries start one, in
// order, again and again.
func TestDeliveryAfterWriterExited(t *testing.T) {
	s, addr := testServer(t)
	sub := benchMQTTDial(t, addr, "idle-sub", 4, "idle/t")
	pub := benchMQTTDial(t, addr, "idle-pub", 4, "")
	c := serverConn(t, s, "idle-sub")
	next := 0
	for round := range 5 {
		waitWriterGone(t, c)
		// Several messages in one write: the writer that starts for the
		// first may find the others, or exit and be started again.
		var pkts []byte
		for i := range round + 1 {
			pkts = benchPacket(pkts, 0x30, append(benchString(nil, "idle/t"), fmt.Sprintf("m%d", next+i)...))
		}
		if _, err := pub.Write(pkts); err != nil {
			t.Fatal(err)
		}
		_ = sub.SetReadDeadline(time.Now().Add(5 * time.Second))
		for range round + 1 {
			first, body := benchReadPacket(t, sub)
			if first>>4 != packets.Publish {
				t.Fatalf("round %d: packet %x", round, first)
			}
			if got, want := string(body[2+len("idle/t"):]), fmt.Sprintf("m%d", next); got != want {
				t.Fatalf("round %d: got %q, want %q", round, got, want)
			}
			next++
		}
	}
	// A PINGREQ is answered by a writer started for it too.
	waitWriterGone(t, c)
	if _, err := sub.Write([]byte{0xC0, 0}); err != nil {
		t.Fatal(err)
	}
	if first, _ := benchReadPacket(t, sub); first>>4 != packets.Pingresp {
		t.Fatalf("PINGRESP: %x", first)
	}
}

// The connection's writer stops while pushes race to start new writers:
// stopWriter returns once none runs, none starts after it, and what was
// not written stays on the list for cleanup.
func TestStopWriterWhileStarting(t *testing.T) {
	s, _ := testServer(t)
	for i := range 200 {
		a, b := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, b) }()
		c := newConn(s, a, "tcp")
		c.version = 4
		var pushers sync.WaitGroup
		start := make(chan struct{})
		for range 4 {
			pushers.Go(func() {
				<-start
				for range 20 {
					c.sendPacket(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}, false)
				}
			})
		}
		close(start)
		if i%2 == 0 {
			time.Sleep(time.Duration(i%7) * 10 * time.Microsecond)
		}
		c.stopWriter()
		c.ob.Mu.Lock()
		if c.ob.Active() || !c.ob.Halted() {
			t.Fatalf("after stopWriter: writing %v, stopped %v", c.ob.Active(), c.ob.Halted())
		}
		c.ob.Mu.Unlock()
		pushers.Wait()
		if active, _, _ := outputOf(c); active {
			t.Fatal("a writer started after stopWriter")
		}
		c.stopWriter() // again: returns at once
		a.Close()
		b.Close()
	}
}

// A write error stops the writer for good: later pushes start none.
func TestWriterStopsOnError(t *testing.T) {
	s, _ := testServer(t)
	a, b := net.Pipe()
	b.Close()
	c := newConn(s, a, "tcp")
	c.version = 4
	c.sendPacket(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}, false)
	select {
	case <-c.wdone.C():
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not stop after a write error")
	}
	c.sendPacket(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}, false)
	if active, queued, _ := outputOf(c); active || queued != 1 {
		t.Fatalf("after the error: writing %v, %d queued", active, queued)
	}
}
