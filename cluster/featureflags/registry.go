package featureflags

import (
	"errors"
	"slices"
	"strings"
)

// Stability of a flag, as RabbitMQ's: a required flag is always enabled
// (what every node of a supported release reads); a stable one is
// enabled by the operator once every node supports it (and at once in a
// new cluster); an experimental one only by the operator.
type Stability string

// Stabilities.
const (
	Required     Stability = "required"
	Stable       Stability = "stable"
	Experimental Stability = "experimental"
)

// Flag is one feature flag.
type Flag struct {
	Name      string
	Desc      string
	Stability Stability
	// Release is the release that brought the flag (RabbitMQ's
	// provided_by names the plugin or app; ours the release).
	Release string
	// DependsOn lists flags that are enabled before this one.
	DependsOn []string
}

// Names of the flags this package's callers check.
const (
	// FeatureFlags gates the metadata group's typed command entries
	// (cluster/meta: entry version 2), the first of which is the command
	// that enables a flag. A v0.1.0 node refuses an entry of version 2
	// (it logs it and skips it, which would leave it with another
	// topology), so no such entry may be written while one runs. Every
	// other non-required flag depends on it.
	FeatureFlags = "feature_flags"
	// ShovelOwnerMixed: the shovels' owner by placement.Owner's mixed
	// score. Not a format, a choice every node must make alike: a node of
	// v0.1.0 computing the old score beside one computing the new would
	// run a shovel twice, or not at all.
	ShovelOwnerMixed = "shovel_owner_mixed"
	// HashExchanges: the x-consistent-hash and x-modulus-hash exchange
	// types. A node without them cannot apply such an exchange's record
	// (it would refuse to start with it in its store), so none is
	// declared in a cluster until every member has them.
	HashExchanges = "hash_exchanges"
	// StreamWriters: stream records of version 2 (a named producer's
	// reference and publishing id, a filter value) and the header that
	// carries them from a follower to the leader. A node of v0.1.0 skips
	// such a record as corrupt, and would store the header where
	// consumers see it, so no named producer publishes to a stream of a
	// cluster until every member reads them.
	StreamWriters = "stream_writers"
	// TopologyCommands: topology changes (declare and delete exchanges
	// and queues, bind, unbind, policies, vhosts; users and permissions;
	// shovels and MQTT bridges) replicated as typed commands
	// (cluster/meta: KindTopology, exchange.TopologyCommand; KindUsers,
	// auth.Command; KindParameters, shovel.Command) that every
	// member applies, rather than as the records they write. A node of an
	// older release cannot read them; until the flag is enabled the
	// records path is used.
	TopologyCommands = "topology_commands"
	// StreamChunks: stream segments of chunk records (segment records of
	// version 2, whose messages are stored many to a record). A node of
	// an older release refuses to start with such a segment, so none is
	// written in a cluster until every member reads them.
	StreamChunks = "stream_chunks"
	// StreamAMQP10: stream records of version 4 (a message the stream
	// protocol published, kept as its AMQP 1.0 encoding:
	// exchange/streamamqp10.go). A node of an older release skips such a
	// record as corrupt, so none is written in a cluster until every
	// member reads them.
	StreamAMQP10 = "stream_amqp10_records"
)

// Errors.
var (
	// ErrUnknown is a flag this node's registry does not have.
	ErrUnknown = errors.New("featureflags: unknown feature flag")
	// ErrUnsupported is a flag some member of the cluster does not
	// support (it runs an older release, or it is not running).
	ErrUnsupported = errors.New("featureflags: not supported by every member of the cluster")
	// ErrDisabled is a writer asking for a kind or version whose flag is
	// not enabled.
	ErrDisabled = errors.New("featureflags: feature flag not enabled")
)

// registry is this release's flags. Append only: a flag is never removed
// (a flag whose change every supported release reads becomes Required).
var registry = []Flag{
	// The formats of v0.1.0, which nodes of that release read.
	{Name: "meta_entry_v1", Desc: "Metadata group entries of version 1: a batch of topology records (puts, creates, deletes)",
		Stability: Required, Release: "0.1.0"},
	{Name: "quorum_entry_v3", Desc: "Quorum queue and stream Raft entries of versions 2 and 3 (messages keyed in the store, range deletes for stream retention)",
		Stability: Required, Release: "0.1.0"},
	{Name: "forward_protocol_v1", Desc: "Inter-node forwarding protocol version 1 (publishes and consumers across nodes)",
		Stability: Required, Release: "0.1.0"},
	{Name: "mux_header_v2", Desc: "Inter-node connection header version 2 (cluster cookie, stream names)",
		Stability: Required, Release: "0.1.0"},
	{Name: "encrypted_raft_snapshots", Desc: "Raft snapshots encrypted with encryption.key_file's key",
		Stability: Required, Release: "0.1.0"},

	{Name: FeatureFlags, Desc: "Feature flags: the metadata group's typed command entries (version 2), which record the enabled flags",
		Stability: Stable, Release: "0.2.0"},
	{Name: ShovelOwnerMixed, Desc: "Shovels are spread over the nodes by a mixed rendezvous score (v0.1.0's skewed one node's share up to twice another's); every node must compute the same owner",
		Stability: Stable, Release: "0.2.0"},
	{Name: HashExchanges, Desc: "The x-consistent-hash and x-modulus-hash exchange types (records of exchanges a node of an older release cannot rebuild)",
		Stability: Stable, Release: "0.2.0"},
	{Name: StreamWriters, Desc: "Stream deduplication and filter values: stream records of version 2 with a named producer's publishing id (records a node of an older release cannot read)",
		Stability: Stable, Release: "0.2.0"},
	{Name: TopologyCommands, Desc: "Topology changes (vhosts, exchanges, queues, bindings, policies, operator policies, users and permissions, shovels and MQTT bridges) replicated as typed commands that every member applies, rather than as the records they write",
		Stability: Stable, Release: "0.2.0"},
	{Name: StreamChunks, Desc: "Stream segments of chunk records: the messages of one publish batch stored as one record (records a node of an older release cannot read)",
		Stability: Stable, Release: "0.2.0"},
	{Name: StreamAMQP10, Desc: "Stream records that keep a message published over the stream protocol as its AMQP 1.0 encoding, sent to stream readers as it is (records a node of an older release cannot read)",
		Stability: Stable, Release: "0.2.0"},
}

// All returns the registry, in its order.
func All() []Flag {
	out := make([]Flag, len(registry))
	copy(out, registry)
	return out
}

// Lookup returns the flag named name.
func Lookup(name string) (Flag, bool) {
	for _, f := range registry {
		if f.Name == name {
			return f, true
		}
	}
	return Flag{}, false
}

// Supported returns the names of the flags this node supports: its
// registry's.
func Supported() []string {
	out := make([]string, len(registry))
	for i, f := range registry {
		out[i] = f.Name
	}
	return out
}

// GossipKey is the key of a node's gossiped metadata listing the flags it
// supports beyond the required ones (EncodeSupport).
const GossipKey = "ff"

// EncodeSupport is the value a node gossips under GossipKey: the
// non-required flags it supports, comma-separated (the required ones are
// implied; gossiped metadata is bounded to 512 bytes).
func EncodeSupport(names []string) string {
	var out []string
	for _, n := range names {
		if f, ok := Lookup(n); ok && f.Stability == Required {
			continue
		}
		out = append(out, n)
	}
	return strings.Join(out, ",")
}

// DecodeSupport returns the flags a member supports from its gossiped
// metadata: the required ones and those listed under GossipKey. A member
// of v0.1.0 lists none.
func DecodeSupport(meta map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, f := range registry {
		if f.Stability == Required {
			out[f.Name] = true
		}
	}
	if v := meta[GossipKey]; v != "" {
		for n := range strings.SplitSeq(v, ",") {
			if n != "" {
				out[n] = true
			}
		}
	}
	return out
}

// RecordPrefix is the prefix of the replicated records that say a flag is
// enabled: RecordPrefix + name.
const RecordPrefix = "cluster/feature_flag/"

// RecordKey is the record of the flag named name.
func RecordKey(name string) string { return RecordPrefix + name }

// ReplicatedKey reports whether key is a flag's record.
func ReplicatedKey(key string) bool { return strings.HasPrefix(key, RecordPrefix) }

// NameOf returns the flag a record's key names.
func NameOf(key string) (string, bool) {
	n, ok := strings.CutPrefix(key, RecordPrefix)
	return n, ok && n != ""
}

// closure returns name's dependencies, transitively, then name: the order
// in which they are enabled. Unknown names are returned too (the caller
// refuses them).
func closure(name string) []string {
	var out []string
	var walk func(n string)
	walk = func(n string) {
		if slices.Contains(out, n) {
			return
		}
		if f, ok := Lookup(n); ok {
			for _, d := range f.DependsOn {
				walk(d)
			}
			if f.Stability != Required && n != FeatureFlags {
				walk(FeatureFlags)
			}
		}
		out = append(out, n)
	}
	walk(name)
	return out
}

// EnableOrder returns the flags to enable, in order, to enable name: its
// dependencies (feature_flags first) that are not enabled in s, then name.
func EnableOrder(s *Set, name string) []string {
	var out []string
	for _, n := range closure(name) {
		if !s.Enabled(n) {
			out = append(out, n)
		}
	}
	return out
}
