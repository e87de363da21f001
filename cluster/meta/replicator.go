package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// ProposeTimeout bounds a write made through a Replicator.
const ProposeTimeout = 10 * time.Second

// ErrDetached is returned by a Replicator's writes after Detach (the node
// is shutting down its metadata group).
var ErrDetached = errors.New("meta: replicator detached from the metadata group")

// Replicator writes the records every node of a cluster holds, on
// explicit request: the callers (the core's stream offsets and queue
// members records, auth's and the shovels' records while topology
// commands are off, MQTT's retained messages and sessions, the cluster
// operations' records) name the intent by calling it; nothing is decided
// by a record's key. It implements the small interfaces those packages
// own (exchange.Replicator, auth.Replicator, shovel.Replicator,
// mqtt.Replicator, each a subset of its methods).
//
// Once attached to the metadata group, a write is proposed as one
// version 1 entry holding its records, and returns once committed and
// applied here (at most ProposeTimeout; an error without quorum); the
// FSM then writes the records to the local store on every node, this one
// included, and passes them to the hooks. Before Attach the records go to
// the local store (the defaults a node creates at start-up); after Detach
// the writes fail with ErrDetached.
type Replicator struct {
	local exchange.Store

	mu       sync.RWMutex
	g        proposer // nil until Attach
	detached bool
}

// proposer is what a Replicator needs of a Group.
type proposer interface {
	Propose(ctx context.Context, ops []exchange.MetaOp) error
}

// NewReplicator returns a Replicator that writes to local until attached.
func NewReplicator(local exchange.Store) *Replicator { return &Replicator{local: local} }

// Attach starts replicating through g.
func (r *Replicator) Attach(g *Group) { r.attach(g) }

func (r *Replicator) attach(g proposer) {
	r.mu.Lock()
	r.g, r.detached = g, false
	r.mu.Unlock()
}

// Detach stops replicating: writes fail from now on.
func (r *Replicator) Detach() {
	r.mu.Lock()
	r.g, r.detached = nil, true
	r.mu.Unlock()
}

// ReplicateMeta writes records cluster-wide: keys[i] gets vals[i], or is
// deleted when vals[i] is nil. Once attached they are one proposal.
func (r *Replicator) ReplicateMeta(keys []string, vals [][]byte) error {
	if len(keys) != len(vals) {
		return fmt.Errorf("meta: %d keys and %d values", len(keys), len(vals))
	}
	if len(keys) == 0 {
		return nil
	}
	ops := make([]exchange.MetaOp, len(keys))
	for i, k := range keys {
		ops[i] = exchange.MetaOp{Key: k, Val: vals[i]}
	}
	return r.write(ops)
}

// ReplicateDeletePrefix deletes every record whose key starts with prefix,
// cluster-wide.
func (r *Replicator) ReplicateDeletePrefix(prefix string) error {
	return r.write([]exchange.MetaOp{{Key: prefix, Prefix: true}})
}

// write proposes ops once attached, else writes them to the local store.
func (r *Replicator) write(ops []exchange.MetaOp) error {
	r.mu.RLock()
	g, detached := r.g, r.detached
	r.mu.RUnlock()
	switch {
	case detached:
		return ErrDetached
	case g == nil:
		return r.writeLocal(ops)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ProposeTimeout)
	defer cancel()
	return g.Propose(ctx, ops)
}

// writeLocal writes ops to the local store: several in one batch where it
// has them, else one by one.
func (r *Replicator) writeLocal(ops []exchange.MetaOp) error {
	if bs, ok := r.local.(exchange.MetaBatcher); ok && len(ops) > 1 && !ops[0].Prefix {
		keys := make([]string, len(ops))
		vals := make([][]byte, len(ops))
		for i, op := range ops {
			keys[i], vals[i] = op.Key, op.Val
		}
		return bs.WriteMetaBatch(keys, vals)
	}
	for _, op := range ops {
		var err error
		switch {
		case op.Prefix:
			err = r.local.DeleteMetaPrefix(op.Key)
		case op.Val == nil:
			err = r.local.DeleteMeta(op.Key)
		default:
			err = r.local.PutMeta(op.Key, op.Val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
