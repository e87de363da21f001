package exchange

import (
	"fmt"
	"sync"
	"testing"
)

// TestPublishRun: a run is appended in order and answered once, when all
// of it is durable; the caller's messages and bodies are free to reuse
// once it returns; a named producer's resends in a run are not appended
// again but answered with it; counters count the run's messages; a queue
// that is not a stream, or none, is not taken (ok false, done not called).
func TestPublishRun(t *testing.T) {
	v, _ := newTestVHost(t)
	q := newStreamQ(t, v, "s", nil)
	declareQ(t, v, "classic", QueueOpts{Durable: true})

	var mu sync.Mutex
	var answers []error
	done := func(err error) {
		mu.Lock()
		answers = append(answers, err)
		mu.Unlock()
	}
	answered := func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), answers...)
	}

	ms := make([]Message, 5)
	ptrs := make([]*Message, 5)
	bodies := make([][]byte, 5)
	for i := range ms {
		bodies[i] = []byte(fmt.Sprintf("m%03d", i))
		ms[i] = Message{RoutingKey: "s", Body: bodies[i]}
		ms[i].SetStreamWriter("p", uint64(i+1))
		ptrs[i] = &ms[i]
	}
	n, ok := v.PublishRun("s", ptrs, nil, done)
	if !ok || n != 5 {
		t.Fatalf("PublishRun: %d, %v; want 5, true", n, ok)
	}
	for i := range bodies {
		copy(bodies[i], "XXXX") // the caller reuses them
		ms[i] = Message{}
	}
	waitFor(t, "the run's answer", func() bool { return len(answered()) == 1 })
	if a := answered(); a[0] != nil {
		t.Fatalf("answer %v", a[0])
	}
	if d := q.st.log.Durable(); d != 5 {
		t.Fatalf("durable %d when the run was answered, want 5", d)
	}

	// A resend of ids 4 and 5 with a new 6: 6 alone is appended.
	ptrs = ptrs[:3]
	for i, id := range []uint64{4, 5, 6} {
		ms[i] = Message{RoutingKey: "s", Body: []byte(fmt.Sprintf("r%d", id))}
		ms[i].SetStreamWriter("p", id)
		ptrs[i] = &ms[i]
	}
	if n, ok := v.PublishRun("s", ptrs, nil, done); !ok || n != 3 {
		t.Fatalf("resend: %d, %v; want 3, true", n, ok)
	}
	waitFor(t, "the resend's answer", func() bool { return len(answered()) == 2 })
	if a := answered(); a[1] != nil {
		t.Fatalf("resend's answer %v", a[1])
	}
	waitFor(t, "durable", func() bool { return q.st.log.Durable() == 6 })

	_, s := consume(t, v, "s", ConsumeOpts{Prefetch: 100, Args: Table{"x-stream-offset": "first"}})
	waitFor(t, "deliveries", func() bool { return s.len() == 6 })
	if got := fmt.Sprint(s.bodies()); got != "[m000 m001 m002 m003 m004 r6]" {
		t.Fatalf("stream holds %s", got)
	}
	if c := q.counters.publish.Load(); c != 6 {
		t.Fatalf("queue's publish count %d, want 6", c)
	}

	for _, name := range []string{"classic", "none"} {
		if n, ok := v.PublishRun(name, ptrs, nil, done); ok || n != 0 {
			t.Fatalf("PublishRun(%q): %d, %v; want 0, false", name, n, ok)
		}
	}
	if a := answered(); len(a) != 2 {
		t.Fatalf("%d answers, want 2: a run not taken is not answered", len(a))
	}
}
