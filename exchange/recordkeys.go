package exchange

import (
	"strings"
)

// replicatedPrefixes are the core's metadata records shared by a cluster:
// the durable topology, and in a cluster the transient one too (t*: a
// non-durable or exclusive object lives on the node that declared it, its
// "node", and the others route to it; those records are dropped when that
// node restarts or dies, see SetCluster and ForgetNode).
var replicatedPrefixes = []string{"vhost/", "exchange/", "queue/", "binding/", "texchange/", "tqueue/", "tbinding/", "policy/", opPolicyPrefix, "streamoff/"}

// exchangeKey is the record key of x: durable ones always, non-durable
// ones in a cluster; "" for none.
func (v *VHost) exchangeKey(x *Exchange) string {
	switch {
	case x.durable:
		return v.key("exchange", x.name)
	case v.b.cluster != nil:
		return v.key("texchange", x.name)
	}
	return ""
}

// queueKey is the record key of q, as exchangeKey. Reply-to pseudo queues
// have none.
func (v *VHost) queueKey(q *Queue) string {
	switch {
	case q.persisted():
		return v.key("queue", q.name)
	case v.b.cluster != nil && v.replyTo[q.name] != q:
		return v.key("tqueue", q.name)
	}
	return ""
}

// durable reports whether a binding survives restarts: a durable source
// and a durable destination.
func (b *binding) durable() bool {
	return b.src.durable && ((b.q != nil && b.q.persisted()) || (b.x != nil && b.x.durable))
}

// recordKeyOf is a binding's record key, as exchangeKey.
func (v *VHost) recordKeyOf(b *binding) string {
	switch {
	case b.durable():
		return v.bindingKey(b)
	case v.b.cluster != nil:
		return "t" + v.bindingKey(b)
	}
	return ""
}

// ReplicatedKey reports whether a core metadata key is cluster-wide (the
// rest, such as the clean-shutdown marker, is the node's own).
func ReplicatedKey(key string) bool {
	for _, p := range replicatedPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
