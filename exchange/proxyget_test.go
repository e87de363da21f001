package exchange

import (
	"errors"
	"testing"
	"time"
)

// goneRemote is a Remote whose owner does not answer basic.get.
type goneRemote struct{ fakeRemote }

func (r *goneRemote) Get(bool) (*Message, uint64, bool, int, bool, error) {
	return nil, 0, false, 0, false, errors.New("dial: connection refused")
}

// TestProxyGetWaitsForOwner: basic.get on a proxy whose owner does not
// answer is never get-empty: it waits for the queue's next owner (a new
// remote, or this node) and takes the message there, or fails with a
// resource error once getOwnerWait has passed.
func TestProxyGetWaitsForOwner(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "far", QueueOpts{Durable: true})

	// The owner goes; a new one is located a moment later.
	q.BecomeProxy(&goneRemote{})
	next := &fakeRemote{}
	time.AfterFunc(100*time.Millisecond, func() { q.BecomeProxy(next) })
	t0 := time.Now()
	d, ok, err := q.Fetch(false)
	t.Logf("new owner: %v", time.Since(t0))
	if err != nil || !ok || string(d.Msg.Body) != "got" {
		t.Fatalf("Fetch while the owner changes: %v %v %v", d.Msg, ok, err)
	}

	// The owner goes and this node takes the queue over, with a message.
	q.BecomeProxy(&goneRemote{})
	time.AfterFunc(100*time.Millisecond, func() {
		q.BecomeLocal(nil, LogState{})
		if _, err := v.Publish(&Message{RoutingKey: "far", Body: []byte("here")}, PublishOpts{}); err != nil {
			t.Error(err)
		}
	})
	t0 = time.Now()
	deadline := time.Now().Add(getOwnerWait)
	for {
		d, ok, err = q.Fetch(true)
		if err != nil {
			t.Fatalf("Fetch while this node takes over: %v", err)
		}
		if ok || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("taken over: %v", time.Since(t0))
	if !ok || string(d.Msg.Body) != "here" {
		t.Fatalf("Fetch after this node took over: %v %v", d.Msg, ok)
	}

	// No owner answers: an error, not an empty queue.
	q.BecomeProxy(&goneRemote{})
	start := time.Now()
	_, ok, err = q.Fetch(false)
	if ok || KindOf(err) != KindResourceError {
		t.Fatalf("Fetch with no owner answering: ok %v, err %v (want a resource error)", ok, err)
	}
	if waited := time.Since(start); waited < getOwnerWait {
		t.Fatalf("gave up after %v, before getOwnerWait", waited)
	}
}
