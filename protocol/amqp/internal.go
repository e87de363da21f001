package amqp

import (
	"math"
	"net"

	"github.com/trident-broker/trident/exchange"

	"github.com/trident-broker/trident/auth"
)

// Cluster-internal connections (issue 7): a node reaches the queues whose
// messages live on another node over AMQP itself (see cluster/forward).
// The listener is only reachable by cluster peers, so the transport is the
// authentication: whatever login the client sends is accepted, and the
// connection acts as InternalUser with every permission on every vhost.
// It is not counted against connection limits nor publish rate limits,
// and has no channel limit, no topic permission checks and no user_id
// property check (the origin node checked all of these already).
//
// Publishes to the default exchange go to exactly the queue named by the
// routing key with their headers untouched: the core's default exchange
// does not route by CC/BCC headers, so nothing is re-routed.
//
// Resource alarms still block publishers on these connections: that is
// the owning node's back-pressure, which the forwarder passes on.

// InternalUser is the user name that cluster-internal connections show.
const InternalUser = "cluster-internal"

// internalUser stands for InternalUser where an *auth.User is needed; the
// permission checks never look at it on an internal connection.
var internalUser = &auth.User{}

// ServeInternal accepts cluster peers' connections on ln until Shutdown.
// waitMeta (may be nil) waits, briefly, until this node has applied the
// metadata log up to an index: a forwarded message that carries
// exchange.ForwardMetaIndexHeader is routed only after it returns.
func (s *Server) ServeInternal(ln net.Listener, waitMeta func(idx uint64)) error {
	s.waitMeta = waitMeta
	return s.serve(ln, true)
}

// userName is the connection's user name as logs and management show it.
func (c *conn) userName() string {
	if c.internal {
		return InternalUser
	}
	return c.user.Name()
}

// forwarded turns a message another node routed to a queue of this node
// back into the one it published: the queue is the routing key, the
// original exchange and routing key travel in two headers, the hops so
// far in a third when there were more than one, the sender's metadata
// index in a fourth (all removed here). It returns that index, 0 without.
func forwarded(msg *exchange.Message, o *exchange.PublishOpts) (metaIdx uint64) {
	msg.Hops = 1
	h := msg.Props.Headers
	if len(h) == 0 {
		return 0
	}
	if v, ok := h[exchange.ForwardHopsHeader]; ok {
		msg.Hops = hopsValue(v)
		delete(h, exchange.ForwardHopsHeader)
	}
	if v, ok := h[exchange.ForwardMetaIndexHeader].(int64); ok {
		if v > 0 {
			metaIdx = uint64(v)
		}
		delete(h, exchange.ForwardMetaIndexHeader)
	}
	if x, ok := h[exchange.ForwardExchangeHeader].(string); ok {
		rk, _ := h[exchange.ForwardRoutingKeyHeader].(string)
		delete(h, exchange.ForwardExchangeHeader)
		delete(h, exchange.ForwardRoutingKeyHeader)
		o.Queue = msg.RoutingKey
		msg.Exchange, msg.RoutingKey = x, rk
	}
	if len(h) == 0 {
		msg.Props.Headers = nil
	}
	return metaIdx
}

// hopsValue reads the hop count header, whichever integer type carried
// it; anything else counts as the most hops there can be (never forwarded
// again).
func hopsValue(v any) uint8 {
	var n int64
	switch x := v.(type) {
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	default:
		return math.MaxUint8
	}
	if n < 1 || n > math.MaxUint8 {
		return math.MaxUint8
	}
	return uint8(n)
}
