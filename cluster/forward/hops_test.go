package forward

import (
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// confirms records the outcome of core publishes by tag.
type confirms chan [2]uint64

func (c confirms) Confirm(tag uint64, ok bool) {
	var v uint64
	if ok {
		v = 1
	}
	c <- [2]uint64{tag, v}
}

func (c confirms) wait(t *testing.T, tag uint64) bool {
	t.Helper()
	select {
	case got := <-c:
		if got[0] != tag {
			t.Fatalf("confirm of tag %d, want %d", got[0], tag)
		}
		return got[1] == 1
	case <-time.After(5 * time.Second):
		t.Fatalf("no confirm of tag %d: the link is stuck", tag)
	}
	return false
}

// TestForwardCircleRefused (issue 17): two nodes each believe the other
// holds queue q (as for a moment after two declared it at once), so each
// one's proxy forwards to the other. A persistent publish goes round
// A → B → A → B and is refused there (MaxHops), every hop answering the
// one before, rather than circling for ever; with one confirm channel per
// link the third hop's answer waited behind the first hop's on the A → B
// channel, which waited for it: the link hung for good. Once B holds q
// for real, the next publish from A is confirmed.
func TestForwardCircleRefused(t *testing.T) {
	a, b := newOwner(t), newOwner(t)
	a.declare("q", true)
	b.declare("q", true)
	fa, fb := newForwarder(t), newForwarder(t)
	va, _ := a.b.VHost("/")
	vb, _ := b.b.VHost("/")
	qa, err := va.Queue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := vb.Queue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	qa.BecomeProxy(fa.Remote("/", "q", locator(b.addr).locate))
	qb.BecomeProxy(fb.Remote("/", "q", locator(a.addr).locate))

	c := make(confirms, 4)
	pub := func(tag uint64) bool {
		m := &exchange.Message{RoutingKey: "q", Body: []byte("x"), Props: exchange.Properties{DeliveryMode: 2}}
		res, err := va.Publish(m, exchange.PublishOpts{Confirmer: c, Tag: tag})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Pending {
			// Every hop answered before Publish returned (a fast
			// loopback round trip): the outcome is final, no Confirm.
			return res.OK
		}
		return c.wait(t, tag)
	}
	if pub(1) {
		t.Fatal("a message circling between two proxies was confirmed")
	}
	if pub(2) {
		t.Fatal("second circling message confirmed")
	}
	// B now holds the queue: A's next publish lands there and is confirmed.
	qb.BecomeLocal(nil, exchange.LogState{})
	if !pub(3) {
		t.Fatal("publish to the queue's real home refused")
	}
	if r, _, _ := qb.Stats(); r != 1 {
		t.Fatalf("B holds %d messages, want 1", r)
	}
}
