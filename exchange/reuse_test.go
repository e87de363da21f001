package exchange

import (
	"fmt"
	"sync"
	"testing"
)

// pooled is a reusable message as a front end's pool would hand it out;
// it counts how often it is taken back.
type pooled struct {
	Message
	mu       sync.Mutex
	recycled int
}

func (p *pooled) Recycle(m *Message) {
	if m != &p.Message {
		panic("recycled another message")
	}
	if m.Body != nil || m.RoutingKey != "" || m.rec != nil {
		panic("recycled without being cleared")
	}
	p.mu.Lock()
	p.recycled++
	p.mu.Unlock()
}

func (p *pooled) times() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.recycled
}

// copySink is a CopyingSink: it keeps a copy of each body, never the
// message, unless keep is set (then it answers not done, as a sink that
// holds a delivery to write later).
type copySink struct {
	mu     sync.Mutex
	bodies []string
	seqs   []uint64
	keep   bool
}

func (s *copySink) Deliver(d Delivery) bool { ok, _ := s.DeliverCopy(d); return ok }
func (s *copySink) Cancelled(*Consumer)     {}
func (s *copySink) DeliverCopy(d Delivery) (bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, string(d.Msg.Body))
	s.seqs = append(s.seqs, d.Seq)
	return true, !s.keep
}

func (s *copySink) got() ([]string, []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...), append([]uint64(nil), s.seqs...)
}

// publishPooled publishes a reusable message as the AMQP front end does
// and releases it when the result allows.
func publishPooled(t *testing.T, v *VHost, x, key, body string, persistent bool) (*pooled, PublishResult) {
	t.Helper()
	p := &pooled{}
	p.Reuse(p)
	p.Exchange, p.RoutingKey, p.Body = x, key, []byte(body)
	if persistent {
		p.Props.DeliveryMode = 2
	}
	res, err := v.Publish(&p.Message, PublishOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Solo {
		p.Release()
	}
	return p, res
}

func recycledAll(ps []*pooled) (n int) {
	for _, p := range ps {
		n += p.times()
	}
	return n
}

// TestReuseAutoAck: a reusable message published to one in-memory queue
// and delivered with auto-ack to a copying consumer goes back to its pool
// exactly once, whether it waited in the queue or went out at once; the
// bodies arrive intact and in order.
func TestReuseAutoAck(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	var ps []*pooled
	for i := range 50 { // queued before the consumer comes
		p, res := publishPooled(t, v, "", "q", fmt.Sprint("m", i), false)
		if !res.Solo || res.Routed != 1 {
			t.Fatalf("res %+v, want Solo and routed once", res)
		}
		ps = append(ps, p)
	}
	if n := recycledAll(ps); n != 0 {
		t.Fatalf("%d recycled while queued", n)
	}
	s := &copySink{}
	if _, err := v.Consume("q", ConsumeOpts{NoAck: true, Sink: s}); err != nil {
		t.Fatal(err)
	}
	for i := 50; i < 100; i++ { // delivered inside Publish
		p, _ := publishPooled(t, v, "", "q", fmt.Sprint("m", i), false)
		ps = append(ps, p)
	}
	bodies, _ := s.got()
	if len(bodies) != 100 {
		t.Fatalf("%d delivered", len(bodies))
	}
	for i, b := range bodies {
		if b != fmt.Sprint("m", i) {
			t.Fatalf("delivery %d is %q", i, b)
		}
	}
	for i, p := range ps {
		if n := p.times(); n != 1 {
			t.Fatalf("message %d recycled %d times, want once", i, n)
		}
	}
}

// TestReuseAck: with manual acks the message goes back at its ack, not at
// its delivery; a requeued one at the ack of its redelivery; one
// dead-lettered by a reject never (its dead letter shares the body, which
// arrives intact).
func TestReuseAck(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) { testReuseAck(t, durable) })
	}
}

func testReuseAck(t *testing.T, durable bool) {
	v, _ := newTestVHost(t)
	declareX(t, v, "dlx", "fanout", ExchangeOpts{})
	q := declareQ(t, v, "q", QueueOpts{Durable: durable, Args: Table{"x-dead-letter-exchange": "dlx"}})
	declareQ(t, v, "dead", QueueOpts{})
	bindQ(t, v, "dead", "dlx", "", nil)
	s := &copySink{}
	if _, err := v.Consume("q", ConsumeOpts{Sink: s}); err != nil {
		t.Fatal(err)
	}
	a, _ := publishPooled(t, v, "", "q", "acked", durable)
	b, _ := publishPooled(t, v, "", "q", "requeued", durable)
	c, _ := publishPooled(t, v, "", "q", "rejected", durable)
	_, seqs := s.got()
	if len(seqs) != 3 || recycledAll([]*pooled{a, b, c}) != 0 {
		t.Fatalf("%d delivered, %d recycled before any ack", len(seqs), recycledAll([]*pooled{a, b, c}))
	}
	q.Ack(seqs[0])
	if a.times() != 1 {
		t.Fatalf("acked message recycled %d times", a.times())
	}
	q.Reject([]uint64{seqs[1]}, true)
	if b.times() != 0 {
		t.Fatal("requeued message recycled")
	}
	bodies, seqs := s.got()
	if len(seqs) != 4 || bodies[3] != "requeued" {
		t.Fatalf("redelivery: %q", bodies)
	}
	q.Ack(seqs[3])
	if b.times() != 1 {
		t.Fatalf("requeued message recycled %d times after its ack", b.times())
	}
	q.Reject([]uint64{seqs[2]}, false)
	dq, err := v.Queue("dead", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := dq.Get(true)
	if !ok || string(d.Msg.Body) != "rejected" {
		t.Fatalf("dead letter %v %q", ok, d.Msg.Body)
	}
	if c.times() != 0 {
		t.Fatal("dead-lettered message recycled")
	}
}

// TestReuseKeptWhenShared: every path that may keep the message beyond
// the queues' own use leaves it to the garbage collector: a sink that is
// not a CopyingSink, a CopyingSink that keeps the delivery, basic.get, a
// browse. A fan-out goes back once both queues let go of it, also when
// one of them stores it (the store keeps a copy).
func TestReuseKeptWhenShared(t *testing.T) {
	v, _ := newTestVHost(t)
	check := func(name string, ps []*pooled) {
		t.Helper()
		if n := recycledAll(ps); n != 0 {
			t.Errorf("%s: %d recycled", name, n)
		}
	}

	declareQ(t, v, "plain", QueueOpts{})
	if _, err := v.Consume("plain", ConsumeOpts{NoAck: true, Sink: &sink{}}); err != nil {
		t.Fatal(err)
	}
	p, _ := publishPooled(t, v, "", "plain", "x", false)
	check("plain sink", []*pooled{p})

	declareQ(t, v, "keeps", QueueOpts{})
	if _, err := v.Consume("keeps", ConsumeOpts{NoAck: true, Sink: &copySink{keep: true}}); err != nil {
		t.Fatal(err)
	}
	p, _ = publishPooled(t, v, "", "keeps", "x", false)
	check("sink keeps the delivery", []*pooled{p})

	declareX(t, v, "fan", "fanout", ExchangeOpts{})
	for _, n := range []string{"f1", "f2"} {
		declareQ(t, v, n, QueueOpts{})
		bindQ(t, v, n, "fan", "", nil)
	}
	if _, err := v.Consume("f1", ConsumeOpts{NoAck: true, Sink: &copySink{}}); err != nil {
		t.Fatal(err)
	}
	p, res := publishPooled(t, v, "fan", "", "x", false)
	if !res.Solo || res.Routed != 2 {
		t.Fatalf("fan-out result %+v", res)
	}
	check("fan-out, one queue not consumed yet", []*pooled{p})
	if _, err := v.Consume("f2", ConsumeOpts{NoAck: true, Sink: &copySink{}}); err != nil {
		t.Fatal(err)
	}
	if p.times() != 1 {
		t.Fatalf("fan-out: recycled %d times once both queues delivered it", p.times())
	}

	declareX(t, v, "mixed", "fanout", ExchangeOpts{})
	declareQ(t, v, "m1", QueueOpts{})
	m2 := declareQ(t, v, "m2", QueueOpts{Durable: true})
	bindQ(t, v, "m1", "mixed", "", nil)
	bindQ(t, v, "m2", "mixed", "", nil)
	p, res = publishPooled(t, v, "mixed", "", "x", true)
	if !res.Solo || res.Routed != 2 {
		t.Fatalf("fan-out to a storing queue: result %+v", res)
	}
	if _, err := v.Consume("m1", ConsumeOpts{NoAck: true, Sink: &copySink{}}); err != nil {
		t.Fatal(err)
	}
	check("fan-out, the queue that stores it not consumed yet", []*pooled{p})
	ms := &copySink{}
	if _, err := v.Consume("m2", ConsumeOpts{Sink: ms}); err != nil {
		t.Fatal(err)
	}
	check("fan-out, delivered by the storing queue, not acked", []*pooled{p})
	if _, seqs := ms.got(); len(seqs) != 1 {
		t.Fatalf("m2 delivered %d", len(seqs))
	} else {
		m2.Ack(seqs[0])
	}
	if p.times() != 1 {
		t.Fatalf("fan-out to a storing queue: recycled %d times once both let go", p.times())
	}

	g := declareQ(t, v, "get", QueueOpts{})
	p, _ = publishPooled(t, v, "", "get", "x", false)
	d, ok := g.Get(false)
	if !ok {
		t.Fatal("get: empty")
	}
	g.Ack(d.Seq)
	check("basic.get", []*pooled{p})

	br := declareQ(t, v, "browsed", QueueOpts{})
	p, _ = publishPooled(t, v, "", "browsed", "x", false)
	page, err := br.Browse(BrowseOpts{Count: 10, Scan: 10})
	if err != nil || len(page.Messages) != 1 {
		t.Fatalf("browse: %v %d", err, len(page.Messages))
	}
	if _, err := v.Consume("browsed", ConsumeOpts{NoAck: true, Sink: &copySink{}}); err != nil {
		t.Fatal(err)
	}
	if string(page.Messages[0].Msg.Body) != "x" {
		t.Fatal("browsed body changed")
	}
	check("browsed", []*pooled{p})
}
