package meta

import "strings"

// How a node's member of the metadata group starts, and the order a
// snapshot restore applies records in: decisions every node makes alike,
// kept here rather than in the binary that wires the group.

// StartMode is how a node's member of the metadata group starts.
type StartMode int

const (
	// StartRestart: the node has Raft state; the group restarts from it.
	StartRestart StartMode = iota
	// StartExpect: no state and bootstrap_expect N; the node waits for N
	// alive members and bootstraps with all of them (Group.BootstrapExpect).
	StartExpect
	// StartAlone: no state, no join list, no discovery and no
	// bootstrap_expect; the node bootstraps a cluster of one at once.
	StartAlone
	// StartWaitAdded: no state, but seeds to join (or discovery); the node
	// waits for the cluster's leader to add it.
	StartWaitAdded
)

func (m StartMode) String() string {
	switch m {
	case StartRestart:
		return "restart"
	case StartExpect:
		return "bootstrap-expect"
	case StartAlone:
		return "bootstrap-alone"
	case StartWaitAdded:
		return "wait-to-be-added"
	}
	return "unknown"
}

// ChooseStart decides how the member starts: from its state if it has any
// (hasState: the group's Raft log is not empty), else by bootstrap_expect
// (expect > 0), else alone when it has nothing to join (no seeds, no
// discovery), else it waits to be added. State wins: a restarted node
// never bootstraps again, whatever its configuration says now.
func ChooseStart(hasState bool, expect int, seeds, discovery bool) StartMode {
	switch {
	case hasState:
		return StartRestart
	case expect > 0:
		return StartExpect
	case !seeds && !discovery:
		return StartAlone
	default:
		return StartWaitAdded
	}
}

// restoreOrder is the order of RestoreRank: a vhost before the users and
// their permissions in it, and before its exchanges, queues and bindings
// (a binding after both its ends).
var restoreOrder = []string{"vhost/", "user/", "perm/", "tperm/", "exchange/", "queue/", "binding/"}

// RestoreRank is the StoreApplier.Rank of a node: a record's place in a
// snapshot restore, by its key's prefix (records of other prefixes last).
func RestoreRank(key string) int {
	for i, p := range restoreOrder {
		if strings.HasPrefix(key, p) {
			return i
		}
	}
	return len(restoreOrder)
}
