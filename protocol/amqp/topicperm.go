package amqp

import (
	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// checkTopic enforces the user's topic permission for key on the exchange
// named ex when it is a topic exchange, as RabbitMQ does: write on
// basic.publish, read on queue.bind/unbind and exchange.bind/unbind (the
// source's binding key). A user without topic permissions in the vhost
// costs one map lookup; otherwise decisions are cached per channel, so a
// publish does not run a regexp per message.
func (ch *channel) checkTopic(perm auth.Perm, ex, key string) error {
	us, vh := ch.c.s.users, ch.c.vh
	if !us.HasTopicPermissions(ch.c.user, vh.Name()) {
		return nil
	}
	x, ok := vh.Exchange(ex)
	if !ok || x.Kind() != exchange.KindTopic {
		return nil
	}
	return ch.topics.Check(us, ch.c.user, vh.Name(), perm, ex, key)
}
