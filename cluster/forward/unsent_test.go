package forward

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestPublishUnsentGoesToNextOwner: publishes that could not be sent
// because the queue's owner refused connections (a leader whose process
// died) are not nacked: they go to the node the Locator names next, in
// order; and a publish kept longer than unsentWait fails with
// ErrConnectionLost.
func TestPublishUnsentGoesToNextOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	o := newOwner(t)
	o.declare("q", true)
	f := newForwarder(t)
	loc := locator(gone)
	r := f.Remote("/", "q", loc.locate)
	const n = 50
	errc := make(chan error, n)
	for i := 0; i < n; i++ {
		r.Publish(msg("x"), func(err error) { errc <- err })
	}
	time.AfterFunc(300*time.Millisecond, func() { loc.addr.Store(o.addr) }) // the new leader is located
	for i := 0; i < n; i++ {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("publish %d: %v (want it sent to the next owner)", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d publishes unconfirmed", n-i, n)
		}
	}
	waitCount(t, r, n)

	// No owner can be reached for longer than unsentWait: ErrConnectionLost.
	loc.addr.Store(gone)
	start := time.Now()
	r.Publish(msg("y"), func(err error) { errc <- err })
	select {
	case err := <-errc:
		if !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("publish to an unreachable owner: %v, want ErrConnectionLost", err)
		}
		if time.Since(start) < unsentWait {
			t.Fatalf("failed after %v, before unsentWait", time.Since(start))
		}
	case <-time.After(unsentWait + 10*time.Second):
		t.Fatal("no confirm")
	}
}
