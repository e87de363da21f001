package discovery

import "sync"

// eventQueue hands events from memberlist's goroutines (which hold its
// locks) to one dispatcher goroutine, unbounded, in order.
type eventQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	q      []Event
	closed bool
	done   chan struct{}
}

func newEventQueue(fn func(Event)) *eventQueue {
	e := &eventQueue{done: make(chan struct{})}
	e.cond = sync.NewCond(&e.mu)
	go e.run(fn)
	return e
}

func (e *eventQueue) push(ev Event) {
	e.mu.Lock()
	if !e.closed {
		e.q = append(e.q, ev)
		e.cond.Signal()
	}
	e.mu.Unlock()
}

// close delivers what is queued, then stops the dispatcher and waits for it.
func (e *eventQueue) close() {
	e.mu.Lock()
	e.closed = true
	e.cond.Signal()
	e.mu.Unlock()
	<-e.done
}

func (e *eventQueue) run(fn func(Event)) {
	defer close(e.done)
	for {
		e.mu.Lock()
		for len(e.q) == 0 && !e.closed {
			e.cond.Wait()
		}
		batch := e.q
		e.q = nil
		closed := e.closed
		e.mu.Unlock()
		for _, ev := range batch {
			if fn != nil {
				fn(ev)
			}
		}
		if closed {
			return
		}
	}
}
