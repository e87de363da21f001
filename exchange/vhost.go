package exchange

import (
	"errors"
	"sync"
	"sync/atomic"
)

// VHost is a virtual host: a namespace of exchanges, queues and bindings.
type VHost struct {
	b    *Broker
	name string

	// metaMu serialises topology changes with their store writes; it is
	// taken before mu. mu guards the topology in memory and is held only
	// while it changes, never across a store write, so publishers (which
	// read under mu) never wait for an fsync.
	metaMu  sync.Mutex
	metaOps []metaOp // store writes collected under mu
	// metaActor is the user the topology change in progress acts for
	// (under metaMu): the declarations it proposes carry it.
	metaActor string
	// description and tags are management metadata (under mu).
	description string
	tags        []string

	mu        topoMu // its Unlock drops the routing table (routetable.go)
	exchanges map[string]*Exchange
	queues    map[string]*Queue
	// queuesPeak is the most queues held since the map was last copied
	// (shrink.go).
	queuesPeak int
	owned      map[any]map[*Queue]struct{} // exclusive queues in queues, by owner (CloseOwner)
	replyTo    map[string]*Queue
	// replyRemote are proxies to other nodes' direct reply-to consumers.
	replyRemote map[string]*Queue
	// pending are queues declared on this node whose records are being
	// created through the cluster (see declareQueueLocked): not routable
	// nor visible until committed, when ApplyCommitted installs them as they
	// are (their owner, their id) unless another node's create of the
	// name was committed first.
	pending  map[string]*Queue
	pendingX map[string]*Exchange // the same for exchanges
	policies map[string]*Policy   // policy.go
	// opPolicies are the operator policies (operator_policy.go).
	opPolicies map[string]*Policy

	// anyExpiring is set once any message with a per-message expiration
	// was published, so that queues without x-message-ttl check expiry.
	anyExpiring atomic.Bool

	counters msgCounters // atomics, no lock; totals of its queues and exchanges

	// lat are the latency histograms by protocol (latency.go), made on
	// first use.
	lat [numProtocols]atomic.Pointer[latencySet]

	// The vhost's retries (retry.go), created on first use.
	retryMu sync.Mutex
	retryD  atomic.Pointer[delayer]
}

func newVHost(b *Broker, name string) *VHost {
	v := &VHost{b: b, name: name, exchanges: map[string]*Exchange{}, queues: map[string]*Queue{}, replyTo: map[string]*Queue{},
		policies: map[string]*Policy{}, opPolicies: map[string]*Policy{}}
	for _, p := range predeclared {
		x := &Exchange{vh: v, name: p.name, kind: p.kind, durable: true, router: newRouter(p.kind)}
		v.exchanges[p.name] = x
	}
	if b.eventVHost == name && name != "" {
		v.exchanges[EventExchange] = v.newEventExchange()
	}
	return v
}

// Name is the vhost's name.
func (v *VHost) Name() string { return v.name }

// Metadata returns the vhost's description and tags.
func (v *VHost) Metadata() (description string, tags []string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.description, append([]string(nil), v.tags...)
}

func (v *VHost) key(kind, name string) string { return kind + "/" + v.name + "\x00" + name }

func (v *VHost) errNoQueue(name string) error {
	return errorf(KindNotFound, "no queue '%s' in vhost '%s'", name, v.name)
}

func (v *VHost) errNoExchange(name string) error {
	return errorf(KindNotFound, "no exchange '%s' in vhost '%s'", name, v.name)
}

// metaOp is a metadata write collected under mu.
type metaOp struct {
	key     string
	val     []byte    // nil: delete
	create  *Queue    // the declaration of this pending queue, to propose (a cluster's)
	createX *Exchange // likewise for a pending exchange
}

// lockTopology starts a topology change.
func (v *VHost) lockTopology() {
	v.metaMu.Lock()
	v.mu.Lock()
}

// unlockTopology ends a topology change: it releases mu, then writes the
// collected metadata to the store in order, then releases metaMu. In a
// cluster (proposerOn) it proposes the pending declarations and writes
// only the node's own records (a delayed exchange's registry): the
// replicated topology records reach the store through the metadata
// group's applier alone, so a replicated one collected here (a delete the
// broker makes from memory because its proposal failed) is not written.
func (v *VHost) unlockTopology() error {
	ops := v.metaOps
	v.metaOps = nil
	v.mu.Unlock()
	defer v.metaMu.Unlock()
	defer func() { v.metaActor = "" }()
	p, clustered := v.proposerOn()
	if !clustered {
		if err := v.writeMetaBatch(ops); err != errNoBatch {
			if err != nil {
				return errorf(KindInternal, "store: %v", err)
			}
			return nil
		}
	}
	var first error
	for _, op := range ops {
		var err error
		if op.create != nil || op.createX != nil {
			// The declaration is proposed, and its apply here installs the
			// pending object if it won (ApplyCommitted, ApplyMeta);
			// settling drops it otherwise.
			err = v.propose(p, v.createCommand(op, v.metaActor))
			if op.create != nil {
				v.settlePending(op.create)
			} else {
				v.settlePendingExchange(op.createX)
			}
		} else if clustered && ReplicatedKey(op.key) {
			continue // the applier's to write
		} else if op.val == nil {
			err = v.b.store.DeleteMeta(op.key)
		} else {
			err = v.b.store.PutMeta(op.key, op.val)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return errorf(KindInternal, "store: %v", first)
	}
	return nil
}

// errNoBatch: the records cannot go in one batch (writeMetaBatch).
var errNoBatch = errors.New("exchange: no batch")

// writeMetaBatch writes ops in one store batch (MetaBatcher), or returns
// errNoBatch when it cannot: a store without batches, or a declaration
// to propose among them.
func (v *VHost) writeMetaBatch(ops []metaOp) error {
	bs, ok := v.b.store.(MetaBatcher)
	if !ok || len(ops) < 2 {
		return errNoBatch
	}
	keys := make([]string, len(ops))
	vals := make([][]byte, len(ops))
	for i, op := range ops {
		if op.create != nil || op.createX != nil {
			return errNoBatch
		}
		keys[i], vals[i] = op.key, op.val
	}
	return bs.WriteMetaBatch(keys, vals)
}

func (v *VHost) putMetaLocked(key string, val []byte) {
	v.metaOps = append(v.metaOps, metaOp{key: key, val: val})
}

func (v *VHost) deleteMetaLocked(key string) {
	v.metaOps = append(v.metaOps, metaOp{key: key})
}

// inTopology runs f as one topology change.
func (v *VHost) inTopology(f func() error) error {
	v.lockTopology()
	err := f()
	if serr := v.unlockTopology(); err == nil {
		err = serr
	}
	return err
}
