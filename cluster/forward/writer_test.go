package forward

import (
	"bufio"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
)

// countingConn counts write(2)s and holds the first until released.
type countingConn struct {
	net.Conn
	writes  atomic.Int32
	release chan struct{}
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.writes.Add(1) == 1 {
		<-c.release
	}
	return c.Conn.Write(p)
}

// TestWriterCoalescesKeepsOrderAndFlushesOnClose: frames queued while a
// write is in progress leave together, in order, and close writes what
// is queued.
func TestWriterCoalescesKeepsOrderAndFlushesOnClose(t *testing.T) {
	a, b := net.Pipe()
	cc := &countingConn{Conn: a, release: make(chan struct{})}
	w := newWriter(cc, nil, nil)
	const n = 2000
	got := make(chan []uint64, 1)
	go func() {
		br := bufio.NewReader(b)
		var ids []uint64
		for {
			f, err := readFrame(br)
			if err != nil {
				got <- ids
				return
			}
			ids = append(ids, f.(*frame.Confirm).ID)
		}
	}()
	for i := 0; i < n; i++ {
		if _, err := w.send(&frame.Confirm{ID: uint64(i), OK: true}, true); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // the first write is under way
		}
	}
	close(cc.release)
	w.close()
	b.Close()
	ids := <-got
	if len(ids) != n {
		t.Fatalf("%d frames arrived, want %d", len(ids), n)
	}
	for i, id := range ids {
		if id != uint64(i) {
			t.Fatalf("frame %d has id %d", i, id)
		}
	}
	if k := cc.writes.Load(); k > 3 {
		t.Fatalf("%d writes for %d frames queued behind one", k, n)
	}
	if _, err := w.send(&frame.Ping{}, false); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestWriterReportsWriteErrors(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	w := newWriter(a, nil, nil)
	defer w.abort()
	var err error
	for deadline := time.Now().Add(5 * time.Second); err == nil && time.Now().Before(deadline); {
		_, err = w.send(&frame.Ping{}, false)
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("sends to a closed peer kept succeeding")
	}
}
