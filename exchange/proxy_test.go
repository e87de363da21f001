package exchange

import (
	"reflect"
	"sync"
	"testing"
	"time"
)

// fakeRemote records what a proxy queue asks of its owner.
type fakeRemote struct {
	mu       sync.Mutex
	pub      []*Message
	done     []func(error)
	prefetch int
	push     func(*Message, uint64, bool)
	reset    func()
	acks     []uint64
	nacks    []uint64
	stopped  int
	closed   bool
}

func (r *fakeRemote) Publish(m *Message, done func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pub = append(r.pub, m)
	r.done = append(r.done, done)
}
func (r *fakeRemote) Consume(prefetch int, push func(*Message, uint64, bool), reset func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prefetch, r.push, r.reset = prefetch, push, reset
}
func (r *fakeRemote) StopConsuming() { r.mu.Lock(); r.stopped++; r.prefetch = 0; r.mu.Unlock() }
func (r *fakeRemote) Ack(tag uint64) { r.mu.Lock(); r.acks = append(r.acks, tag); r.mu.Unlock() }
func (r *fakeRemote) Nack(tag uint64, requeue bool) {
	r.mu.Lock()
	r.nacks = append(r.nacks, tag)
	r.mu.Unlock()
}
func (r *fakeRemote) Get(bool) (*Message, uint64, bool, int, bool, error) {
	return &Message{Body: []byte("got")}, 77, true, 3, true, nil
}
func (r *fakeRemote) Purge() (int, error)      { return 5, nil }
func (r *fakeRemote) Count() (int, int, error) { return 9, 2, nil }
func (r *fakeRemote) Close()                   { r.mu.Lock(); r.closed = true; r.mu.Unlock() }
func (r *fakeRemote) state() (int, []uint64, []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prefetch, r.acks, r.nacks
}
func (r *fakeRemote) pushed() func(*Message, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.push
}

func TestProxyQueue(t *testing.T) {
	v, st := newTestVHost(t)
	q := declareQ(t, v, "far", QueueOpts{Durable: true})
	r := &fakeRemote{}
	q.BecomeProxy(r)

	// Publishes go to the owner; the confirm waits for it.
	cf := newConfirms()
	res, err := v.Publish(&Message{RoutingKey: "far", Body: []byte("p"), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: 7})
	if err != nil || !res.Pending || res.Routed != 1 {
		t.Fatalf("publish %+v %v", res, err)
	}
	if st.Appends != 0 {
		t.Fatal("a proxied message was stored locally")
	}
	r.done[0](nil)
	<-cf.ch
	if got := cf.get(7); len(got) != 1 || !got[0] {
		t.Fatalf("confirm %v", got)
	}

	// Consumers are fed from the owner, within their prefetch.
	s := &sink{}
	c, err := v.Consume("far", ConsumeOpts{Tag: "c", Prefetch: 2, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := r.state(); p != 2 {
		t.Fatalf("upstream prefetch %d, want 2", p)
	}
	push := r.pushed()
	push(&Message{Body: []byte("a")}, 101, false)
	push(&Message{Body: []byte("b")}, 102, true)
	push(&Message{Body: []byte("c")}, 103, false)
	ds := s.deliveries()
	if len(ds) != 2 || ds[0].Redelivered || !ds[1].Redelivered {
		t.Fatalf("deliveries %v", s.bodies())
	}
	q.Ack(ds[0].Seq)                    // → upstream ack of 101
	q.Reject([]uint64{ds[1].Seq}, true) // → upstream nack of 102, not requeued here
	if _, acks, nacks := r.state(); !reflect.DeepEqual(acks, []uint64{101}) || !reflect.DeepEqual(nacks, []uint64{102}) {
		t.Fatalf("acks %v nacks %v", acks, nacks)
	}
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("bodies %v", got)
	}
	// A reset forgets what was pushed before it.
	push(&Message{Body: []byte("d")}, 104, false)
	r.reset()
	q.Ack(s.deliveries()[2].Seq) // c: still settles upstream
	if r, _, _ := q.Stats(); r != 0 {
		t.Fatalf("ready after reset %d", r)
	}
	c.Cancel()
	if r.stopped != 1 {
		t.Fatalf("upstream consumer not stopped")
	}
	if n := q.Purge(); n != 5 {
		t.Fatalf("purge %d", n)
	}
	info, err := v.DeclareQueue("far", QueueOpts{Passive: true})
	if err != nil || info.Messages != 9 || info.Consumers != 2 {
		t.Fatalf("passive declare %+v %v", info, err)
	}
	// Management sees the owner's counts, fetched in the background.
	q.Status()
	deadline := time.Now().Add(5 * time.Second)
	for st := q.Status(); st.Ready != 9 || st.Consumers != 2; st = q.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("proxy status %+v, want the owner's 9 ready, 2 consumers", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d, ok := q.Get(false)
	if !ok || !d.Redelivered || string(d.Msg.Body) != "got" {
		t.Fatalf("get %+v %v", d, ok)
	}
	q.Ack(d.Seq)
	if _, acks, _ := r.state(); acks[len(acks)-1] != 77 {
		t.Fatalf("get not acked upstream: %v", acks)
	}
}

func TestBecomeLocalLoadsReplicatedMessages(t *testing.T) {
	v, st := newTestVHost(t)
	q := declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum", "x-delivery-limit": int64(2)}})
	r := &fakeRemote{}
	q.BecomeProxy(r)
	s := &sink{}
	if _, err := v.Consume("qq", ConsumeOpts{Tag: "c", Sink: s}); err != nil {
		t.Fatal(err)
	}
	r.pushed()(&Message{Body: []byte("old")}, 1, false) // delivered, unacked: forgotten
	data := func(body string) []byte { return encodeMessage(&Message{Body: []byte(body)}, nowNano(), nil) }
	// The FSM wrote them to the node's store under the queue's keys.
	k10, k11 := storeKey(0, 10, false), storeKey(0, 11, false)
	st.AppendMessage(q.ID(), k10, data("x"), nil)
	st.AppendMessage(q.ID(), k11, data("y"), nil)
	q.BecomeLocal(st, LogState{
		Groups:  []LogGroup{{Top: 0, Count: 2, Bytes: int64(len(data("x")) * 2), MaxKey: k11}},
		Returns: func(k uint64) uint32 { return map[uint64]uint32{k11: 2}[k] },
	})
	if !r.closed {
		t.Fatal("remote not closed")
	}
	ds := s.deliveries()
	if len(ds) != 3 || string(ds[1].Msg.Body) != "x" || !ds[1].Redelivered || !ds[2].Redelivered {
		t.Fatalf("deliveries %v", s.bodies())
	}
	q.Ack(ds[0].Seq) // forgotten: ignored
	q.Ack(ds[1].Seq)
	if st.Deletes != 1 {
		t.Fatalf("deletes %d, want 1", st.Deletes)
	}
	// y came back twice before: this delivery was its third, past the
	// limit of 2, so a requeue drops it.
	q.Reject([]uint64{ds[2].Seq}, true)
	if n := len(s.deliveries()); n != 3 || q.Status().Ready != 0 {
		t.Fatalf("y requeued past its delivery limit: %d deliveries, %d ready", n, q.Status().Ready)
	}
	// New messages get seqs after the loaded ones.
	if _, err := v.Publish(&Message{RoutingKey: "qq", Body: []byte("z")}, PublishOpts{}); err != nil {
		t.Fatal(err)
	}
	if ds := s.deliveries(); ds[3].Seq&seqMask <= 11 {
		t.Fatalf("new seq %d", ds[3].Seq)
	}
}

// holdingRemote is a proxy that could not locate the owner yet: it
// holds every publish, and gives them back (HandBackRemote).
type holdingRemote struct {
	fakeRemote
	handedBack bool
}

func (r *holdingRemote) HandBack(later func(*Message, func(error))) []HeldPublish {
	r.mu.Lock()
	defer r.mu.Unlock()
	var held []HeldPublish
	for i, m := range r.pub {
		held = append(held, HeldPublish{Msg: m, Done: r.done[i]})
	}
	r.pub, r.done, r.handedBack = nil, nil, true
	return held
}

// TestBecomeLocalTakesHeldPublishes: publishes a proxy still held when
// this node became the queue's leader are taken by the queue, in order,
// ahead of later ones, and confirmed: not failed with the proxy.
func TestBecomeLocalTakesHeldPublishes(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "qh", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
	r := &holdingRemote{}
	q.BecomeProxy(r)
	cf := newConfirms()
	for i, body := range []string{"h1", "h2"} {
		res, err := v.Publish(&Message{RoutingKey: "qh", Body: []byte(body), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: uint64(i + 1)})
		if err != nil || !res.Pending {
			t.Fatalf("publish %s: %+v %v", body, res, err)
		}
	}
	q.BecomeLocal(q.vh.b.store, LogState{})
	if !r.handedBack || !r.closed {
		t.Fatalf("handed back %v, closed %v", r.handedBack, r.closed)
	}
	res, err := v.Publish(&Message{RoutingKey: "qh", Body: []byte("after"), Props: Properties{DeliveryMode: 2}}, PublishOpts{Confirmer: cf, Tag: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pending {
		// Stored before Publish returned: the caller confirms it (as
		// the front ends do), the Confirmer is not called.
		cf.Confirm(3, res.OK)
	}
	for tag := uint64(1); tag <= 3; tag++ {
		deadline := time.Now().Add(5 * time.Second)
		for len(cf.get(tag)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no confirm for %d", tag)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := cf.get(tag); len(got) != 1 || !got[0] {
			t.Fatalf("confirm %d: %v", tag, got)
		}
	}
	s := &sink{}
	if _, err := v.Consume("qh", ConsumeOpts{Tag: "c", Sink: s}); err != nil {
		t.Fatal(err)
	}
	if got := s.bodies(); !reflect.DeepEqual(got, []string{"h1", "h2", "after"}) {
		t.Fatalf("bodies %v", got)
	}
}

// TestStaleDeliveryCannotSettleNewEntry: a delivery from the proxy era
// whose seq equals that of an entry loaded when the queue became local
// settles nothing (the epoch in Delivery.Seq differs).
func TestStaleDeliveryCannotSettleNewEntry(t *testing.T) {
	v, st := newTestVHost(t)
	q := declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
	r := &fakeRemote{}
	q.BecomeProxy(r)
	s := &sink{}
	if _, err := v.Consume("qq", ConsumeOpts{Tag: "c", Sink: s}); err != nil {
		t.Fatal(err)
	}
	r.pushed()(&Message{Body: []byte("proxied")}, 9, false)
	stale := s.deliveries()[0].Seq
	data := encodeMessage(&Message{Body: []byte("replicated")}, nowNano(), nil)
	k := storeKey(0, stale&seqMask, false)
	st.AppendMessage(q.ID(), k, data, nil)
	q.BecomeLocal(st, LogState{Groups: []LogGroup{{Top: 0, Count: 1, Bytes: int64(len(data)), MaxKey: k}}})
	fresh := s.deliveries()[1]
	if fresh.Seq&seqMask != stale&seqMask || fresh.Seq == stale {
		t.Fatalf("test setup: seqs %x and %x", stale, fresh.Seq)
	}
	q.Ack(stale)
	if st.Deletes != 0 {
		t.Fatal("a stale delivery settled the new entry with the same seq")
	}
	q.Ack(fresh.Seq)
	if st.Deletes != 1 {
		t.Fatalf("deletes %d after acking the live delivery", st.Deletes)
	}
}

// locatingRemote asks the queue for its members inside Publish, as the
// node's Locator does for a quorum queue it is not a member of.
type locatingRemote struct {
	fakeRemote
	q *Queue
}

func (r *locatingRemote) Publish(m *Message, done func(error)) {
	_ = r.q.Members()
	r.fakeRemote.Publish(m, done)
}

func TestProxyPublishMayReadMembers(t *testing.T) {
	v, _ := newTestVHost(t)
	q := declareQ(t, v, "qq", QueueOpts{Durable: true, Args: Table{"x-queue-type": "quorum"}})
	q.setMembers([]string{"a", "b", "c"})
	r := &locatingRemote{q: q}
	q.BecomeProxy(r)
	finished := make(chan struct{})
	go func() {
		_, _ = v.Publish(&Message{RoutingKey: "qq", Body: []byte("x")}, PublishOpts{})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("publish to a proxy deadlocked reading the queue's members")
	}
}
