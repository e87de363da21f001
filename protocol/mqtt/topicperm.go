package mqtt

import (
	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// checkTopic enforces the user's topic permission on the MQTT exchange
// when it is a topic exchange, as RabbitMQ does: write for a PUBLISH's
// topic, read for a SUBSCRIBE's filter, both matched in their AMQP form
// ("/" → ".", "+" → "*") with {client_id} bound to the client identifier.
// A user without topic permissions in the vhost costs one map lookup.
func (c *conn) checkTopic(perm auth.Perm, topic string, isFilter bool) error {
	us, vh := c.s.users, c.vh
	if !us.HasTopicPermissions(c.user, vh.Name()) {
		return nil
	}
	ex := c.s.cfg.Exchange
	if x, ok := vh.Exchange(ex); !ok || x.Kind() != exchange.KindTopic {
		return nil
	}
	key := wire.TopicToKey(topic)
	if isFilter {
		key = wire.FilterToKey(topic)
	}
	c.topics.ClientID = c.clientID
	return c.topics.Check(us, c.user, vh.Name(), perm, ex, key)
}
