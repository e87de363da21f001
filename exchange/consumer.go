package exchange

import (
	"sort"
)

import (
	"sync"
	"sync/atomic"

	"github.com/trident-broker/trident/exchange/event"
)

// Sink is a consumer's way out to its front end. Both methods are called with
// the queue's lock held: they must not block and must not call back into the
// core synchronously.
type Sink interface {
	// Deliver hands a message to the consumer; the front end always takes
	// it. Returning false asks the queue to stop dispatching to this
	// consumer until Consumer.Resume is called (transport back-pressure).
	Deliver(d Delivery) bool
	// Cancelled tells the front end that the core has cancelled the
	// consumer (its queue was deleted). It is not called for Consumer.Cancel.
	Cancelled(c *Consumer)
}

// Delivery is one message handed to a consumer or returned by Get.
type Delivery struct {
	Queue       *Queue
	Consumer    *Consumer // nil for Get
	Msg         *Message
	Seq         uint64 // the queue's handle for Ack and Reject
	Redelivered bool
	// Remaining is the number of ready messages left (for basic.get-ok).
	Remaining int
	// Batch, if set, is the publisher's whose Publish is delivering this
	// message right now (PublishOpts.Batch; see Batch).
	Batch *Batch
}

// Limit is a channel-wide prefetch limit shared by the consumers of one
// channel across queues (AMQP basic.qos with global=true). Its zero value
// is unlimited. It is safe for concurrent use.
type Limit struct {
	max  atomic.Int32
	used atomic.Int32

	mu        sync.Mutex
	consumers []*Consumer
}

// SetMax changes the limit (0 is unlimited) and wakes consumers that may
// now receive more.
func (l *Limit) SetMax(n int) {
	old := l.max.Swap(int32(n))
	if n == 0 || int32(n) > old {
		l.kick()
	}
}

func (l *Limit) tryAcquire() bool {
	for {
		u, m := l.used.Load(), l.max.Load()
		if m > 0 && u >= m {
			return false
		}
		if l.used.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// release returns n credits and reports whether the limit was full before.
func (l *Limit) release(n int32) bool {
	u := l.used.Add(-n)
	m := l.max.Load()
	return m > 0 && u+n >= m && u < m
}

func (l *Limit) attach(c *Consumer) {
	l.mu.Lock()
	l.consumers = append(l.consumers, c)
	l.mu.Unlock()
}

func (l *Limit) detach(c *Consumer) {
	l.mu.Lock()
	for i, e := range l.consumers {
		if e == c {
			l.consumers = append(l.consumers[:i], l.consumers[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
}

// kick asks every queue with a consumer under this limit to dispatch.
func (l *Limit) kick() {
	l.mu.Lock()
	cs := append([]*Consumer(nil), l.consumers...)
	l.mu.Unlock()
	seen := make(map[*Queue]bool, len(cs))
	for _, c := range cs {
		if !seen[c.q] {
			seen[c.q] = true
			c.q.Kick()
		}
	}
}

// ConsumeOpts describe a new consumer.
type ConsumeOpts struct {
	Tag       string
	NoAck     bool
	Exclusive bool
	Priority  int // x-priority
	Prefetch  int // per-consumer limit of unacked messages, 0 = unlimited
	Limit     *Limit
	Sink      Sink
	Owner     any // the connection, for exclusive queues
	// Args are the consumer's arguments (AMQP basic.consume's, STOMP's
	// subscription headers): a stream reads x-stream-offset and
	// x-stream-consumer-name from them.
	Args Table
	// DropTransientAbove, when > 0, makes the queue an at-most-once
	// buffer for transient messages while every consumer it has asks
	// for it: a transient message arriving while the queue holds that
	// many ready messages is dropped (counted in MsgStats.DropBehind)
	// instead of queued. MQTT's QoS 0 deliveries to a clean session use
	// it, as Mosquitto (max_queued_messages) and RabbitMQ
	// (mqtt.mailbox_soft_limit) drop QoS 0 messages to a slow
	// subscriber. Persistent messages are never dropped by it.
	DropTransientAbove int
	// Protocol is the consumer's, the label of its enqueue-to-deliver
	// and deliver-to-ack latencies (latency.go).
	Protocol Protocol
	// SingleActive puts a stream's consumer into the single-active group
	// GroupName of the stream (streamsac.go); the group's stored offset
	// is the named offset GroupName, which this consumer's acks do not
	// move (the stream protocol stores offsets itself). AMQP and STOMP
	// consumers ask with the arguments x-single-active-consumer true and
	// x-stream-consumer-name instead, and their acks store the offset.
	SingleActive bool
	GroupName    string
	// PartitionIndex is the stream's index among its super stream's
	// partitions (-1: not a partition; 0 behaves the same): the group's
	// active member on it is member PartitionIndex mod n in subscription
	// order.
	PartitionIndex int
	// NoOffsetHeader: a stream's deliveries to this consumer carry no
	// x-stream-offset header; the consumer reads each one's offset with
	// StreamOffset. The stream protocol asks for it (its chunks say where
	// each message is): the header was a table made and copied per
	// message for nothing.
	NoOffsetHeader bool
	// StoredRuns (implies NoOffsetHeader; the Sink must be a RunSink): a
	// stream hands what it reads from this node's log to the sink as runs
	// of stored records (RunSink.DeliverRun, streamrun.go), neither
	// decoded nor checked, each settled at once (Queue.SettleRun); the
	// deliveries of a clustered stream read from another member come as
	// Messages to Deliver still.
	StoredRuns bool
}

// Consumer is a subscription to a queue.
type Consumer struct {
	q        *Queue
	tag      string
	prefetch int
	limit    *Limit
	sink     Sink
	// copier is sink if it is a CopyingSink (reuse.go), else nil.
	copier CopyingSink
	// unacked is guarded by q.mu.
	unacked int
	// priority is ConsumeOpts.Priority and dropAbove
	// ConsumeOpts.DropTransientAbove, each held to an int32 (clampInt32):
	// with the flags below in one word, a Consumer is 96 bytes, not 112
	// (one every MQTT device).
	priority  int32
	dropAbove int32
	// settler: sink is a SettlingSink (reuse.go) and this consumer acks.
	settler bool
	// proto is ConsumeOpts.Protocol.
	proto Protocol
	noAck bool
	excl  bool
	// noOffsetHeader is ConsumeOpts.NoOffsetHeader.
	noOffsetHeader bool
	// Guarded by q.mu.
	blocked   bool // the sink asked for a pause
	cancelled bool
}

// clampInt32 is n held to the int32 range.
func clampInt32(n int) int32 { return int32(min(max(n, -1<<31), 1<<31-1)) }

// Tag is the consumer tag.
func (c *Consumer) Tag() string { return c.tag }

// Queue is the queue consumed from.
func (c *Consumer) Queue() *Queue { return c.q }

// NoAck reports whether deliveries need no acknowledgement.
func (c *Consumer) NoAck() bool { return c.noAck }

// Resume lifts a pause requested by Sink.Deliver returning false.
func (c *Consumer) Resume() {
	q := c.q
	if q.st != nil {
		q.st.resume(c)
		return
	}
	q.mu.Lock()
	c.blocked = false
	q.dispatchLocked(nowNano())
	q.unlock()
}

// Cancel removes the consumer. Its unacknowledged deliveries stay
// unacknowledged until acked, rejected or requeued by the front end.
func (c *Consumer) Cancel() {
	c.q.reportConsumer(event.ConsumerDeleted, c) // before an auto-delete queue's queue.deleted
	c.q.removeConsumer(c)
}

func (c *Consumer) canTake() bool {
	if c.blocked || c.cancelled {
		return false
	}
	if !c.noAck && c.prefetch > 0 && c.unacked >= c.prefetch {
		return false
	}
	if !c.noAck && c.limit != nil && !c.limit.tryAcquire() {
		return false
	}
	return true
}

func (q *Queue) addConsumer(o ConsumeOpts) (*Consumer, error) {
	if q.st != nil {
		return q.st.addConsumer(o)
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return nil, errorf(KindNotFound, "no queue '%s' in vhost '%s'", q.name, q.vh.name)
	}
	for _, c := range q.consumers {
		if c.excl {
			q.mu.Unlock()
			return nil, errorf(KindAccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.name, q.vh.name)
		}
	}
	if o.Exclusive && len(q.consumers) > 0 {
		q.mu.Unlock()
		return nil, errorf(KindAccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.name, q.vh.name)
	}
	c := &Consumer{q: q, tag: o.Tag, noAck: o.NoAck, excl: o.Exclusive, priority: clampInt32(o.Priority),
		prefetch: o.Prefetch, limit: o.Limit, sink: o.Sink, dropAbove: clampInt32(o.DropTransientAbove), proto: o.Protocol}
	c.copier, _ = o.Sink.(CopyingSink)
	_, c.settler = o.Sink.(SettlingSink)
	c.settler = c.settler && !c.noAck
	// Keep consumers sorted by priority, highest first, stable.
	i := sort.Search(len(q.consumers), func(i int) bool { return q.consumers[i].priority < c.priority })
	q.consumers = append(q.consumers, nil)
	copy(q.consumers[i+1:], q.consumers[i:])
	q.consumers[i] = c
	q.syncDropLocked()
	q.hadCons = true
	q.lastUsed = nowNano()
	if c.limit != nil {
		c.limit.attach(c)
	}
	q.consumeRemoteLocked()
	q.dispatchLocked(nowNano())
	q.unlock()
	return c, nil
}

func (q *Queue) removeConsumer(c *Consumer) {
	if q.st != nil {
		q.st.removeConsumer(c)
		return
	}
	q.mu.Lock()
	if c.cancelled {
		q.mu.Unlock()
		return
	}
	c.cancelled = true
	for i, e := range q.consumers {
		if e == c {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			break
		}
	}
	q.syncDropLocked()
	if c.limit != nil {
		c.limit.detach(c)
	}
	q.consumeRemoteLocked()
	q.lastUsed = nowNano()
	if len(q.consumers) == 0 && q.autoDelete && q.hadCons && !q.deleted {
		q.autoDeleted = true
	} else if q.a.sac {
		// A new single active consumer takes over.
		q.dispatchLocked(nowNano())
	}
	q.unlock()
}

// syncDropLocked sets dropAbove from the consumers: the largest limit
// asked for, and none unless every consumer asked for one (a queue
// without consumers keeps what it gets).
func (q *Queue) syncDropLocked() {
	n := 0
	for _, c := range q.consumers {
		if c.dropAbove <= 0 {
			n = 0
			break
		}
		n = max(n, int(c.dropAbove))
	}
	q.dropAbove = int32(min(n, 1<<31-1))
}
