package stomp

import (
	"math"
	"time"
)

// openLimited takes a slot under the broker's connection limits for user
// on vhost; when a limit is reached CONNECT fails with an ERROR frame.
func (c *conn) openLimited(user, vhost string) error {
	release, err := c.s.b.Limiter().OpenConnection(user, vhost)
	if err != nil {
		return errorf("Bad CONNECT", "%s", err.Error())
	}
	c.releaseConn = release
	return nil
}

// admitPublish runs before a SEND is published: while a resource alarm
// (memory, disk) is raised, or the publisher is over its rate limit, it
// waits, so the reader stops reading the socket and TCP flow control
// stalls the publisher, as RabbitMQ does. Deliveries continue meanwhile
// and the SEND just read is published once the wait ends, never dropped.
//
// The heart-beat monitor is paused while the reader waits: the client's
// heart-beats are not read on purpose.
func (c *conn) admitPublish() error {
	alarms := c.s.b.Alarms()
	if alarms.Raised() {
		if blocked, cleared, reason := alarms.Blocked(); blocked {
			c.batch.Flush() // deliveries already made go out while this waits
			c.log.Info("publishing blocked by a resource alarm", "reason", reason)
			c.lastRead.Store(math.MaxInt64) // pause the heart-beat monitor
			select {
			case <-cleared:
			case <-c.stop:
				return errDisconnect
			}
			c.lastRead.Store(time.Now().UnixNano())
		}
	}
	if c.s.b.Limiter().RateLimited() {
		c.batch.Flush()
	}
	ok := c.s.b.Limiter().WaitPublish(c.user.Name(), c.vh.Name(), c.stop)
	c.lastRead.Store(time.Now().UnixNano())
	if !ok {
		return errDisconnect
	}
	return nil
}
