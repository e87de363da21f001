package forward

import (
	"context"
	"errors"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/headers"
	"github.com/trident-broker/trident/store"
)

// owner is the node that holds the queues: a real core and a forwarding
// Server that the forwarder dials over loopback TCP.
type owner struct {
	t    testing.TB
	b    *exchange.Broker
	srv  *Server
	addr string
	// waitMeta, if set before serve, is the server's wait for the
	// metadata log.
	waitMeta func(idx uint64)
}

func newOwner(t testing.TB) *owner {
	t.Helper()
	b, err := exchange.New(store.NewMemory(), nil)
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

// serve starts a Server on a new address over the same core.
func (o *owner) serve() {
	o.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		o.t.Fatal(err)
	}
	o.srv = NewServer(o.b, o.waitMeta, nil)
	o.addr = ln.Addr().String()
	srv := o.srv
	go func() { _ = srv.Serve(ln) }()
}

func (o *owner) stop() { o.srv.Close() }

func (o *owner) vhost() *exchange.VHost {
	o.t.Helper()
	vh, ok := o.b.VHost("/")
	if !ok {
		o.t.Fatal("no vhost")
	}
	return vh
}

func (o *owner) declareArgs(name string, durable bool, args exchange.Table) {
	o.t.Helper()
	if _, err := o.vhost().DeclareQueue(name, exchange.QueueOpts{Durable: durable, Args: args}); err != nil {
		o.t.Fatal(err)
	}
}

func (o *owner) declare(name string, durable bool) { o.declareArgs(name, durable, nil) }

// ready is how many ready messages the owner's queue holds.
func (o *owner) ready(name string) int {
	o.t.Helper()
	q, err := o.vhost().Queue(name, nil)
	if err != nil {
		o.t.Fatal(err)
	}
	r, _, _ := q.Stats()
	return r
}

func tcpDial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func newForwarder(t testing.TB) *Forwarder {
	f := New(tcpDial, nil)
	t.Cleanup(f.Close)
	return f
}

// fixed is a Locator that returns whatever address is stored in it.
type fixed struct{ addr atomic.Value }

func locator(addr string) *fixed {
	l := &fixed{}
	l.addr.Store(addr)
	return l
}

func (l *fixed) locate() (string, error) { return l.addr.Load().(string), nil }

// publish publishes m through rem and waits for done.
func publish(t testing.TB, rem exchange.Remote, m *exchange.Message) error {
	t.Helper()
	errc := make(chan error, 1)
	rem.Publish(m, func(err error) { errc <- err })
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no confirm")
	}
	return nil
}

func waitCount(t testing.TB, rem exchange.Remote, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _, err := rem.Count()
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("count: %d, %v; want %d", n, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pushed records what a Remote pushes.
type pushed struct {
	mu     sync.Mutex
	ds     []delivery
	resets int
	ch     chan delivery
	resetC chan struct{}
}

type delivery struct {
	m           *exchange.Message
	tag         uint64
	redelivered bool
}

func newPushed() *pushed {
	return &pushed{ch: make(chan delivery, 1000), resetC: make(chan struct{}, 100)}
}

func (p *pushed) push(m *exchange.Message, tag uint64, redelivered bool) {
	p.ch <- delivery{m, tag, redelivered}
}

func (p *pushed) reset() {
	p.mu.Lock()
	p.resets++
	p.mu.Unlock()
	p.resetC <- struct{}{}
}

func (p *pushed) next(t testing.TB) delivery {
	t.Helper()
	select {
	case d := <-p.ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	return delivery{}
}

func (p *pushed) none(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case got := <-p.ch:
		t.Fatalf("unexpected delivery %q", got.m.Body)
	case <-time.After(d):
	}
}

func msg(body string) *exchange.Message {
	return &exchange.Message{Body: []byte(body)}
}

func TestPublishConfirm(t *testing.T) {
	o := newOwner(t)
	o.declare("durable", true)
	o.declare("transient", false)
	f := newForwarder(t)
	loc := locator(o.addr)
	d := f.Remote("/", "durable", loc.locate)
	tr := f.Remote("/", "transient", loc.locate)

	for i := 0; i < 10; i++ {
		m := msg("p")
		m.Props.DeliveryMode = 2
		if err := publish(t, d, m); err != nil {
			t.Fatalf("persistent publish: %v", err)
		}
		if err := publish(t, tr, msg("t")); err != nil {
			t.Fatalf("transient publish: %v", err)
		}
	}
	waitCount(t, d, 10)
	waitCount(t, tr, 10)

	// Many publishes in flight at once, each confirmed exactly once.
	var wg sync.WaitGroup
	var calls atomic.Int64
	for i := 0; i < 2000; i++ {
		wg.Add(1)
		d.Publish(msg("x"), func(err error) {
			if err != nil {
				t.Errorf("publish: %v", err)
			}
			calls.Add(1)
			wg.Done()
		})
	}
	wg.Wait()
	if calls.Load() != 2000 {
		t.Fatalf("%d callbacks", calls.Load())
	}
	waitCount(t, d, 2010)
}

func TestPublishUnreachable(t *testing.T) {
	f := newForwarder(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	r := f.Remote("/", "q", locator(addr).locate)
	if err := publish(t, r, msg("x")); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("got %v, want ErrConnectionLost", err)
	}
	if _, _, err := r.Count(); err == nil {
		t.Fatal("count on an unreachable node succeeded")
	}
}

func TestPublishNackOnOverflow(t *testing.T) {
	o := newOwner(t)
	o.declareArgs("small", false, exchange.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	f := newForwarder(t)
	r := f.Remote("/", "small", locator(o.addr).locate)
	if err := publish(t, r, msg("1")); err != nil {
		t.Fatal(err)
	}
	if err := publish(t, r, msg("2")); !errors.Is(err, ErrNacked) {
		t.Fatalf("got %v, want ErrNacked", err)
	}
}

func TestPropertiesRoundTrip(t *testing.T) {
	o := newOwner(t)
	o.declare("q", true)
	f := newForwarder(t)
	r := f.Remote("/", "q", locator(o.addr).locate)
	ts := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	in := &exchange.Message{Exchange: "orders", RoutingKey: "eu.paris", Body: []byte("body"), Props: exchange.Properties{
		ContentType: "text/plain", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 3,
		CorrelationID: "corr", ReplyTo: "rt", Expiration: "60000", MessageID: "mid",
		Timestamp: ts, Type: "ty", UserID: "someone", AppID: "app",
		Headers: exchange.Table{
			"bool": true, "i8": int8(-8), "u8": uint8(8), "i16": int16(-16), "u16": uint16(16),
			"i32": int32(-32), "u32": uint32(32), "i64": int64(-64), "int": 42, "u64": uint64(64),
			"f32": float32(1.5), "f64": 2.25, "str": "s", "bytes": []byte{0, 1, 2},
			"time": ts, "dec": headers.Decimal{Scale: 2, Value: 12345}, "nil": nil,
			"nested": map[string]any{"a": "b", "deeper": headers.Table{"n": int32(1)}},
			"array":  []any{"x", int32(1), []any{true}, map[string]any{"k": "v"}},
			"CC":     []any{"other"},
		},
	}}
	if err := publish(t, r, in); err != nil {
		t.Fatal(err)
	}
	want := in.Props
	want.Headers = exchange.Table{
		"bool": true, "i8": int8(-8), "u8": uint8(8), "i16": int16(-16), "u16": uint16(16),
		"i32": int32(-32), "u32": uint32(32), "i64": int64(-64), "int": int64(42), "u64": uint64(64),
		"f32": float32(1.5), "f64": 2.25, "str": "s", "bytes": []byte{0, 1, 2},
		"time": ts, "dec": headers.Decimal{Scale: 2, Value: 12345}, "nil": nil,
		"nested": headers.Table{"a": "b", "deeper": headers.Table{"n": int32(1)}},
		"array":  []any{"x", int32(1), []any{true}, headers.Table{"k": "v"}},
		"CC":     []any{"other"},
	}
	check := func(how string, got *exchange.Message) {
		t.Helper()
		if string(got.Body) != "body" {
			t.Errorf("%s: body %q", how, got.Body)
		}
		if got.Exchange != "orders" || got.RoutingKey != "eu.paris" {
			t.Errorf("%s: exchange %q routing key %q, want what it was published with", how, got.Exchange, got.RoutingKey)
		}
		if !reflect.DeepEqual(got.Props, want) {
			t.Errorf("%s: properties\n got %#v\nwant %#v", how, got.Props, want)
		}
	}
	// Back through the forwarder (basic.get and basic.deliver).
	m, _, _, _, ok, err := r.Get(true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	check("get", m)
	if err := publish(t, r, in); err != nil {
		t.Fatal(err)
	}
	p := newPushed()
	r.Consume(1, p.push, p.reset)
	d := p.next(t)
	check("consume", d.m)
	r.Ack(d.tag)
	waitCount(t, r, 0)
}

func TestCCHeaderNotRerouted(t *testing.T) {
	o := newOwner(t)
	o.declare("a", false)
	o.declare("b", false)
	f := newForwarder(t)
	loc := locator(o.addr)
	a, b := f.Remote("/", "a", loc.locate), f.Remote("/", "b", loc.locate)
	m := msg("cc")
	m.Props.Headers = exchange.Table{"CC": []any{"b"}, "BCC": []any{"b"}}
	if err := publish(t, a, m); err != nil {
		t.Fatal(err)
	}
	waitCount(t, a, 1)
	if n, _, err := b.Count(); err != nil || n != 0 {
		t.Fatalf("queue b: %d %v, want 0", n, err)
	}
	got, _, _, _, ok, err := a.Get(true)
	if !ok || err != nil {
		t.Fatalf("get: %v %v", ok, err)
	}
	if !reflect.DeepEqual(got.Props.Headers, map[string]any{"CC": []any{"b"}, "BCC": []any{"b"}}) {
		t.Fatalf("headers %#v", got.Props.Headers)
	}
}

func TestConsumeAckNackReject(t *testing.T) {
	o := newOwner(t)
	o.declare("q", false)
	f := newForwarder(t)
	r := f.Remote("/", "q", locator(o.addr).locate)
	for _, b := range []string{"1", "2", "3"} {
		if err := publish(t, r, msg(b)); err != nil {
			t.Fatal(err)
		}
	}
	p := newPushed()
	r.Consume(10, p.push, p.reset)
	d1, d2, d3 := p.next(t), p.next(t), p.next(t)
	if string(d1.m.Body) != "1" || string(d2.m.Body) != "2" || string(d3.m.Body) != "3" {
		t.Fatalf("order: %q %q %q", d1.m.Body, d2.m.Body, d3.m.Body)
	}
	if d1.redelivered {
		t.Fatal("first delivery marked redelivered")
	}
	r.Ack(d1.tag)
	r.Nack(d2.tag, true)
	again := p.next(t)
	if string(again.m.Body) != "2" || !again.redelivered {
		t.Fatalf("requeued: %q redelivered=%v", again.m.Body, again.redelivered)
	}
	r.Nack(d3.tag, false) // reject: dropped
	r.Ack(again.tag)
	r.Ack(again.tag) // a second ack of the same tag is dropped, not a channel error
	p.none(t, 200*time.Millisecond)
	waitCount(t, r, 0)
	if err := publish(t, r, msg("4")); err != nil {
		t.Fatal(err)
	}
	d4 := p.next(t)
	if string(d4.m.Body) != "4" {
		t.Fatalf("after settling: %q", d4.m.Body)
	}
	p.mu.Lock()
	resets := p.resets
	p.mu.Unlock()
	if resets != 0 {
		t.Fatalf("%d resets", resets)
	}
}

func TestPrefetch(t *testing.T) {
	o := newOwner(t)
	o.declare("q", false)
	f := newForwarder(t)
	r := f.Remote("/", "q", locator(o.addr).locate)
	for i := 0; i < 10; i++ {
		if err := publish(t, r, msg("m")); err != nil {
			t.Fatal(err)
		}
	}
	p := newPushed()
	r.Consume(2, p.push, p.reset)
	a, b := p.next(t), p.next(t)
	p.none(t, 200*time.Millisecond)
	r.Ack(a.tag)
	r.Ack(b.tag) // both in one Settle frame
	p.next(t)
	p.next(t)
	p.none(t, 200*time.Millisecond)

	r.Consume(5, p.push, p.reset) // resize: three more may come
	for i := 0; i < 3; i++ {
		p.next(t)
	}
	p.none(t, 200*time.Millisecond)
	_, consumers, err := r.Count()
	if err != nil || consumers != 1 {
		t.Fatalf("consumers %d %v", consumers, err)
	}

	r.StopConsuming()
	waitConsumers(t, r, 0)
	waitCount(t, r, 8) // 2 acked; the 5 unacked were requeued
}

func waitConsumers(t testing.TB, r exchange.Remote, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, n, err := r.Count()
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers: %d %v, want %d", n, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestResetOnServerRestart(t *testing.T) {
	o := newOwner(t)
	o.declare("q", false)
	f := newForwarder(t)
	loc := locator(o.addr)
	r := f.Remote("/", "q", loc.locate)
	if err := publish(t, r, msg("m")); err != nil {
		t.Fatal(err)
	}
	p := newPushed()
	r.Consume(10, p.push, p.reset)
	first := p.next(t)

	o.stop() // the node goes away: its connections are closed
	select {
	case <-p.resetC:
	case <-time.After(5 * time.Second):
		t.Fatal("reset not called")
	}
	r.Ack(first.tag) // a dead tag: ignored
	o.serve()        // the queue is now reached at another address
	loc.addr.Store(o.addr)

	again := p.next(t)
	if string(again.m.Body) != "m" || !again.redelivered {
		t.Fatalf("after reset: %q redelivered=%v", again.m.Body, again.redelivered)
	}
	if again.tag == first.tag {
		t.Fatal("tag reused across a reset")
	}
	r.Ack(again.tag)
	waitCount(t, r, 0)
	if err := publish(t, r, msg("n")); err != nil {
		t.Fatal(err)
	}
	if d := p.next(t); string(d.m.Body) != "n" {
		t.Fatalf("got %q", d.m.Body)
	}
}

func TestResetOnMove(t *testing.T) {
	a := newOwner(t)
	a.declare("q", false)
	b := newOwner(t) // another node with its own copy of the queue
	b.declare("q", false)
	f := newForwarder(t)
	loc := locator(a.addr)
	r := f.Remote("/", "q", loc.locate)
	if err := publish(t, r, msg("on a")); err != nil {
		t.Fatal(err)
	}
	p := newPushed()
	r.Consume(10, p.push, p.reset)
	if d := p.next(t); string(d.m.Body) != "on a" {
		t.Fatalf("got %q", d.m.Body)
	}
	loc.addr.Store(b.addr) // leader change
	select {
	case <-p.resetC:
	case <-time.After(5 * time.Second):
		t.Fatal("reset not called after the Locator changed")
	}
	if err := publish(t, r, msg("on b")); err != nil {
		t.Fatal(err)
	}
	if d := p.next(t); string(d.m.Body) != "on b" {
		t.Fatalf("got %q", d.m.Body)
	}
	// The unacked message went back to a's queue.
	deadline := time.Now().Add(5 * time.Second)
	for a.ready("q") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("a's queue holds %d ready messages, want 1", a.ready("q"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGetPurgeCount(t *testing.T) {
	o := newOwner(t)
	o.declare("q", false)
	f := newForwarder(t)
	r := f.Remote("/", "q", locator(o.addr).locate)
	if _, _, _, _, ok, err := r.Get(false); ok || err != nil {
		t.Fatalf("get on empty: %v %v", ok, err)
	}
	for _, b := range []string{"1", "2", "3"} {
		if err := publish(t, r, msg(b)); err != nil {
			t.Fatal(err)
		}
	}
	m, tag, redelivered, remaining, ok, err := r.Get(false)
	if err != nil || !ok || string(m.Body) != "1" || redelivered || remaining != 2 || tag == 0 {
		t.Fatalf("get: %q tag=%d redelivered=%v remaining=%d ok=%v err=%v", m.Body, tag, redelivered, remaining, ok, err)
	}
	waitCount(t, r, 2) // one unacked
	r.Nack(tag, true)
	waitCount(t, r, 3)
	m, tag, redelivered, _, ok, err = r.Get(false)
	if err != nil || !ok || string(m.Body) != "1" || !redelivered {
		t.Fatalf("get after requeue: %q redelivered=%v ok=%v err=%v", m.Body, redelivered, ok, err)
	}
	r.Ack(tag)
	waitCount(t, r, 2)
	m, _, _, remaining, ok, err = r.Get(true)
	if err != nil || !ok || string(m.Body) != "2" || remaining != 1 {
		t.Fatalf("no-ack get: %q %d %v %v", m.Body, remaining, ok, err)
	}
	n, err := r.Purge()
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	waitCount(t, r, 0)

	missing := f.Remote("/", "missing", locator(o.addr).locate)
	if _, _, err := missing.Count(); err == nil {
		t.Fatal("count of a missing queue succeeded")
	}
	if _, _, err := r.Count(); err != nil { // the connection is still fine
		t.Fatal(err)
	}
}

func TestCloseFailsPending(t *testing.T) {
	o := newOwner(t)
	o.declare("q", false)
	f := New(tcpDial, nil)
	r := f.Remote("/", "q", locator(o.addr).locate)
	p := newPushed()
	r.Consume(1, p.push, p.reset)
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		r.Publish(msg("x"), func(error) { wg.Done() })
	}
	f.Close()
	wg.Wait() // every callback ran, whatever the outcome
	errc := make(chan error, 1)
	r.Publish(msg("late"), func(err error) { errc <- err })
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
}

func TestTags(t *testing.T) {
	for _, c := range []struct {
		get  bool
		gen  uint32
		dtag uint64
	}{{false, 1, 1}, {true, 7, 1 << 39}, {false, genMask, 12345}} {
		get, gen, dtag := splitTag(makeTag(c.get, c.gen, c.dtag))
		if get != c.get || gen != c.gen || dtag != c.dtag {
			t.Errorf("%+v: got %v %d %d", c, get, gen, dtag)
		}
	}
}

func BenchmarkPublishConfirm(b *testing.B) {
	o := newOwner(b)
	o.declare("bench", true)
	f := newForwarder(b)
	r := f.Remote("/", "bench", locator(o.addr).locate)
	body := make([]byte, 256)
	var wg sync.WaitGroup
	var failed atomic.Int64
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
		wg.Done()
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wg.Add(1)
		r.Publish(&exchange.Message{Body: body, Props: exchange.Properties{DeliveryMode: 2}}, done)
	}
	wg.Wait()
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d publishes failed", failed.Load())
	}
}

// TestPublishWaitsForLocation: publishes made while the queue cannot be
// located (a leader being elected) wait, in order, and go out once it can.
func TestPublishWaitsForLocation(t *testing.T) {
	o := newOwner(t)
	o.declare("q", true)
	f := newForwarder(t)
	var calls atomic.Int32
	r := f.Remote("/", "q", func() (string, error) {
		if calls.Add(1) < 5 {
			return "", errors.New("no leader yet")
		}
		return o.addr, nil
	})
	errs := make(chan error, 10)
	for i := 0; i < 10; i++ {
		r.Publish(&exchange.Message{Body: []byte{byte('0' + i)}, Props: exchange.Properties{DeliveryMode: 2}}, func(err error) { errs <- err })
	}
	for i := 0; i < 10; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("publishes waiting for the location never went out")
		}
	}
	for i := 0; i < 10; i++ {
		m, _, _, _, ok, err := r.Get(true)
		if err != nil || !ok || string(m.Body) != string(rune('0'+i)) {
			t.Fatalf("message %d: %v %v %v", i, m, ok, err)
		}
	}
}

// TestPublishToMissingQueueIsNacked: the owning node refuses a forwarded
// message for a queue it does not have, rather than confirming a message
// that went nowhere.
func TestPublishToMissingQueueIsNacked(t *testing.T) {
	o := newOwner(t)
	f := newForwarder(t)
	r := f.Remote("/", "not-there", locator(o.addr).locate)
	if err := publish(t, r, msg("x")); !errors.Is(err, ErrNacked) {
		t.Fatalf("got %v, want ErrNacked", err)
	}
}

// TestPublishWaitsForOwnersMeta: a Remote's publishes carry this node's
// metadata index until the owner confirmed one; the owner waits for its
// metadata log before routing them. Here the owner's "log" declares the
// queue when asked to catch up, as a node that applies a declaration a
// moment after the sender did: the message is routed, not nacked.
func TestPublishWaitsForOwnersMeta(t *testing.T) {
	o := newOwner(t)
	var waits []uint64
	var mu sync.Mutex
	o.stop()
	o.waitMeta = func(idx uint64) {
		mu.Lock()
		waits = append(waits, idx)
		mu.Unlock()
		vh, ok := o.b.VHost("/")
		if !ok {
			t.Error("no vhost")
			return
		}
		if _, err := vh.DeclareQueue("late", exchange.QueueOpts{Durable: true}); err != nil {
			t.Errorf("declare: %v", err)
		}
	}
	o.serve()
	f := newForwarder(t)
	var applied atomic.Uint64
	applied.Store(41)
	f.SetMetaIndex(func() uint64 { return applied.Add(1) })
	r := f.Remote("/", "late", locator(o.addr).locate)
	if err := publish(t, r, msg("first")); err != nil {
		t.Fatalf("first publish to a queue the owner learns of late: %v", err)
	}
	for i := 0; i < 5; i++ {
		if err := publish(t, r, msg("more")); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(t, r, 6)
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != 1 || waits[0] != 42 {
		t.Fatalf("owner waited for %v, want [42] (only until the first confirm)", waits)
	}
	// Without the index the owner refuses a publish to a queue it lacks.
	f2 := newForwarder(t)
	if err := publish(t, f2.Remote("/", "not-there", locator(o.addr).locate), msg("x")); !errors.Is(err, ErrNacked) {
		t.Fatalf("got %v, want ErrNacked", err)
	}
}
