package stomp

import (
	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// checkTopic enforces the user's topic permission for key on the exchange
// named ex when it is a topic exchange, as RabbitMQ does: write on SEND to
// /topic/key or /exchange/name/key, read on SUBSCRIBE to /topic/pattern or
// /exchange/name/pattern. A user without topic permissions in the vhost
// costs one map lookup; decisions are cached per connection.
func (c *conn) checkTopic(perm auth.Perm, ex, key string) error {
	us, vh := c.s.users, c.vh
	if !us.HasTopicPermissions(c.user, vh.Name()) {
		return nil
	}
	if x, ok := vh.Exchange(ex); !ok || x.Kind() != exchange.KindTopic {
		return nil
	}
	return c.topics.Check(us, c.user, vh.Name(), perm, ex, key)
}
