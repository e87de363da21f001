package stomp

import (
	"fmt"
	"slices"
	"time"

	"github.com/trident-broker/trident/protocol/frontend"
)

// Consumer timeout, as RabbitMQ's STOMP adapter has it from the AMQP
// channel under it: a delivery of a client or client-individual
// subscription that stays unacknowledged longer than its queue's
// x-consumer-timeout (or policy consumer-timeout, or Config.ConsumerTimeout)
// ends the connection with an ERROR frame, and every unacknowledged
// delivery goes back to its queue (the reader's cleanup abandons them).
//
// The watchdog (frontend.Watchdog) starts with the connection's first
// delivery that needs an acknowledgement and wakes every tick: it advances
// the connection's clock (c.wd.Now, which stamps deliveries without a
// clock read each) and looks at the oldest unacknowledged delivery of
// every subscription (a subscription's list is in delivery order). The
// connection closes between the timeout and the timeout plus two ticks,
// never before.

// watchLocked registers s with the watchdog, starting it once. c.dmu is held.
func (c *conn) watchLocked(s *subscription) {
	s.watched = true
	c.acked = append(c.acked, s)
	c.wd.Start(c.done, c.stop, c)
}

// unwatchLocked forgets s (cancelled). c.dmu is held.
func (c *conn) unwatchLocked(s *subscription) {
	if !s.watched {
		return
	}
	s.watched = false
	if i := slices.Index(c.acked, s); i >= 0 {
		c.acked = slices.Delete(c.acked, i, i+1)
	}
}

// CheckTimeouts ends the connection when a delivery timed out
// (frontend.Checker).
func (c *conn) CheckTimeouts(now int64) bool {
	limit, ok := c.timedOut(now)
	if !ok {
		return true
	}
	c.log.Warn("consumer timeout: closing connection", "timeout", limit)
	c.kill(&Error{Message: "PRECONDITION_FAILED",
		Detail: fmt.Sprintf("PRECONDITION_FAILED - delivery acknowledgement timed out. Timeout value used: %d ms. "+
			"This timeout value can be configured, see consumers doc guide to learn more", limit.Milliseconds())}, "")
	return false
}

// timedOut reports whether a subscription's oldest unacknowledged delivery
// is past its timeout, and that timeout.
func (c *conn) timedOut(now int64) (time.Duration, bool) {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	for _, s := range c.acked {
		if len(s.unacked) == 0 {
			continue
		}
		r := s.unacked[0]
		if to := frontend.ConsumerTimeout(r.q, c.s.cfg.ConsumerTimeout); c.wd.Expired(now, r.at, to) {
			return to, true
		}
	}
	return 0, false
}
