package exchange

import (
	"testing"
	"time"
)

// pacedRemote is a fakeRemote whose owner is over its budget: every
// publish returns a wait that lasts until release is closed.
type pacedRemote struct {
	fakeRemote
	release chan struct{}
	waiting chan struct{} // a publisher entered its wait
}

func (r *pacedRemote) PublishPaced(m *Message, done func(error)) func() {
	r.Publish(m, done)
	return func() {
		r.waiting <- struct{}{}
		<-r.release
	}
}

// TestProxyPublishWaitsOutsideTheLock (issue 43, STYLE 14): a publisher
// held by the owner's back-pressure waits with no lock of the queue held:
// meanwhile the queue's status, a second publish's hand-over, a consumer's
// attach and cancel, and a purge of the proxy all go on; once room comes
// the publisher returns, and the owner got the messages in order.
func TestProxyPublishWaitsOutsideTheLock(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "far", QueueOpts{Durable: true})
	r := &pacedRemote{release: make(chan struct{}), waiting: make(chan struct{}, 4)}
	q.BecomeProxy(r)

	cf := newConfirms()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		if _, err := v.Publish(&Message{RoutingKey: "far", Body: []byte("1"), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: 1}); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-r.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the publisher never waited for room")
	}

	// The publisher waits; the queue does not.
	ops := make(chan struct{})
	go func() {
		defer close(ops)
		_ = q.Status()
		s := &sink{}
		c, err := v.Consume("far", ConsumeOpts{Tag: "c", Prefetch: 2, Sink: s})
		if err != nil {
			t.Error(err)
			return
		}
		c.Cancel()
		_ = q.Purge()
		r.mu.Lock()
		n := len(r.pub)
		r.mu.Unlock()
		if n != 1 {
			t.Errorf("%d publishes handed over, want 1", n)
		}
	}()
	select {
	case <-ops:
	case <-time.After(5 * time.Second):
		close(r.release)
		t.Fatal("the queue's operations waited for the publisher's back-pressure")
	}
	select {
	case <-returned:
		t.Fatal("the publisher returned before the owner made room")
	default:
	}

	// A second publisher hands its message over behind the first, then waits too.
	second := make(chan struct{})
	go func() {
		defer close(second)
		if _, err := v.Publish(&Message{RoutingKey: "far", Body: []byte("2"), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: 2}); err != nil {
			t.Error(err)
		}
	}()
	<-r.waiting
	close(r.release)
	<-returned
	<-second
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pub) != 2 || string(r.pub[0].Body) != "1" || string(r.pub[1].Body) != "2" {
		t.Fatalf("handed over %d", len(r.pub))
	}
}
