package frontend

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// demand is an on-demand Output's protocol side for the tests: its writer
// appends to out; an idle output is released.
type demand struct {
	o       *Output
	mu      sync.Mutex
	out     bytes.Buffer
	starts  atomic.Int32
	running atomic.Int32
}

func (d *demand) StartWriter() {
	d.starts.Add(1)
	d.running.Add(1)
	go func() {
		defer d.running.Add(-1)
		d.o.Drain(func(buf []byte, _ []int) error {
			d.mu.Lock()
			d.out.Write(buf)
			d.mu.Unlock()
			return nil
		})
	}()
}
func (d *demand) PendingOutput() bool               { return false }
func (d *demand) PrepareOutput()                    {}
func (d *demand) DirectWrite(p []byte) (int, error) { return 0, nil }
func (d *demand) Idle()                             { d.o.Release() }

func (d *demand) written() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// waitIdle waits until o has no writer and holds no state.
func waitIdle(t *testing.T, o *Output, d *demand) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		o.Mu.Lock()
		idle := o.Idle()
		o.Mu.Unlock()
		if idle && d.running.Load() == 0 {
			return
		}
	}
	t.Fatal("the output did not become idle")
}

// TestOutputOnDemand: a writer is started for queued output and returns
// once it is written, the idle output gives its state back, and
// WriteAround writes in the writer's place, queueing what the transport
// did not take ahead of what came meanwhile.
func TestOutputOnDemand(t *testing.T) {
	var o Output
	d := &demand{o: &o}
	o.InitOnDemand(d)
	for i := range 3 {
		o.Mu.Lock()
		o.Acquire(d)
		o.Buf = append(o.Buf, byte('a'+i))
		o.Signal()
		o.Mu.Unlock()
		waitIdle(t, &o, d)
	}
	if got := d.written(); got != "abc" {
		t.Fatalf("written %q", got)
	}
	// The transport takes one byte: the rest goes to a writer, ahead of
	// what is queued meanwhile.
	if !o.WriteAround([]byte("xyz"), func(p []byte) (int, error) {
		o.Mu.Lock()
		o.Buf = append(o.Buf, '!')
		o.Mu.Unlock()
		return 1, nil
	}, d) {
		t.Fatal("WriteAround refused an open output")
	}
	waitIdle(t, &o, d)
	if got := d.written(); got != "abcyz!" {
		t.Fatalf("written %q, want abcyz! (x went directly)", got)
	}
	// All taken: no writer starts, and the output stays idle.
	starts := d.starts.Load()
	o.WriteAround([]byte("pq"), func(p []byte) (int, error) { return len(p), nil }, d)
	o.Mu.Lock()
	idle := o.Idle()
	o.Mu.Unlock()
	if !idle || d.starts.Load() != starts {
		t.Fatalf("after a whole direct write: idle %v, %d writers started", idle, d.starts.Load()-starts)
	}
	// Stop: the last Drain reports it; nothing is queued after it.
	o.Mu.Lock()
	o.Acquire(d)
	o.StopLocked()
	o.Mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); d.running.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	o.Mu.Lock()
	defer o.Mu.Unlock()
	if !o.Closed || !o.finished || o.Busy() {
		t.Fatalf("after Stop: closed %v, finished %v, busy %v", o.Closed, o.finished, o.Busy())
	}
}
