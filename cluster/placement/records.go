package placement

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/trident-broker/trident/cluster/discovery"
	"github.com/trident-broker/trident/exchange"
)

// The cluster operations' records (issue 16): forgetting a node that is
// gone and spreading quorum queue leaders are records of the metadata
// group, so that every node acts on them in the same order whichever node
// the operator asked:
//
//   - ForgetPrefix+<node>: every node records the member as having left
//     (discovery.Membership.Forget); the reconcilers that already follow
//     membership then take it out (the metadata leader removes it from
//     the group, each quorum queue's leader from its group, and grows the
//     group back with another alive node; its transient queues go).
//   - RebalanceKey: a plan of leader moves made by the node asked; a node
//     leading a queue of the plan hands its leadership to the target.
//   - ClusterNameKey: the cluster name set through the API, which every
//     node reads from its local store.
//
// ForgetRecord and RebalanceRecord decide what to write; OpsApplier is
// what every node does with the records once committed.

const (
	// ForgetPrefix prefixes the record that forgets a node.
	ForgetPrefix = "cluster/forget/"
	// RebalanceKey is the record of the last rebalance plan.
	RebalanceKey = "cluster/rebalance"
	// ClusterNameKey is the record of the cluster name set through PUT
	// /api/cluster-name (RabbitMQ's cluster_name runtime parameter).
	ClusterNameKey = "cluster/name"
	// RebalanceFresh bounds how old a plan may be when applied: a plan
	// replayed from the log or a snapshot long after is ignored.
	RebalanceFresh = time.Minute
)

// OpsKey reports whether key is one of these records (all replicated).
func OpsKey(key string) bool {
	return strings.HasPrefix(key, ForgetPrefix) || key == RebalanceKey || key == ClusterNameKey
}

// Errors of ForgetRecord.
var (
	ErrForgetSelf    = errors.New("placement: a node cannot forget itself")
	ErrForgetUnknown = errors.New("placement: no such node in the cluster")
	ErrForgetRunning = errors.New("placement: the node is running")
)

// ForgetRecord decides whether self may forget node, from the members it
// sees: not itself (ErrForgetSelf), a member it knows (ErrForgetUnknown),
// and one that is not alive (ErrForgetRunning). It returns the record to
// write to the metadata group, stamped with now.
func ForgetRecord(self string, members []discovery.Member, node string, now time.Time) (key string, val []byte, err error) {
	if node == self {
		return "", nil, ErrForgetSelf
	}
	known := false
	for _, m := range members {
		if m.Name != node {
			continue
		}
		known = true
		if m.Status == discovery.StatusAlive {
			return "", nil, fmt.Errorf("%w: %s", ErrForgetRunning, node)
		}
	}
	if !known {
		return "", nil, fmt.Errorf("%w: %s", ErrForgetUnknown, node)
	}
	at, _ := now.UTC().MarshalText()
	return ForgetPrefix + node, at, nil
}

// rebalancePlan is the record of a rebalance.
type rebalancePlan struct {
	At    time.Time `json:"at"`
	Moves []Move    `json:"moves"`
}

// RebalanceRecord is the record of a plan of leader moves (Placer.
// PlanRebalance) made at now.
func RebalanceRecord(moves []Move, now time.Time) (key string, val []byte, err error) {
	b, err := json.Marshal(rebalancePlan{At: now.UTC(), Moves: moves})
	if err != nil {
		return "", nil, err
	}
	return RebalanceKey, b, nil
}

// Forgetting is what OpsApplier needs of membership (discovery.Membership).
type Forgetting interface {
	// Forget records node as having left; an error when it still looks
	// alive here.
	Forget(node string) error
	// ForgetWhenDown makes node's leave, when it comes, count as on
	// purpose.
	ForgetWhenDown(node string) bool
}

// OpsApplier applies the committed records of the cluster operations on
// every node. It is a metadata hook: it runs on the FSM goroutine, so it
// only starts work.
type OpsApplier struct {
	Members Forgetting
	// Kick, if set, asks the metadata group's leader to reconcile its
	// configuration (meta.Group.Kick), after a node was forgotten.
	Kick func()
	// Rebalance, if set, hands this node's leaderships of a plan's queues
	// to their targets (Placer.ApplyRebalance); it runs in a goroutine of
	// its own.
	Rebalance func([]Move)
	// Now is the clock a plan's age is read by (time.Now if nil).
	Now func() time.Time
	Log *slog.Logger
}

// ApplyMeta is the hook: it acts on the puts of these records and leaves
// every other op alone.
func (a *OpsApplier) ApplyMeta(ops []exchange.MetaOp) error {
	for _, op := range ops {
		switch {
		case op.Val == nil || op.Prefix:
		case strings.HasPrefix(op.Key, ForgetPrefix):
			a.forget(strings.TrimPrefix(op.Key, ForgetPrefix))
		case op.Key == RebalanceKey:
			var p rebalancePlan
			if err := json.Unmarshal(op.Val, &p); err != nil {
				return fmt.Errorf("placement: rebalance record: %w", err)
			}
			if a.Rebalance == nil || a.now().Sub(p.At) > RebalanceFresh {
				continue
			}
			go a.Rebalance(p.Moves)
		}
	}
	return nil
}

func (a *OpsApplier) forget(node string) {
	if err := a.Members.Forget(node); err != nil {
		// The node that took the request saw it down; this one's
		// failure detector is behind. Its leave, when it comes, counts
		// as on purpose.
		a.Members.ForgetWhenDown(node)
		if a.Log != nil {
			a.Log.Info("forget_cluster_node: the node still looks alive here; forgotten once it is down", "node", node)
		}
		return
	}
	if a.Kick != nil {
		a.Kick()
	}
}

func (a *OpsApplier) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}
