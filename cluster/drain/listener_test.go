package drain

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// A suspended gate's listener refuses connections (its socket is closed)
// while its server's Accept waits; resumed, it accepts again on the same
// address; closed, Accept returns net.ErrClosed.
func TestGateSuspendResume(t *testing.T) {
	g := NewGate()
	ln, err := g.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	var accepted atomic.Int32
	served := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				served <- err
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	dial := func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err != nil {
		t.Fatalf("open gate: %v", err)
	}
	g.Suspend()
	if !g.Suspended() {
		t.Fatal("Suspended false after Suspend")
	}
	if err := dial(); err == nil {
		t.Fatal("a suspended listener accepted a connection")
	}
	if err := g.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for accepted.Load() < 2 {
		if err := dial(); err != nil {
			t.Fatalf("after resume: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("accepted %d connections, want 2", accepted.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ln.Addr().String(); got != addr {
		t.Fatalf("address %s after resume, want %s", got, addr)
	}
	g.Suspend()
	ln.Close() // closed while suspended: Accept ends
	select {
	case err := <-served:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

// A listener opened while the gate is suspended (a drained node starting)
// is bound but refuses until Resume.
func TestGateListenWhileSuspended(t *testing.T) {
	g := NewGate()
	g.Suspend()
	ln, err := g.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("accepted while the gate is suspended")
	}
	if err := g.Resume(); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

type countClients struct{ n atomic.Int32 }

func (c *countClients) CloseClients(string) int { c.n.Add(1); return 0 }
func (c *countClients) OpenClients() int        { return 0 }

// Drain records the state in its file, Restore applies it on the next
// start, Revive clears it.
func TestDrainStateFile(t *testing.T) {
	file := t.TempDir() + "/maintenance"
	var changes []bool
	d := New(Config{Gate: NewGate(), Clients: &countClients{}, StateFile: file, OnChange: func(b bool) { changes = append(changes, b) }})
	if err := d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !d.Draining() {
		t.Fatal("not draining after Drain")
	}
	d2 := New(Config{Gate: NewGate(), Clients: &countClients{}, StateFile: file})
	if !d2.Restore() || !d2.Draining() {
		t.Fatal("a restarted node did not restore the drained state")
	}
	if err := d2.Revive(); err != nil {
		t.Fatal(err)
	}
	d3 := New(Config{Gate: NewGate(), Clients: &countClients{}, StateFile: file})
	if d3.Restore() || d3.Draining() {
		t.Fatal("drained again after Revive and a restart")
	}
	if len(changes) != 1 || !changes[0] {
		t.Fatalf("OnChange calls %v, want [true]", changes)
	}
}
