package exchange

import (
	"fmt"
	"sync"
	"testing"
)

func TestRoundRobin(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	var sinks []*sink
	for i := 0; i < 3; i++ {
		_, s := consume(t, v, "q", ConsumeOpts{NoAck: true})
		sinks = append(sinks, s)
	}
	for i := 0; i < 9; i++ {
		publish(t, v, "", "q", fmt.Sprint(i))
	}
	for i, s := range sinks {
		got := s.bodies()
		want := []string{fmt.Sprint(i), fmt.Sprint(i + 3), fmt.Sprint(i + 6)}
		if !equalStrings(got, want) {
			t.Errorf("consumer %d got %v, want %v", i, got, want)
		}
	}
}

func TestPrefetchPerConsumer(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	_, s1 := consume(t, v, "q", ConsumeOpts{Prefetch: 2})
	_, s2 := consume(t, v, "q", ConsumeOpts{Prefetch: 1})
	for i := 0; i < 5; i++ {
		publish(t, v, "", "q", fmt.Sprint(i))
	}
	if s1.len() != 2 || s2.len() != 1 || ready(q) != 2 {
		t.Fatalf("s1 %d s2 %d ready %d, want 2 1 2", s1.len(), s2.len(), ready(q))
	}
	// Acking frees exactly one slot on that consumer.
	q.Ack(s2.deliveries()[0].Seq)
	if s2.len() != 2 || ready(q) != 1 {
		t.Fatalf("after ack: s2 %d ready %d", s2.len(), ready(q))
	}
	// AckMany frees several.
	d := s1.deliveries()
	q.AckMany([]uint64{d[0].Seq, d[1].Seq})
	if s1.len() != 3 || ready(q) != 0 {
		t.Fatalf("after ack-many: s1 %d ready %d", s1.len(), ready(q))
	}
	// No-ack consumers ignore prefetch.
	declareQ(t, v, "q3", QueueOpts{})
	_, s3 := consume(t, v, "q3", ConsumeOpts{NoAck: true, Prefetch: 1})
	for i := 0; i < 3; i++ {
		publish(t, v, "", "q3", "n")
	}
	if s3.len() != 3 {
		t.Fatalf("no-ack consumer limited by prefetch: %d", s3.len())
	}
}

func TestChannelLimitAcrossQueues(t *testing.T) {
	v, _ := newTestVHost(t)
	qa := declareQ(t, v, "qa", QueueOpts{})
	qb := declareQ(t, v, "qb", QueueOpts{})
	l := &Limit{}
	l.SetMax(2)
	s := &sink{}
	consume(t, v, "qa", ConsumeOpts{Limit: l, Sink: s})
	consume(t, v, "qb", ConsumeOpts{Limit: l, Sink: s})
	publish(t, v, "", "qa", "a1")
	publish(t, v, "", "qa", "a2")
	publish(t, v, "", "qb", "b1")
	publish(t, v, "", "qb", "b2")
	if s.len() != 2 || ready(qb) != 2 {
		t.Fatalf("delivered %d, qb ready %d: the channel limit is not shared", s.len(), ready(qb))
	}
	// Acking on qa frees credit that qb uses.
	qa.Ack(s.deliveries()[0].Seq)
	if s.len() != 3 || ready(qb) != 1 {
		t.Fatalf("after ack on qa: delivered %d, qb ready %d", s.len(), ready(qb))
	}
	// Raising the limit wakes the queues.
	l.SetMax(10)
	if s.len() != 4 || ready(qb) != 0 {
		t.Fatalf("after SetMax: delivered %d", s.len())
	}
	// Rejecting with requeue also frees credit; the limit is now 10, so
	// lower it to what is in flight and check the requeued one waits.
	l.SetMax(3)
	d := s.deliveries()
	qb.Reject([]uint64{d[2].Seq}, true)
	if s.len() != 5 {
		t.Fatalf("requeued message not redelivered: %d", s.len())
	}
	publish(t, v, "", "qa", "a3")
	if s.len() != 5 || ready(qa) != 1 {
		t.Fatalf("over the channel limit: delivered %d", s.len())
	}
	l.SetMax(0) // unlimited
	if s.len() != 6 {
		t.Fatalf("after SetMax(0): delivered %d", s.len())
	}
}

func TestLimitWithPrefetch(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	l := &Limit{}
	l.SetMax(3)
	_, s1 := consume(t, v, "q", ConsumeOpts{Limit: l, Prefetch: 1})
	_, s2 := consume(t, v, "q", ConsumeOpts{Limit: l, Prefetch: 1})
	for i := 0; i < 4; i++ {
		publish(t, v, "", "q", "m")
	}
	if s1.len()+s2.len() != 2 || l.used.Load() != 2 {
		t.Fatalf("delivered %d+%d, used %d", s1.len(), s2.len(), l.used.Load())
	}
}

func TestConsumerPriorities(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	_, lo := consume(t, v, "q", ConsumeOpts{Priority: 0, Prefetch: 10})
	_, hi1 := consume(t, v, "q", ConsumeOpts{Priority: 10, Prefetch: 2})
	_, hi2 := consume(t, v, "q", ConsumeOpts{Priority: 10, Prefetch: 2})
	_, mid := consume(t, v, "q", ConsumeOpts{Priority: 5, Prefetch: 1})
	for i := 0; i < 7; i++ {
		publish(t, v, "", "q", fmt.Sprint(i))
	}
	if !equalStrings(hi1.bodies(), []string{"0", "2"}) || !equalStrings(hi2.bodies(), []string{"1", "3"}) {
		t.Fatalf("high priority: %v %v", hi1.bodies(), hi2.bodies())
	}
	if !equalStrings(mid.bodies(), []string{"4"}) || !equalStrings(lo.bodies(), []string{"5", "6"}) {
		t.Fatalf("mid %v lo %v", mid.bodies(), lo.bodies())
	}
	// A freed high-priority consumer gets the next message.
	q.Ack(hi1.deliveries()[0].Seq)
	publish(t, v, "", "q", "7")
	if got := hi1.bodies(); len(got) != 3 || got[2] != "7" {
		t.Fatalf("hi1 %v", got)
	}
}

func TestSingleActiveConsumer(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{Args: Table{"x-single-active-consumer": true}})
	c1, s1 := consume(t, v, "q", ConsumeOpts{Prefetch: 2})
	_, s2 := consume(t, v, "q", ConsumeOpts{})
	_, s3 := consume(t, v, "q", ConsumeOpts{})
	for i := 0; i < 4; i++ {
		publish(t, v, "", "q", fmt.Sprint(i))
	}
	if s1.len() != 2 || s2.len() != 0 || s3.len() != 0 || ready(q) != 2 {
		t.Fatalf("s1 %d s2 %d s3 %d ready %d: only the first consumer may receive", s1.len(), s2.len(), s3.len(), ready(q))
	}
	// The active consumer goes; its unacked stay with it until rejected.
	c1.Cancel()
	if !equalStrings(s2.bodies(), []string{"2", "3"}) || s3.len() != 0 {
		t.Fatalf("after cancel: s2 %v s3 %v", s2.bodies(), s3.bodies())
	}
	d := s1.deliveries()
	q.Reject([]uint64{d[0].Seq, d[1].Seq}, true)
	if got := s2.bodies(); !equalStrings(got, []string{"2", "3", "0", "1"}) || s3.len() != 0 {
		t.Fatalf("requeued to the new active consumer: s2 %v s3 %v", got, s3.bodies())
	}
}

func TestExclusiveConsumer(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	c, _ := consume(t, v, "q", ConsumeOpts{Exclusive: true})
	_, err := v.Consume("q", ConsumeOpts{Sink: &sink{}})
	wantKind(t, err, KindAccessRefused)
	c.Cancel()
	consume(t, v, "q", ConsumeOpts{})
	_, err = v.Consume("q", ConsumeOpts{Sink: &sink{}, Exclusive: true})
	wantKind(t, err, KindAccessRefused)
	_, err = v.Consume("missing", ConsumeOpts{Sink: &sink{}})
	wantKind(t, err, KindNotFound)
}

func TestSinkBackPressure(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	s := &sink{pause: true}
	c, _ := consume(t, v, "q", ConsumeOpts{NoAck: true, Sink: s})
	publish(t, v, "", "q", "1")
	publish(t, v, "", "q", "2")
	if s.len() != 1 || ready(q) != 1 {
		t.Fatalf("paused consumer: delivered %d ready %d", s.len(), ready(q))
	}
	s.mu.Lock()
	s.pause = false
	s.mu.Unlock()
	c.Resume()
	if s.len() != 2 || ready(q) != 0 {
		t.Fatalf("after resume: delivered %d ready %d", s.len(), ready(q))
	}
}

func TestConsumerCancelledOnQueueDelete(t *testing.T) {
	v, _ := newTestVHost(t)
	declareQ(t, v, "q", QueueOpts{})
	l := &Limit{}
	l.SetMax(1)
	c, s := consume(t, v, "q", ConsumeOpts{Limit: l, Tag: "ctag"})
	if c.Tag() != "ctag" || c.Queue().Name() != "q" || c.NoAck() {
		t.Fatal("consumer accessors")
	}
	publish(t, v, "", "q", "m")
	if _, err := v.DeleteQueue("q", false, false, nil); err != nil {
		t.Fatal(err)
	}
	if s.cancels() != 1 {
		t.Fatalf("cancel notifications %d", s.cancels())
	}
	if l.used.Load() != 0 {
		t.Fatalf("channel credit leaked: %d", l.used.Load())
	}
	c.Cancel() // after the queue is gone: harmless
}

func TestDirectReplyTo(t *testing.T) {
	v, _ := newTestVHost(t)
	_, _, err := v.ConsumeReplyTo(ConsumeOpts{Sink: &sink{}})
	wantKind(t, err, KindPreconditionFailed)
	s := &sink{}
	c, name, err := v.ConsumeReplyTo(ConsumeOpts{NoAck: true, Sink: s, Owner: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(name) <= len(ReplyToQueue)+1 || name[:len(ReplyToQueue)+1] != ReplyToQueue+"." {
		t.Fatalf("reply-to name %q", name)
	}
	if _, err := v.DeclareQueue(ReplyToQueue, QueueOpts{Passive: true}); err != nil {
		t.Fatalf("passive declare of the pseudo-queue: %v", err)
	}
	if r := publish(t, v, "", name, "reply"); r.Routed != 1 {
		t.Fatalf("reply routed %d", r.Routed)
	}
	if got := s.bodies(); !equalStrings(got, []string{"reply"}) {
		t.Fatalf("got %v", got)
	}
	// Not listed among the vhost's queues.
	for _, q := range v.Queues() {
		if q.Name() == name {
			t.Fatal("reply-to queue listed")
		}
	}
	c.Cancel()
	if r := publish(t, v, "", name, "late"); r.Routed != 0 {
		t.Fatalf("reply after cancel routed %d", r.Routed)
	}
}

func TestConcurrentPublishConsume(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	l := &Limit{}
	l.SetMax(8)
	var mu sync.Mutex
	seen := map[string]bool{}
	ackSink := &ackingSink{q: q, seen: seen, mu: &mu}
	consume(t, v, "q", ConsumeOpts{Limit: l, Prefetch: 4, Sink: ackSink})
	_, s2 := consume(t, v, "q", ConsumeOpts{NoAck: true})
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if _, err := v.Publish(&Message{RoutingKey: "q", Body: []byte(fmt.Sprint(p, "-", i))}, PublishOpts{}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	ackSink.drain()
	mu.Lock()
	n := len(seen)
	mu.Unlock()
	if n+s2.len()+ready(q) != 800 {
		t.Fatalf("acked %d + no-ack %d + ready %d != 800", n, s2.len(), ready(q))
	}
}

// ackingSink collects deliveries and acks them later, off the queue lock.
type ackingSink struct {
	q    *Queue
	mu   *sync.Mutex
	seen map[string]bool
	pend []uint64
}

func (s *ackingSink) Deliver(d Delivery) bool {
	s.mu.Lock()
	s.seen[string(d.Msg.Body)] = true
	s.pend = append(s.pend, d.Seq)
	s.mu.Unlock()
	return true
}
func (s *ackingSink) Cancelled(*Consumer) {}

func (s *ackingSink) drain() {
	for {
		s.mu.Lock()
		p := s.pend
		s.pend = nil
		s.mu.Unlock()
		if len(p) == 0 {
			return
		}
		s.q.AckMany(p)
	}
}

// TestDropTransientAbove: while every consumer asks for it, a queue whose
// consumers are that far behind drops new transient messages (counted),
// keeps persistent ones, and stops dropping when a consumer without the
// option joins or the last one leaves.
func TestDropTransientAbove(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	c1, s1 := consume(t, v, "q", ConsumeOpts{Prefetch: 2, DropTransientAbove: 5})
	pub := func(body string, persistent bool) {
		m := &Message{RoutingKey: "q", Body: []byte(body)}
		if persistent {
			m.Props.DeliveryMode = 2
		}
		publishM(t, v, m, PublishOpts{})
	}
	for i := 0; i < 20; i++ {
		pub(fmt.Sprint("t", i), false)
	}
	// 2 delivered (the prefetch), 5 ready, 13 dropped.
	if s1.len() != 2 || ready(q) != 5 || q.MsgStats().DropBehind != 13 || v.MsgStats().DropBehind != 13 {
		t.Fatalf("delivered %d ready %d dropped %d (vhost %d)", s1.len(), ready(q), q.MsgStats().DropBehind, v.MsgStats().DropBehind)
	}
	for i := 0; i < 3; i++ {
		pub(fmt.Sprint("p", i), true)
	}
	if ready(q) != 8 || q.MsgStats().DropBehind != 13 {
		t.Fatalf("persistent: ready %d dropped %d", ready(q), q.MsgStats().DropBehind)
	}
	// A second consumer without the option: nothing is dropped.
	c2, _ := consume(t, v, "q", ConsumeOpts{Prefetch: 1})
	before := ready(q)
	for i := 0; i < 4; i++ {
		pub("x", false)
	}
	if ready(q) != before+4 || q.MsgStats().DropBehind != 13 {
		t.Fatalf("mixed consumers: ready %d (was %d) dropped %d", ready(q), before, q.MsgStats().DropBehind)
	}
	c2.Cancel()
	c1.Cancel()
	before = ready(q)
	pub("y", false) // no consumer: the queue keeps what it gets
	if ready(q) != before+1 || q.MsgStats().DropBehind != 13 {
		t.Fatalf("no consumer: ready %d (was %d) dropped %d", ready(q), before, q.MsgStats().DropBehind)
	}
	// What was kept comes in order: t0, t1 went to c1 and t2 to c2, then
	// the transient ones kept, the persistent ones, the later ones.
	got := getBodies(q)
	want := []string{"t3", "t4", "t5", "t6", "p0", "p1", "p2", "x", "x", "x", "x", "y"}
	if !equalStrings(got, want) {
		t.Fatalf("kept %v", got)
	}
}

// TestConsumerPrioritiesBeyondInt32: priorities outside the int32 range
// (a Consumer holds its priority as an int32) keep their order: held
// to the range's ends, not wrapped.
func TestConsumerPrioritiesBeyondInt32(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "q", QueueOpts{})
	_, low := consume(t, v, "q", ConsumeOpts{Priority: -1 << 40, Prefetch: 1})
	_, mid := consume(t, v, "q", ConsumeOpts{Priority: 1, Prefetch: 1})
	_, high := consume(t, v, "q", ConsumeOpts{Priority: 1 << 40, Prefetch: 1})
	for i := range 3 {
		publish(t, v, "", "q", fmt.Sprint(i))
	}
	if !equalStrings(high.bodies(), []string{"0"}) || !equalStrings(mid.bodies(), []string{"1"}) || !equalStrings(low.bodies(), []string{"2"}) {
		t.Fatalf("high %v mid %v low %v", high.bodies(), mid.bodies(), low.bodies())
	}
	if info := q.Consumers(); info[0].Priority != 1<<31-1 {
		t.Fatalf("the highest consumer's priority shows as %d", info[0].Priority)
	}
}
