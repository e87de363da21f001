package frontend

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// lineProto is an on-demand Output's protocol for the tests: it queues
// lines, which its writer encodes (a newline after each) and writes to
// out.
type lineProto struct {
	o       *Output
	st      OutputState
	queued  []string // (o.Mu)
	taken   []string
	mu      sync.Mutex // out, starts, stopped
	out     bytes.Buffer
	starts  int
	stopped int
	wg      sync.WaitGroup
}

func (p *lineProto) StartWriter() {
	p.mu.Lock()
	p.starts++
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.o.Drain()
	}()
}
func (p *lineProto) PendingOutput() bool { return len(p.queued) > 0 }
func (p *lineProto) TakeOutput() {
	p.taken, p.queued = p.queued, nil
	p.o.Queued = 0
}
func (p *lineProto) WriteOutput(buf []byte) ([]byte, error) {
	for _, l := range p.taken {
		buf = append(append(buf, l...), '\n')
	}
	p.taken = nil
	p.mu.Lock()
	p.out.Write(buf)
	p.mu.Unlock()
	return buf, nil
}
func (p *lineProto) Stopped() {
	p.mu.Lock()
	p.stopped++
	p.mu.Unlock()
}

func (p *lineProto) queue(l string) {
	p.o.Mu.Lock()
	p.o.Attach(&p.st, p)
	p.queued = append(p.queued, l)
	p.o.Queued += len(l) + 1
	p.o.Signal()
	p.o.Mu.Unlock()
}

func (p *lineProto) written() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// TestOutputOnDemand: an on-demand output starts a writer for what is
// queued, which encodes and writes it in order and returns once nothing
// is; the idle output then gives its state back (Release). WriteAround
// writes in the writer's place when the output is idle, and what the
// transport does not take goes out before what was queued meanwhile.
func TestOutputOnDemand(t *testing.T) {
	var o Output
	p := &lineProto{o: &o}
	for i := range 100 {
		p.queue(string(rune('a' + i%26)))
	}
	p.wg.Wait()
	want := ""
	for i := range 100 {
		want += string(rune('a'+i%26)) + "\n"
	}
	if got := p.written(); got != want {
		t.Fatalf("written %q, want %q", got, want)
	}
	o.Mu.Lock()
	if o.Active() || o.Busy() {
		t.Fatal("a writer still runs with nothing queued")
	}
	if !o.Release() || o.OutputState != nil {
		t.Fatal("an idle output kept its state")
	}

	// WriteAround on an idle output: the transport takes 2 of 5 bytes,
	// bytes (another WriteAround's) and a line are queued while it
	// writes; the rest of p goes first.
	p.out.Reset()
	o.Attach(&p.st, p)
	n, ok := o.WriteAround([]byte("PING!"), func(b []byte) (int, error) {
		go func() {
			o.Mu.Lock()
			o.WriteAround([]byte("PONG"), nil) // a write is under way: queued
			o.Mu.Unlock()
			p.queue("after")
		}()
		time.Sleep(20 * time.Millisecond) // they are queued meanwhile (they wait for Mu)
		p.mu.Lock()
		p.out.Write(b[:2])
		p.mu.Unlock()
		return 2, nil
	})
	o.Mu.Unlock()
	if n != 2 || !ok {
		t.Fatalf("WriteAround: %d, %v", n, ok)
	}
	const want2 = "PING!PONGafter\n"
	for deadline := time.Now().Add(5 * time.Second); p.written() != want2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("written %q, want %q", p.written(), want2)
		}
	}
	p.wg.Wait()
}

// TestOutputHalt: Halt stops an on-demand output: Stopped is called once
// no write is under way, and nothing queued afterwards starts a writer.
func TestOutputHalt(t *testing.T) {
	var o Output
	p := &lineProto{o: &o}
	p.queue("one")
	o.Mu.Lock()
	o.Halt()
	o.Mu.Unlock()
	p.wg.Wait()
	p.queue("two")
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped != 1 || p.starts != 1 {
		t.Fatalf("stopped %d times, %d writers started", p.stopped, p.starts)
	}
	if bytes.Contains(p.out.Bytes(), []byte("two")) {
		t.Fatalf("written after Halt: %q", p.out.String())
	}
}
