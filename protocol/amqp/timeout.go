package amqp

import (
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/protocol/frontend"
)

// Consumer timeout, as RabbitMQ's consumer_timeout: a delivery that stays
// unacknowledged longer than its queue's x-consumer-timeout (or policy
// consumer-timeout, or the server's ConsumerTimeout) closes its channel
// with 406 PRECONDITION_FAILED, and every unacknowledged delivery of the
// channel goes back to its queue.
//
// A connection's watchdog (frontend.Watchdog) starts with its first
// delivery that needs an acknowledgement and wakes every tick: it advances
// the connection's clock (conn.wd.Now, which stamps deliveries without a
// clock read each) and looks at every channel's unacknowledged deliveries.
// A channel is closed between its timeout and its timeout plus two ticks
// after the delivery, never before.
//
// The watchdog never runs the reader's channel state machine: it takes the
// deliveries back under the channel's delivery lock (marking it timedOut,
// which makes later acks of them no-ops), requeues them, sends
// channel.close, and sets expired, on which the reader treats the channel
// as closing at its next frame (channel.method).

// watchTimeouts starts the connection's watchdog once.
func (c *conn) watchTimeouts() {
	c.wd.Start(c.done, nil, c)
}

// CheckTimeouts is the watchdog's look at every channel, each tick
// (frontend.Checker).
func (c *conn) CheckTimeouts(now int64) bool {
	c.chmu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.chmu.Unlock()
	for _, ch := range chs {
		ch.checkTimeout(now)
	}
	return true
}

// checkTimeout closes ch if one of its deliveries timed out.
func (ch *channel) checkTimeout(now int64) {
	c := ch.c
	ch.dmu.Lock()
	if ch.timedOut {
		ch.dmu.Unlock()
		return
	}
	var limit time.Duration
	for i := ch.uhead; i < len(ch.unacked); i++ {
		r := &ch.unacked[i]
		if r.q == nil {
			continue
		}
		if to := frontend.ConsumerTimeout(r.q, c.s.cfg.ConsumerTimeout); c.wd.Expired(now, r.at, to) {
			limit = to
			break
		}
	}
	if limit == 0 {
		ch.dmu.Unlock()
		return
	}
	ch.timedOut = true
	refs := append([]unackedRef(nil), ch.unacked[ch.uhead:]...)
	ch.unacked, ch.uhead = nil, 0
	ch.expired.Store(true)
	ch.dmu.Unlock()

	c.log.Warn("consumer timeout: closing channel", "channel", ch.id, "timeout", limit)
	abandonRefs(refs)
	we := wire.NewChannelError(wire.PreconditionFailed, "delivery acknowledgement on channel %d timed out. "+
		"Timeout value used: %d ms. This timeout value can be configured, see consumers doc guide to learn more",
		ch.id, limit.Milliseconds())
	c.send(ch.id, &wire.ChannelClose{ReplyCode: we.Code, ReplyText: we.Text})
}

// abandonRefs returns the deliveries of a channel that went away to their
// queues, grouped by queue (Queue.Abandon: requeued, or retried after a
// delay when the queue has x-retry-delays); it uses no reader state.
func abandonRefs(refs []unackedRef) {
	byQueue := map[*exchange.Queue][]uint64{}
	var order []*exchange.Queue
	for _, r := range refs {
		if r.q == nil {
			continue
		}
		if _, ok := byQueue[r.q]; !ok {
			order = append(order, r.q)
		}
		byQueue[r.q] = append(byQueue[r.q], r.seq)
	}
	for _, q := range order {
		q.Abandon(byQueue[q])
	}
}
