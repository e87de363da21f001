package forward

import (
	"bufio"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/cluster/forward/frame"
	"github.com/trident-broker/trident/exchange"
)

// waitErr waits for one outcome on errc.
func waitErr(t *testing.T, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no outcome", what)
	}
	return nil
}

// TestCreditBackPressure: the server grants credit per hop; while a
// resource alarm blocks publishing it grants none back, so the client
// sends no more than it holds, its budget fills and the publisher waits
// for room (the core's publishers wait, as for a blocked AMQP connection,
// though not under the queue's lock); once the
// alarm clears, credit comes and everything is confirmed, in order.
func TestCreditBackPressure(t *testing.T) {
	o := newOwner(t)
	o.srv.credit = 4 // before any connection
	o.declare("q", true)
	f := newForwarder(t)
	f.maxPending = 8
	r := f.Remote("/", "q", locator(o.addr).locate)
	if err := publish(t, r, msg("warm")); err != nil {
		t.Fatal(err)
	}
	o.b.Alarms().Set("memory", true)
	// The warm-up's credit may not have come back yet: wait for a
	// publish's confirm, which is answered whatever the alarm.
	if err := publish(t, r, msg("granted")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	base := o.ready("q")

	errc := make(chan error, 100)
	var returned atomic.Int32
	go func() {
		for i := 0; i < 20; i++ {
			// The core's way: PublishPaced under the queue's lock,
			// its wait after it.
			if wait := r.(exchange.PacedRemote).PublishPaced(msg("m"), func(err error) { errc <- err }); wait != nil {
				wait()
			}
			returned.Add(1)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	// At most the credit held reached the owner; those were confirmed.
	sent := o.ready("q") - base
	if sent > 4 {
		t.Fatalf("%d publishes reached the owner with 4 credits at most", sent)
	}
	for i := 0; i < sent; i++ {
		if err := waitErr(t, errc, "granted publish"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-errc:
		t.Fatalf("a publish beyond the credit settled during the alarm: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	// The budget (8) is queued: the next Publish waits.
	if n := int(returned.Load()); n != sent+8 {
		t.Fatalf("%d Publish calls returned, want %d (confirmed) + 8 (the budget)", n, sent)
	}

	o.b.Alarms().Set("memory", false)
	for i := sent; i < 20; i++ {
		if err := waitErr(t, errc, "publish after the alarm"); err != nil {
			t.Fatal(err)
		}
	}
	if n := returned.Load(); n != 20 {
		t.Fatalf("%d Publish calls returned", n)
	}
	waitCount(t, r, base+20)
}

// TestServerReaderNeverWaits: a Count the owner can only answer over the
// network (its queue is a proxy to a node that does not answer) does not
// hold the publishes and settles behind it on the same connection.
func TestServerReaderNeverWaits(t *testing.T) {
	o := newOwner(t)
	o.declare("q", false)
	o.declare("far", false)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ownerFwd := newForwarder(t)
	qf, err := o.vhost().Queue("far", nil)
	if err != nil {
		t.Fatal(err)
	}
	qf.BecomeProxy(ownerFwd.Remote("/", "far", locator(ln.Addr().String()).locate))

	f := newForwarder(t)
	loc := locator(o.addr)
	far, q := f.Remote("/", "far", loc.locate), f.Remote("/", "q", loc.locate)
	if err := publish(t, q, msg("warm")); err != nil {
		t.Fatal(err)
	}
	counted := make(chan error, 1)
	go func() { _, _, err := far.Count(); counted <- err }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := publish(t, q, msg("behind the count")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a publish behind a slow call took %v", d)
	}
	if _, _, err := q.Count(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-counted:
	case <-time.After(15 * time.Second):
		t.Fatal("the slow count never returned")
	}
}

// TestVersionRefused: a peer of another protocol version is refused with
// a Refuse frame, and a client refused so fails its publishes at once.
func TestVersionRefused(t *testing.T) {
	o := newOwner(t)
	nc, err := net.Dial("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, _ := frame.Append(nil, &frame.Hello{Version: frame.Version + 1})
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	f, err := readFrame(bufio.NewReader(nc))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := f.(*frame.Refuse); !ok || r.Version != frame.Version {
		t.Fatalf("answer %#v, want a Refuse of version %d", f, frame.Version)
	}

	// A server of another version.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if _, err := readFrame(bufio.NewReader(c)); err == nil {
				b, _ := frame.Append(nil, &frame.Refuse{Version: frame.Version + 1, Reason: "unsupported version"})
				_, _ = c.Write(b)
			}
			c.Close()
		}
	}()
	fw := newForwarder(t)
	err = publish(t, fw.Remote("/", "q", locator(ln.Addr().String()).locate), msg("x"))
	if !errors.Is(err, ErrConnectionLost) || !errors.Is(err, ErrVersion) {
		t.Fatalf("publish to a peer of another version: %v", err)
	}
}

// TestConsumerCancelledWhenQueueDeleted: the owner tells the client that
// its consumer ended; the core hears reset, and the consumer comes back
// once the queue is there again.
func TestConsumerCancelledWhenQueueDeleted(t *testing.T) {
	o := newOwner(t)
	o.declare("q", false)
	f := newForwarder(t)
	r := f.Remote("/", "q", locator(o.addr).locate)
	p := newPushed()
	r.Consume(10, p.push, p.reset)
	waitConsumers(t, r, 1)
	if _, err := o.vhost().DeleteQueue("q", false, false, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.resetC:
	case <-time.After(5 * time.Second):
		t.Fatal("reset not called after the queue was deleted")
	}
	o.declare("q", false)
	if err := publish(t, r, msg("again")); err != nil {
		t.Fatal(err)
	}
	if d := p.next(t); string(d.m.Body) != "again" {
		t.Fatalf("got %q", d.m.Body)
	}
}

// TestStreamConsumeWith: a stream consumer's arguments and own prefetch
// travel; acks give it credit for more.
func TestStreamConsumeWith(t *testing.T) {
	o := newOwner(t)
	o.declareArgs("s", true, exchange.Table{"x-queue-type": "stream"})
	f := newForwarder(t)
	r := f.Remote("/", "s", locator(o.addr).locate)
	for _, b := range []string{"1", "2", "3", "4"} {
		if err := publish(t, r, &exchange.Message{Body: []byte(b), Props: exchange.Properties{DeliveryMode: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	sr, ok := r.(exchange.StreamRemote)
	if !ok {
		t.Fatal("not a StreamRemote")
	}
	p := newPushed()
	sr.ConsumeWith(exchange.Table{"x-stream-offset": "first"}, 2, p.push, p.reset)
	a, b := p.next(t), p.next(t)
	if string(a.m.Body) != "1" || string(b.m.Body) != "2" {
		t.Fatalf("got %q %q", a.m.Body, b.m.Body)
	}
	p.none(t, 200*time.Millisecond) // its own prefetch
	r.Ack(a.tag)
	r.Ack(b.tag)
	if c := p.next(t); string(c.m.Body) != "3" {
		t.Fatalf("got %q", c.m.Body)
	}
}

// TestPublishNeverBlocks (issue 43, STYLE 14): with the owner granting no
// credit (a resource alarm, as a frozen node would not either) and the
// link's budget full, Publish still returns at once (the core calls it
// under a proxy queue's lock); PublishPaced returns the wait for room,
// which ends at its deadline if no room comes; once credit comes every
// publish is confirmed.
func TestPublishNeverBlocks(t *testing.T) {
	o := newOwner(t)
	o.srv.credit = 4
	o.declare("q", true)
	f := newForwarder(t)
	f.maxPending = 8
	f.roomWait = 300 * time.Millisecond
	r := f.Remote("/", "q", locator(o.addr).locate)
	if err := publish(t, r, msg("warm")); err != nil {
		t.Fatal(err)
	}
	o.b.Alarms().Set("memory", true)
	if err := publish(t, r, msg("granted")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	base := o.ready("q")

	errc := make(chan error, 100)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := 0; i < 20; i++ {
			r.Publish(msg("m"), func(err error) { errc <- err })
		}
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish blocked with the budget full")
	}
	pr := r.(exchange.PacedRemote)
	wait := pr.PublishPaced(msg("paced"), func(err error) { errc <- err })
	if wait == nil {
		t.Fatal("no wait for room with the budget full")
	}
	waited := make(chan struct{})
	go func() { wait(); close(waited) }()
	select {
	case <-waited: // the deadline ended it
	case <-time.After(5 * time.Second):
		t.Fatal("the wait for room outlived its deadline")
	}

	o.b.Alarms().Set("memory", false)
	for i := 0; i < 21; i++ {
		if err := waitErr(t, errc, "publish after the alarm"); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(t, r, base+21)
}
