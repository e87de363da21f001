package placement

import (
	"hash/fnv"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/cluster/meta"
)

// Owner chooses the one node that runs a cluster-wide singleton named by
// key (a shovel): the alive member with Raft up that ranks highest for key
// by rendezvous hashing, so that singletons spread over the nodes and a
// node's going moves only its own. It returns "" when no member qualifies.
// Every node computes the same owner from the same membership.
//
// With mixed, the score is FNV-1a of name, 0, key through a 64-bit
// finalizer (the SplitMix64 mix); without, FNV-1a alone, as v0.1.0 (the
// feature flag shovel_owner_mixed chooses: every node must score alike).
// FNV-1a alone spreads badly when names differ in one byte (for
// "trident@node1..3" and 3,000 keys it gave 1310/1100/590; for "a", "b",
// "c" 110/1230/1660); mixed it gives a third each.
func Owner(members []discovery.Member, key string, mixed bool) string {
	var best string
	var bestH uint64
	for _, m := range members {
		if m.Status != discovery.StatusAlive || m.Meta[meta.RaftMetaKey] == "" {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(m.Name))
		h.Write([]byte{0})
		h.Write([]byte(key))
		s := h.Sum64()
		if mixed {
			s = mix64(s)
		}
		if best == "" || s > bestH || (s == bestH && m.Name < best) {
			best, bestH = m.Name, s
		}
	}
	return best
}

// mix64 is SplitMix64's finalizer: every input bit affects every output bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// OwnerFunc is the shovel manager's owner function (shovel.Manager.
// SetOwner) for node self: the owner of key is Owner's choice among
// members(), scored mixed when mixed() (the feature flag
// shovel_owner_mixed). While members is nil, or returns none (the cluster
// is not up yet), no node is named and self runs nothing.
func OwnerFunc(self string, members func() []discovery.Member, mixed func() bool) func(key string) (self bool, node string) {
	return func(key string) (bool, string) {
		if members == nil {
			return false, ""
		}
		ms := members()
		if ms == nil {
			return false, ""
		}
		best := Owner(ms, key, mixed != nil && mixed())
		return best != "" && best == self, best
	}
}
