package mqtt

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/protocol/frontend"
)

// TestOutboundBoundedForClientThatDoesNotRead: a client that floods
// PINGREQs and reads none of the answers cannot grow its output (the
// outbound list's items counted by their size) past frontend.High: the reader stops reading it (TCP's back-pressure
// reaches the client, whose writes stall), and once the client reads
// again every PINGREQ gets its PINGRESP.
func TestOutboundBoundedForClientThatDoesNotRead(t *testing.T) {
	s, addr := testServerSet(t, &memStore{m: map[string][]byte{}}, nil)
	nc, ack := rawConnect3(t, addr, "guest", "guest", "flood", 0xC2, 0, 30*time.Second)
	if ack[1] != 0 {
		t.Fatalf("CONNACK: %x", ack)
	}
	c := serverConn(t, s, "flood")

	var maxLen atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			c.ob.Mu.Lock()
			n := int64(0)
			if c.ob.OutputState != nil {
				n = int64(c.ob.Level())
			}
			c.ob.Mu.Unlock()
			if n > maxLen.Load() {
				maxLen.Store(n)
			}
		}
	}()

	chunk := make([]byte, 64<<10)
	for i := 0; i < len(chunk); i += 2 {
		copy(chunk[i:], pingreq)
	}
	const total = 8 << 20 // PINGREQs the client would send: 16 MiB
	sent, stalled := 0, false
	for sent < total {
		_ = nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := nc.Write(chunk)
		sent += n / 2
		if errors.Is(err, os.ErrDeadlineExceeded) {
			stalled = n%2 == 0 // a half-written PINGREQ would leave a stray byte
			if !stalled {
				_ = nc.SetWriteDeadline(time.Time{})
				if _, err := nc.Write(pingreq[1:]); err != nil {
					t.Fatal(err)
				}
				sent++
				stalled = true
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-sampled
	if !stalled {
		t.Fatalf("the client wrote all %d PINGREQs without reading: nothing held it back", total)
	}
	if got, bound := maxLen.Load(), int64(frontend.High+itemCost+pingReadSize); got > bound {
		t.Fatalf("output grew to %d bytes (bound %d)", got, bound)
	}
	t.Logf("stalled after %d PINGREQs, output at most %d bytes", sent, maxLen.Load())

	// Reading again, every PINGREQ is answered.
	_ = nc.SetWriteDeadline(time.Time{})
	_ = nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	want := int64(2 * sent)
	buf := make([]byte, 256<<10)
	var got int64
	for got < want {
		n, err := nc.Read(buf)
		for _, b := range buf[:n] {
			if (got%2 == 0 && b != 0xD0) || (got%2 == 1 && b != 0) {
				t.Fatalf("byte %d of the answers is %#x, not a PINGRESP's", got, b)
			}
			got++
		}
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("after %d of %d bytes: %v", got, want, err)
		}
		if err != nil {
			break
		}
	}
	if got != want {
		t.Fatalf("%d bytes of PINGRESPs for %d PINGREQs", got, sent)
	}
	if !c.connected.Load() {
		t.Fatal("the connection was closed")
	}
}
