package mqtt

import (
	"errors"
	"strconv"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// errAborted ends a reader that was waiting to publish when the connection
// was closed from the server side.
var errAborted = errors.New("mqtt: connection closed while publishing was blocked")

// openLimited takes a slot under the broker's connection limits for u on
// vh, refusing the CONNECT (MQTT 5: 0x97 quota exceeded; 3.1.1: server
// unavailable) when a limit is reached; on success the connection is
// u's on vh (c.user, c.vh), which closeLimited gives the slot back for.
func (c *conn) openLimited(u *auth.User, vh *exchange.VHost) error {
	if err := c.s.b.Limiter().AdmitConnection(u.Name(), vh.Name()); err != nil {
		c.refuse(codeQuotaExceeded)
		return errProto(codeQuotaExceeded, err.Error())
	}
	c.user, c.vh, c.slotHeld = u, vh, true
	return nil
}

// closeLimited gives back the slot openLimited took, once (cleanup).
func (c *conn) closeLimited() {
	if c.slotHeld {
		c.slotHeld = false
		c.s.b.Limiter().ReleaseConnection(c.user.Name(), c.vh.Name())
	}
}

// admitPublish runs before an inbound PUBLISH is handled: it refuses a
// payload over max_message_size, and while a resource alarm (memory,
// disk) is raised or the publisher is over its rate limit it waits, so the
// reader stops reading the socket and TCP flow control stalls the
// publisher, as RabbitMQ does. Deliveries to the connection continue
// meanwhile. Nothing is dropped: the PUBLISH just read is handled once the
// wait ends.
func (c *conn) admitPublish(pk *packets.Packet) error {
	if m := c.s.cfg.MaxMessageSize; m > 0 && len(pk.Payload) > m {
		return errProto(codePacketTooLarge, "message size "+strconv.Itoa(len(pk.Payload))+
			" is larger than the maximum allowed size "+strconv.Itoa(m))
	}
	alarms := c.s.b.Alarms()
	if alarms.Raised() {
		if blocked, cleared, reason := alarms.Blocked(); blocked {
			c.s.log.Info("publishing blocked by a resource alarm", "client_id", c.clientID, "reason", reason)
			select {
			case <-cleared:
			case <-c.abort.C():
				return errAborted
			}
		}
	}
	// Its channel is made only where a rate limit may make it wait.
	if lim := c.s.b.Limiter(); lim.RateLimited() && !lim.WaitPublish(c.user.Name(), c.vh.Name(), c.abort.C()) {
		return errAborted
	}
	return nil
}
