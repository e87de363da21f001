package exchange

import "sync/atomic"

// Churn counts connections, channels and queues opened and closed on this
// node since it started (RabbitMQ's churn metrics): atomics, no lock,
// bumped once per open or close.
type Churn struct {
	connOpened, connClosed [numProtocols]atomic.Uint64
	chOpened, chClosed     atomic.Uint64
	// queues declared (queue.declare that is not passive, by any path),
	// created (installed in a vhost, not by recovery) and deleted.
	qDeclared, qCreated, qDeleted atomic.Uint64
}

// Churn returns the broker's churn counters.
func (b *Broker) Churn() *Churn { return &b.churn }

// ConnectionOpened counts a connection of protocol p that has
// authenticated and opened its vhost; ConnectionClosed its end.
func (c *Churn) ConnectionOpened(p Protocol) { c.connOpened[p.index()].Add(1) }

// ConnectionClosed counts the end of a connection ConnectionOpened counted.
func (c *Churn) ConnectionClosed(p Protocol) { c.connClosed[p.index()].Add(1) }

// Channel counts an AMQP channel opened (open) or closed.
func (c *Churn) Channel(open bool) {
	if open {
		c.chOpened.Add(1)
	} else {
		c.chClosed.Add(1)
	}
}

// ChurnStats are the churn counters at one moment.
type ChurnStats struct {
	// ConnectionsOpened and ConnectionsClosed are by protocol.
	ConnectionsOpened, ConnectionsClosed map[Protocol]uint64
	ChannelsOpened, ChannelsClosed       uint64
	QueuesDeclared, QueuesCreated        uint64
	QueuesDeleted                        uint64
}

// Stats reads the counters.
func (c *Churn) Stats() ChurnStats {
	s := ChurnStats{ConnectionsOpened: map[Protocol]uint64{}, ConnectionsClosed: map[Protocol]uint64{},
		ChannelsOpened: c.chOpened.Load(), ChannelsClosed: c.chClosed.Load(),
		QueuesDeclared: c.qDeclared.Load(), QueuesCreated: c.qCreated.Load(), QueuesDeleted: c.qDeleted.Load()}
	for p := range c.connOpened {
		s.ConnectionsOpened[Protocol(p)] = c.connOpened[p].Load()
		s.ConnectionsClosed[Protocol(p)] = c.connClosed[p].Load()
	}
	return s
}
