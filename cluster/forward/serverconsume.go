package forward

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/trident-broker/trident/cluster/forward/frame"
	"github.com/trident-broker/trident/exchange"
)

// scons is a peer's consumer on the server: the core consumer, its
// window (a Limit that Qos resizes, or a stream consumer's own
// prefetch), and its deliveries not yet settled by delivery id.
//
// Lock order: the queue's lock (Deliver, Cancelled run under it) →
// scons.mu → sconn.mu, sconn.pmu → the writer's. No core call is made
// with scons.mu or sconn.mu held.
type scons struct {
	c     *sconn
	id    uint64
	limit *exchange.Limit

	mu      sync.Mutex
	cons    *exchange.Consumer
	q       *exchange.Queue
	next    uint64
	unacked map[uint64]uint64 // delivery id → the queue's delivery seq
	ended   bool
}

var consumerTags atomic.Uint64

// consume starts a peer's consumer (the consumers' goroutine). Its
// failure is told as Cancelled, Refused.
func (c *sconn) consume(f *frame.Consume) {
	fail := func(why string) {
		_, _ = c.w.send(&frame.Cancelled{Consumer: f.Consumer, Refused: true, Reason: why}, false)
	}
	vh, err := c.vhost(f.VHost)
	if err != nil {
		fail(err.Error())
		return
	}
	sc := &scons{c: c, id: f.Consumer, unacked: map[uint64]uint64{}}
	o := exchange.ConsumeOpts{Tag: "amq.ctag-forward-" + strconv.FormatUint(consumerTags.Add(1), 10),
		Sink: sc, Owner: c}
	if f.Args != nil {
		o.Args = exchange.Table(inTable(f.Args))
	}
	if f.PerConsumer {
		o.Prefetch = int(f.Prefetch)
	} else {
		sc.limit = &exchange.Limit{}
		sc.limit.SetMax(int(f.Prefetch))
		o.Limit = sc.limit
	}
	c.mu.Lock()
	if _, dup := c.consumers[f.Consumer]; dup || c.closed {
		c.mu.Unlock()
		fail("consumer id in use")
		return
	}
	c.consumers[f.Consumer] = sc
	c.mu.Unlock()
	cons, err := vh.Consume(f.Queue, o)
	if err != nil {
		c.mu.Lock()
		delete(c.consumers, f.Consumer)
		c.mu.Unlock()
		fail(err.Error())
		return
	}
	sc.mu.Lock()
	sc.cons = cons
	ended := sc.ended // cancelled by the core meanwhile
	sc.mu.Unlock()
	if ended {
		cons.Cancel()
	}
}

// cancel stops consumer id and requeues what it had not settled.
func (c *sconn) cancel(id uint64) {
	c.mu.Lock()
	sc := c.consumers[id]
	delete(c.consumers, id)
	c.mu.Unlock()
	if sc == nil {
		return
	}
	sc.mu.Lock()
	sc.ended = true
	cons := sc.cons
	sc.mu.Unlock()
	if cons != nil {
		cons.Cancel()
	}
	// No Deliver after Cancel: what is unacked now is all there is.
	sc.mu.Lock()
	q := sc.q
	seqs := make([]uint64, 0, len(sc.unacked))
	for _, s := range sc.unacked {
		seqs = append(seqs, s)
	}
	clear(sc.unacked)
	sc.mu.Unlock()
	if q != nil && len(seqs) > 0 {
		q.Reject(seqs, true)
	}
}

// take removes the deliveries ids names from the unsettled, returning
// their queue and seqs (appended to seqs).
func (sc *scons) take(ids []uint64, seqs []uint64) (*exchange.Queue, []uint64) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, id := range ids {
		if s, ok := sc.unacked[id]; ok {
			delete(sc.unacked, id)
			seqs = append(seqs, s)
		}
	}
	return sc.q, seqs
}

// Deliver implements exchange.Sink (under the queue's lock): the delivery
// is queued on the writer, never waited for; above writerMax queued bytes
// the consumer pauses until the writer drains (resume).
func (sc *scons) Deliver(d exchange.Delivery) bool {
	sc.mu.Lock()
	sc.q = d.Queue
	sc.next++
	id := sc.next
	sc.unacked[id] = d.Seq
	if sc.ended {
		// Being cancelled: cancel requeues it.
		sc.mu.Unlock()
		return false
	}
	sc.mu.Unlock()
	over, err := sc.c.w.send(&frame.Deliver{Consumer: sc.id, Delivery: id, Redelivered: d.Redelivered, Msg: toFrame(d.Msg)}, false)
	if err != nil {
		return false // the connection is ending: cleanup requeues it
	}
	if over && d.Consumer != nil {
		sc.c.pmu.Lock()
		sc.c.paused = append(sc.c.paused, d.Consumer)
		sc.c.pmu.Unlock()
		sc.c.w.kick() // resume runs after the next write
		return false
	}
	return true
}

// Cancelled implements exchange.Sink: the core ended the consumer (its
// queue was deleted); the peer is told.
func (sc *scons) Cancelled(*exchange.Consumer) {
	sc.mu.Lock()
	sc.ended = true
	sc.mu.Unlock()
	c := sc.c
	c.mu.Lock()
	if c.consumers[sc.id] == sc {
		delete(c.consumers, sc.id)
	}
	c.mu.Unlock()
	_, _ = c.w.send(&frame.Cancelled{Consumer: sc.id, Reason: "queue deleted"}, false)
}
