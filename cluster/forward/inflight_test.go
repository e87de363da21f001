package forward

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// freezeConn holds whatever it reads while frozen is set: the peer looks
// hung (a SIGSTOPped process) while its TCP connection stays open.
type freezeConn struct {
	net.Conn
	frozen *atomic.Bool
}

func (c *freezeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	for c.frozen.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	return n, err
}

// TestPublishFailsWhenQueueLeavesFrozenNode: a publish sent to a node
// that hangs waits while the queue is still located there, fails with
// ErrMoved once the Locator has named another node for movedGrace, and
// the next publish is confirmed there; the frozen node's late confirm,
// once it goes on, is ignored (done ran once).
func TestPublishFailsWhenQueueLeavesFrozenNode(t *testing.T) {
	o1, o2 := newOwner(t), newOwner(t)
	o1.declare("q", true)
	o2.declare("q", true)
	var frozen atomic.Bool
	f := New(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := tcpDial(ctx, addr)
		if err != nil || addr != o1.addr {
			return c, err
		}
		return &freezeConn{Conn: c, frozen: &frozen}, nil
	}, nil)
	t.Cleanup(f.Close)
	t.Cleanup(func() { frozen.Store(false) }) // before f.Close
	loc := locator(o1.addr)
	rem := f.Remote("/", "q", loc.locate)
	if err := publish(t, rem, msg("warm")); err != nil {
		t.Fatal(err)
	}
	frozen.Store(true)
	var calls atomic.Int32
	res := make(chan error, 2)
	rem.Publish(msg("stuck"), func(err error) { calls.Add(1); res <- err })
	select {
	case err := <-res:
		t.Fatalf("settled while the queue was still on the frozen node: %v", err)
	case <-time.After(3 * movedGrace):
	}
	moved := time.Now()
	loc.addr.Store(o2.addr)
	select {
	case err := <-res:
		if !errors.Is(err, ErrMoved) {
			t.Fatalf("stuck publish: %v, want ErrMoved", err)
		}
		t.Logf("failed %v after the queue moved", time.Since(moved).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the publish to the frozen node still waits after the queue moved")
	}
	if err := publish(t, rem, msg("after")); err != nil {
		t.Fatalf("publish after the move: %v", err)
	}
	frozen.Store(false)
	time.Sleep(200 * time.Millisecond) // the late confirm arrives
	if n := calls.Load(); n != 1 {
		t.Fatalf("done called %d times", n)
	}
}

// TestPublishSettledByCloseAfterGrace: a Remote closed (its queue became
// local here) fails what it still has in flight after movedGrace, unless
// the confirm comes first.
func TestPublishSettledByCloseAfterGrace(t *testing.T) {
	o := newOwner(t)
	o.declare("q", true)
	var frozen atomic.Bool
	f := New(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := tcpDial(ctx, addr)
		if err != nil {
			return c, err
		}
		return &freezeConn{Conn: c, frozen: &frozen}, nil
	}, nil)
	t.Cleanup(f.Close)
	t.Cleanup(func() { frozen.Store(false) }) // before f.Close
	rem := f.Remote("/", "q", locator(o.addr).locate)
	if err := publish(t, rem, msg("warm")); err != nil {
		t.Fatal(err)
	}
	frozen.Store(true)
	res := make(chan error, 1)
	rem.Publish(msg("stuck"), func(err error) { res <- err })
	time.Sleep(50 * time.Millisecond)
	rem.Close()
	select {
	case err := <-res:
		if !errors.Is(err, ErrMoved) {
			t.Fatalf("stuck publish after Close: %v, want ErrMoved", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the publish still waits after Close")
	}
}
