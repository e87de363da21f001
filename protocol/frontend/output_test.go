package frontend

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// outSink appends each delivery's body to an Output, as the front ends'
// sinks do, and reports back-pressure.
type outSink struct{ o *Output }

func (s outSink) Deliver(d exchange.Delivery) bool {
	s.o.Mu.Lock()
	defer s.o.Mu.Unlock()
	s.o.Buf = append(s.o.Buf, d.Msg.Body...)
	s.o.Signal()
	return !s.o.PauseLocked(d.Consumer)
}

func (outSink) Cancelled(*exchange.Consumer) {}

// TestOutputBackPressure runs the core over the in-memory store: a
// consumer whose connection's writer is stuck is paused once High bytes
// are queued (the rest stays in the queue), and resumes when the writer
// has drained the buffer under Low; every byte arrives, in order.
func TestOutputBackPressure(t *testing.T) {
	b, err := exchange.New(store.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureVHost("/"); err != nil {
		t.Fatal(err)
	}
	v, _ := b.VHost("/")
	if _, err := v.DeclareQueue("q", exchange.QueueOpts{}); err != nil {
		t.Fatal(err)
	}
	var o Output
	o.Init()
	if _, err := v.Consume("q", exchange.ConsumeOpts{Tag: "c", NoAck: true, Sink: outSink{&o}}); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var mu sync.Mutex
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- o.Run(func(buf []byte, _ []int) error {
			<-gate // stuck until the test opens it
			mu.Lock()
			got.Write(buf)
			mu.Unlock()
			return nil
		})
	}()
	const n, size = 3000, 4 << 10 // 12 MiB: three times High
	var want bytes.Buffer
	for i := range n {
		body := bytes.Repeat([]byte{byte(i)}, size)
		want.Write(body)
		if _, err := v.Publish(&exchange.Message{RoutingKey: "q", Body: body}, exchange.PublishOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	// The writer holds its first take; at most High more bytes were
	// queued behind it before the consumer was paused.
	q, _ := v.Queue("q", nil)
	ready, _, _ := q.Stats()
	o.Mu.Lock()
	queued, paused := len(o.Buf), len(o.Paused)
	o.Mu.Unlock()
	if paused != 1 || queued > High+size || ready < n-2*(High/size)-2 {
		t.Fatalf("stuck writer: %d bytes queued, %d paused, %d left in the queue", queued, paused, ready)
	}
	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		l := got.Len()
		mu.Unlock()
		if l == want.Len() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("written %d of %d bytes", l, want.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("bytes out of order")
	}
	o.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOutputPendingAndFailure: Pending wakes the writer for output that
// Prepare appends; a failed write closes the output, and WaitBelowHigh
// does not hang on a closed one.
func TestOutputPendingAndFailure(t *testing.T) {
	var o Output
	o.Init()
	var pending bool
	o.Pending = func() bool { return pending }
	o.Prepare = func() {
		if pending {
			o.Buf = append(o.Buf, "confirm"...)
			pending = false
		}
	}
	boom := errors.New("broken pipe")
	writes := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- o.Run(func(buf []byte, _ []int) error {
			writes <- string(buf)
			return boom
		})
	}()
	o.Mu.Lock()
	pending = true
	o.Signal()
	o.Mu.Unlock()
	if w := <-writes; w != "confirm" {
		t.Fatalf("wrote %q", w)
	}
	if err := <-done; !errors.Is(err, boom) {
		t.Fatalf("Run = %v", err)
	}
	o.Mu.Lock()
	closed := o.Closed
	o.Buf = make([]byte, High) // a reader's view after the failure
	o.Mu.Unlock()
	if !closed {
		t.Fatal("not closed after a failed write")
	}
	o.WaitBelowHigh() // returns: the output is closed
}
