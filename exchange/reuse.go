package exchange

// Reusing a message: a front end that publishes many small messages may
// take them from a pool of its own and have each one back once nothing
// refers to it any more, so that a message costs no heap allocation in
// the steady state. The core counts the message's holders only where it
// can know all of them: a message the front end marked reusable (Reuse)
// that local classic queues hold in memory (stored or not: the store
// keeps a copy, but not paged out) and that CopyingSinks consume, with
// auto-ack or with a plain ack, or SettlingSinks with a plain ack.
// Every other path (paging out, a proxy, a stream, a delayed exchange,
// dead-lettering, retries, basic.get, browsing, a sink that keeps the
// message) leaves the hold it took in place, and the message is left to
// the garbage collector as any other. So a missed release costs an
// allocation, never a message.
//
// The holds: the front end's, from Reuse until it calls Release (which
// it may do only when Publish returned a PublishResult with Solo set,
// i.e. every queue the message reached took a hold; otherwise it must
// simply drop the message); and each queue's, taken at enqueue
// (entry.own) and let go when its copying consumer is done with the
// delivery. The last one to let go hands the message, cleared, to the
// Recycler.

// Recycler takes back a message nothing holds any more. Recycle gets the
// message cleared, with no Recycler set.
type Recycler interface {
	Recycle(m *Message)
}

// A CopyingSink is a Sink that can say, per delivery, whether it is done
// with the delivery's message when the call returns: it has encoded what
// it needs (into its connection's output buffer, say) and keeps no
// reference to the message, its body, its encodings or its properties'
// tables. The queue may then let go of a reusable message (Reuse) at
// once when it is delivered with auto-ack, or when it is acked.
type CopyingSink interface {
	Sink
	// DeliverCopy is Deliver (ok is its result); done reports that the
	// sink keeps nothing of d.Msg.
	DeliverCopy(d Delivery) (ok, done bool)
}

// A SettlingSink is a Sink that keeps a delivery's message, when it
// consumes with acks, only until it settles the delivery: it acks (or
// rejects) it only once it has written what it needs and keeps no
// reference to the message, its body, its encodings or its properties'
// tables. A queue lets go of a reusable message delivered to it when the
// delivery is acked (MQTT: a QoS 0 delivery is acked after the flush that
// wrote it). A consumer without acks gets no such release: its sink is
// taken to keep the message.
type SettlingSink interface {
	Sink
	// SettlesWhenDone marks the type; it is never called.
	SettlesWhenDone()
}

// Reuse marks m, which the caller is about to publish, as one r takes back
// once nothing holds it; the caller holds it until Release. Call it before
// Publish, on a message no one else has seen.
func (m *Message) Reuse(r Recycler) {
	m.rec = r
	m.holds.Store(1)
}

// Release lets go of the caller's hold on a reusable message, after a
// Publish whose result had Solo set and once the caller no longer touches
// m. The message goes back to its Recycler when the last hold goes.
func (m *Message) Release() {
	if m.holds.Add(-1) != 0 {
		return
	}
	r := m.rec
	m.clear()
	r.Recycle(m)
}

// maxHeld bounds the queues' holds on one message (Message.held).
const maxHeld = 255

// clear resets every field, for the message's next use.
func (m *Message) clear() {
	m.Exchange, m.RoutingKey = "", ""
	m.Props = Properties{}
	m.Body = nil
	m.Hops = 0
	m.ts, m.expiresAt = 0, 0
	if m.enc.head.Load() != nil {
		// No hold is left: nothing reads enc now, and most messages
		// never had one (a store is an XCHG: a full barrier per message).
		m.enc.head.Store(nil)
	}
	m.rec = nil
	m.held, m.prepaid = 0, 0
	m.writer = nil
}
