package placement

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/cluster/forward"
	"github.com/trident-broker/trident/cluster/groups"
	"github.com/trident-broker/trident/exchange"
)

// Groups runs this node's members of Raft groups (*groups.Host).
type Groups interface {
	Start(name string, fsm raft.FSM, o groups.Options) (*raft.Raft, error)
	// Stop shuts a group's member down, keeping its data.
	Stop(name string) error
	// Drop stops a group's member if it runs and deletes its data here.
	Drop(name string) error
	// HasState reports whether the group has Raft state on this node.
	HasState(name string) (bool, error)
	// SnapshotDir is the directory of the group's snapshots.
	SnapshotDir(name string) string
	// CampaignWhenReady makes r, just bootstrapped with servers, stand
	// for election as soon as enough of them run the group (or after
	// timeout), instead of after its election timer.
	CampaignWhenReady(name string, r *raft.Raft, servers []raft.Server, timeout time.Duration) error
}

// FollowerLags is implemented by a Groups that sees how far behind the
// followers of a group led here are (*groups.Host): lag is how many
// entries the follower at addr lacked of those the leader held when it
// sent the request the follower last answered, at. ok is false when
// nothing is known.
type FollowerLags interface {
	FollowerLag(name string, addr raft.ServerAddress) (lag uint64, at time.Time, ok bool)
}

// Queue is a durable queue as placement drives it (*exchange.Queue).
type Queue interface {
	ID() uint64
	VHost() string
	Name() string
	// Replicated reports a quorum queue or a clustered stream.
	Replicated() bool
	// IsStream reports a stream (its consumers read any member's copy).
	IsStream() bool
	// Home is a classic queue's home node.
	Home() string
	// Members are a replicated queue's recorded group members; Seed the
	// ones it was declared with.
	Members() []string
	Seed() []string
	BecomeProxy(r exchange.Remote)
	BecomeLocal(log exchange.MessageLog, st exchange.LogState)
	// LogApplied is quorum.Options.Applied.
	LogApplied(key uint64)
	// LogStored is quorum.FSM.OnStored's callback while leading.
	LogStored(key uint64)
}

// Topology records a replicated queue's members cluster-wide; the core
// then calls Attach again on every node, this one included.
type Topology interface {
	SetQueueMembers(vhost, name string, id uint64, members []string) error
}

// Remotes makes the proxies that reach a queue on another node
// (*forward.Forwarder).
type Remotes interface {
	Remote(vhost, queue string, locate forward.Locator) exchange.Remote
	Close()
}

// BrokerTopology is the Topology of a broker's vhosts.
type BrokerTopology struct{ B *exchange.Broker }

// SetQueueMembers implements Topology.
func (t BrokerTopology) SetQueueMembers(vhost, name string, id uint64, members []string) error {
	v, ok := t.B.VHost(vhost)
	if !ok {
		return ErrNoVHost
	}
	return v.SetQueueMembers(name, id, members)
}
