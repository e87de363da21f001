package event

import (
	"sync"
	"testing"
	"time"
)

// Off, reporting allocates nothing and reaches no sink.
func TestBusOffCostsNothing(t *testing.T) {
	called := false
	b := NewBus(func(Event) { called = true })
	props := []Prop{{"name", "q"}}
	c := &Conn{Name: "c", Protocol: "AMQP 0-9-1"}
	if n := testing.AllocsPerRun(100, func() {
		b.Emit(QueueCreated, props...)
		b.ConnectionCreated(c)
		b.Channel(ChannelCreated, "c", 1, "u", "/")
		b.EmitKV(UserCreated, "name", "u")
	}); n != 0 {
		t.Fatalf("%v allocations per event while off, want 0", n)
	}
	var nilBus *Bus
	nilBus.Emit(QueueCreated)
	time.Sleep(10 * time.Millisecond)
	if called || nilBus.On() {
		t.Fatal("an event reached the sink while off")
	}
}

// On, events reach the sink in order, each once.
func TestBusOrder(t *testing.T) {
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	b := NewBus(func(e Event) {
		mu.Lock()
		got = append(got, e.Props[0].Value.(string))
		if len(got) == 1000 {
			close(done)
		}
		mu.Unlock()
	})
	b.SetListening(true)
	want := make([]string, 1000)
	for i := range want {
		want[i] = time.Duration(i).String()
		b.Emit(QueueCreated, Prop{"name", want[i]})
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("events not delivered")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d = %s, want %s", i, got[i], want[i])
		}
	}
}

// A stuck sink holds at most MaxPending events; the rest are dropped and
// counted.
func TestBusBounded(t *testing.T) {
	release := make(chan struct{})
	b := NewBus(func(Event) { <-release })
	b.SetListening(true)
	for i := 0; i < 3*MaxPending; i++ {
		b.Emit(QueueCreated)
	}
	// The sink holds one batch of at most MaxPending; MaxPending more wait.
	if d := b.Dropped(); d < MaxPending {
		t.Fatalf("dropped %d of %d events with the sink stuck, want at least %d", d, 3*MaxPending, MaxPending)
	}
	close(release)
}
