package amqp

import (
	"bufio"
	"bytes"
	"io"
	"time"

	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// openLimited takes a slot under the broker's connection limits for user
// on vhost; when a limit is reached connection.open fails with 530
// NOT_ALLOWED, as RabbitMQ's vhost and user connection limits do.
func (c *conn) openLimited(user, vhost string) error {
	release, err := c.s.b.Limiter().OpenConnection(user, vhost)
	if err != nil {
		return wire.NewConnectionError(wire.NotAllowed, "%s", err.Error())
	}
	c.releaseConn = release
	return nil
}

// waitRate holds the reader until the publisher is within its publish
// rate limits (per user, per vhost), so that a fast publisher is slowed
// by TCP flow control and nothing is dropped. The heartbeat monitor does
// not count the wait as silence.
func (c *conn) waitRate() {
	c.blocked.Store(true)
	c.s.b.Limiter().WaitPublish(c.user.Name(), c.vh.Name(), c.abort)
	c.lastRead.Store(time.Now().UnixNano())
	c.blocked.Store(false)
}

// Read buffer sizes: small until the handshake is done, so that half-open
// and unauthenticated connections stay cheap.
const (
	handshakeBufSize = 4 << 10
	readBufSize      = 64 << 10
)

// growReader replaces the handshake's small read buffer by the full-size
// one, keeping the bytes the client already pipelined.
func (c *conn) growReader() {
	var src io.Reader = readTracker{c}
	if n := c.r.Buffered(); n > 0 {
		b, _ := c.r.Peek(n)
		src = io.MultiReader(bytes.NewReader(bytes.Clone(b)), src)
	}
	c.r = bufio.NewReaderSize(src, readBufSize)
}

// waitUnblocked is called by the reader before a publish: while a resource
// alarm is raised it tells the client (connection.blocked, if it has the
// capability) and stops reading until the alarm clears, as RabbitMQ does.
// Consumers on the connection keep receiving meanwhile.
func (c *conn) waitUnblocked() {
	if c.s.b.Limiter().RateLimited() {
		c.batch.Flush() // deliveries already made go out while this waits
		c.waitRate()
	}
	c.waitAlarm()
}

// waitAlarm blocks the reader while a resource alarm is raised (see
// waitUnblocked); it costs one atomic load when none is.
func (c *conn) waitAlarm() {
	alarms := c.s.b.Alarms()
	if !alarms.Raised() {
		return
	}
	blocked, cleared, reason := alarms.Blocked()
	if !blocked {
		return
	}
	c.batch.Flush()
	c.log.Info("publishing blocked by a resource alarm", "reason", reason)
	c.blocked.Store(true)
	if c.capBlocked {
		c.send(0, &wire.ConnectionBlocked{Reason: reason})
	}
	select {
	case <-cleared:
	case <-c.abort:
	}
	c.lastRead.Store(time.Now().UnixNano())
	c.blocked.Store(false)
	if c.capBlocked {
		c.send(0, &wire.ConnectionUnblocked{})
	}
}
