package forward

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/store"
)

// notAppendedErr is what a quorum queue's log answers for an op it never
// appended (cluster/quorum.NotAppendedError).
type notAppendedErr struct{}

func (notAppendedErr) Error() string     { return "not appended (test)" }
func (notAppendedErr) NotAppended() bool { return true }

// handingOver is a store whose message log never appends: a quorum
// queue's leader handing over. Half its answers come at once (the
// publish returns refused), half later (through the Confirmer).
type handingOver struct {
	*store.Memory
	n atomic.Int64
}

func (h *handingOver) AppendMessage(qid, seq uint64, data []byte, done func(error)) {
	if done == nil {
		return
	}
	if h.n.Add(1)%2 == 0 {
		done(notAppendedErr{})
		return
	}
	go done(notAppendedErr{})
}

// newHandingOverOwner is an owner whose queues' logs never append.
func newHandingOverOwner(t testing.TB) *owner {
	t.Helper()
	b, err := exchange.New(&handingOver{Memory: store.NewMemory()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureVHost("/"); err != nil {
		t.Fatal(err)
	}
	o := &owner{t: t, b: b}
	o.serve()
	t.Cleanup(func() {
		o.stop()
		_ = b.Close()
	})
	return o
}

// TestPublishNotAppendedGoesToNextOwner: publishes the owning node
// refuses because its queue's log never appended them (a quorum leader
// handing over) are not nacked: they go to the node the Locator names
// next, where they are confirmed; and, if no other owner comes within
// notAppendedWait, they fail as refused (ErrNacked with ErrNotAppended).
func TestPublishNotAppendedGoesToNextOwner(t *testing.T) {
	old := newHandingOverOwner(t)
	old.declare("q", true)
	next := newOwner(t)
	next.declare("q", true)
	f := newForwarder(t)
	loc := locator(old.addr)
	r := f.Remote("/", "q", loc.locate)
	const n = 40
	errc := make(chan error, n)
	for i := 0; i < n; i++ {
		m := msg("x")
		m.Props.DeliveryMode = 2
		r.Publish(m, func(err error) { errc <- err })
	}
	time.AfterFunc(300*time.Millisecond, func() { loc.addr.Store(next.addr) }) // the new leader is located
	for i := 0; i < n; i++ {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("publish %d: %v (want it sent to the next owner)", i, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d publishes unconfirmed", n-i, n)
		}
	}
	if got := next.ready("q"); got != n {
		t.Fatalf("the next owner holds %d messages, want %d", got, n)
	}

	// The owner keeps refusing and no other is named: refused after
	// notAppendedWait.
	loc.addr.Store(old.addr)
	start := time.Now()
	m := msg("y")
	m.Props.DeliveryMode = 2
	r.Publish(m, func(err error) { errc <- err })
	select {
	case err := <-errc:
		if !errors.Is(err, ErrNacked) || !errors.Is(err, ErrNotAppended) {
			t.Fatalf("publish refused as not appended for good: %v, want ErrNacked and ErrNotAppended", err)
		}
		if time.Since(start) < notAppendedWait {
			t.Fatalf("failed after %v, before notAppendedWait", time.Since(start))
		}
	case <-time.After(notAppendedWait + 10*time.Second):
		t.Fatal("no confirm")
	}
}
