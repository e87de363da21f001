package exchange

import (
	"strings"

	"github.com/trident-broker/trident/exchange/event"
)

// Topology commands in a cluster.
//
// In a cluster (SetCluster, and the metadata group attached:
// SetTopologyProposer) a topology change made on this node is never
// applied here first, whatever the feature flags: VHost.Apply checks it
// against what this node holds (so that the user gets the protocol's
// error at once), then proposes the command; the metadata group commits
// it and every node, this one included, applies it (ApplyCommitted), which
// changes memory and returns the records to write to the node's own
// store. The proposer returns once its own node applied the command. The
// broker's own deletes (an exclusive queue's owner gone, auto-delete,
// x-expires, ForgetNode) are commands too. The core writes no replicated
// topology record through its Store in a cluster: those reach the node's
// store through the group's applier only.
//
// The proposer chooses the command's encoding: a topology command entry
// once every member reads them (the feature flag topology_commands), else
// the records the command makes (RecordsOf), as a v0.1.0 member writes
// and applies them, which this build applies as the command they stand
// for (ApplyMeta).

// TopologyProposer replicates topology commands: the cluster's metadata
// group.
type TopologyProposer interface {
	// ProposeTopology replicates c and returns once it is committed and
	// applied on this node (ApplyCommitted or ApplyMeta), or with an
	// error (which may leave it committed: a timeout does not cancel it).
	ProposeTopology(c TopologyCommand) error
}

type proposerBox struct{ p TopologyProposer }

// SetTopologyProposer makes the broker propose its topology changes
// through p. Call it once the metadata group is started; until then a
// clustered broker writes as a standalone one (the defaults a node
// creates at start-up, to its own store).
func (b *Broker) SetTopologyProposer(p TopologyProposer) {
	b.proposer.Store(&proposerBox{p})
}

// proposerOn reports whether topology changes are proposed, and
// through what: in a cluster whose metadata group is attached.
func (v *VHost) proposerOn() (TopologyProposer, bool) { return v.b.proposerOn() }

func (b *Broker) proposerOn() (TopologyProposer, bool) {
	if b.cluster == nil {
		return nil, false
	}
	box := b.proposer.Load()
	if box == nil || box.p == nil {
		return nil, false
	}
	return box.p, true
}

// clustered reports whether the vhost's topology changes are proposed
// (proposerOn).
func (v *VHost) clustered() bool {
	_, on := v.proposerOn()
	return on
}

// propose replicates c: called with metaMu held (so that this node's
// topology changes are made one at a time, as standalone) and no other
// lock.
func (v *VHost) propose(p TopologyProposer, c TopologyCommand) error {
	c.VHost = v.name
	if err := p.ProposeTopology(c); err != nil {
		return errorf(KindInternal, "cluster: %v", err)
	}
	return nil
}

// createCommand is the command that creates the pending queue or
// exchange of op (declareQueueLocked, declareExchangeLocked).
func (v *VHost) createCommand(op metaOp, actor string) TopologyCommand {
	if q := op.create; q != nil {
		return TopologyCommand{Op: TopoDeclareQueue, Actor: actor, Name: q.name, Durable: q.durable,
			Exclusive: q.exclusive, AutoDelete: q.autoDelete, Args: q.args, ID: q.id, Node: q.Home(), Members: q.Members()}
	}
	x := op.createX
	c := TopologyCommand{Op: TopoDeclareExchange, Actor: actor, Name: x.name, Type: x.kind, Durable: x.durable,
		AutoDelete: x.autoDelete, Internal: x.internal, Args: x.args, Node: x.home}
	if x.delay != nil {
		c.ID = x.delay.id
	}
	return c
}

// proposeChange is Apply of a delete, bind, unbind or policy change in a
// cluster: c is checked against this node's topology (its errors
// are the user's), then proposed; the change happens when it is applied
// (ApplyCommitted), here as on every node.
func (v *VHost) proposeChange(p TopologyProposer, c TopologyCommand) (Result, error) {
	v.metaMu.Lock()
	defer v.metaMu.Unlock()
	v.mu.RLock()
	var res Result
	propose, err := v.checkChangeLocked(&c, &res)
	v.mu.RUnlock()
	if err != nil || !propose {
		return Result{}, err
	}
	if err := v.propose(p, c); err != nil {
		return Result{}, err
	}
	return res, nil
}

// checkChangeLocked checks c against the topology (v.mu held, read): an
// error for the user, or whether there is anything to propose. A queue
// delete gets the queue's id (so that it deletes that queue and not one
// declared again under its name) and answers its message count.
func (v *VHost) checkChangeLocked(c *TopologyCommand, res *Result) (bool, error) {
	switch c.Op {
	case TopoDeleteExchange:
		if c.Name == "" {
			return false, errorf(KindAccessRefused, "operation not permitted on the default exchange")
		}
		if strings.HasPrefix(c.Name, "amq.") {
			return false, errorf(KindAccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", c.Name, v.name)
		}
		x := v.exchanges[c.Name]
		if x == nil {
			return false, nil
		}
		if c.IfUnused && len(x.bindings) > 0 {
			return false, errorf(KindPreconditionFailed, "exchange '%s' in vhost '%s' in use", c.Name, v.name)
		}
		return true, nil
	case TopoDeleteQueue:
		q := v.queues[c.Name]
		if q == nil {
			return false, nil
		}
		if q.exclusive && q.owner != c.Owner {
			return false, errLocked(q)
		}
		r, _, nc := q.Stats()
		if c.IfUnused && nc > 0 {
			return false, errorf(KindPreconditionFailed, "queue '%s' in vhost '%s' in use", c.Name, v.name)
		}
		if c.IfEmpty && r > 0 {
			return false, errorf(KindPreconditionFailed, "queue '%s' in vhost '%s' not empty", c.Name, v.name)
		}
		c.ID, res.Count = q.id, r
		return true, nil
	case TopoBind:
		sx, q, dx, err := v.lookupBind(c.Name, c.ToQueue, c.Source, c.Owner)
		if err != nil {
			return false, err
		}
		if sx.findBinding(q, dx, c.Key, c.Args) != nil {
			return false, nil
		}
		return true, validateBinding(sx, c.Key, c.Args)
	case TopoUnbind:
		sx, q, dx, err := v.lookupBind(c.Name, c.ToQueue, c.Source, c.Owner)
		if KindOf(err) == KindNotFound {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return sx.findBinding(q, dx, c.Key, c.Args) != nil, nil
	case TopoSetPolicy:
		if _, err := compilePolicy(v.name, c.policy()); err != nil {
			return false, err
		}
		_, existed := v.policies[c.Name]
		res.Created = !existed
		return true, nil
	case TopoDeletePolicy:
		if _, ok := v.policies[c.Name]; !ok {
			return false, errorf(KindNotFound, "no policy '%s' in vhost '%s'", c.Name, v.name)
		}
		return true, nil
	case TopoSetOperatorPolicy:
		if _, err := compileOperatorPolicy(v.name, c.policy()); err != nil {
			return false, err
		}
		_, existed := v.opPolicies[c.Name]
		res.Created = !existed
		return true, nil
	case TopoDeleteOperatorPolicy:
		if _, ok := v.opPolicies[c.Name]; !ok {
			return false, errorf(KindNotFound, "no operator policy '%s' in vhost '%s'", c.Name, v.name)
		}
		return true, nil
	}
	return false, errorf(KindInternal, "topology command %v is not proposed this way", c.Op)
}

// proposeVHost checks a vhost command against this node's vhosts, then
// proposes it: the vhost changes when the command is applied
// (applyCommittedVHost), here as on every node.
func (b *Broker) proposeVHost(p TopologyProposer, c TopologyCommand) error {
	_, exists := b.VHost(c.VHost)
	switch {
	case c.Op == TopoDeclareVHost && exists:
		return nil
	case c.Op == TopoDeclareVHost:
		if err := checkName("vhost", c.VHost); err != nil {
			return err
		}
	case !exists:
		return errorf(KindNotFound, "no vhost '%s'", c.VHost)
	}
	if err := p.ProposeTopology(c); err != nil {
		return errorf(KindInternal, "cluster: %v", err)
	}
	if c.Op == TopoDeclareVHost && b.events.On() {
		b.events.Emit(event.VHostCreated, event.Prop{Key: "name", Value: c.VHost})
	}
	return nil
}

// vhostRecord is a vhost's record: its metadata.
func vhostRecord(description string, tags []string) []byte {
	if description == "" && tags == nil {
		return encodeRecord(Table{})
	}
	return encodeRecord(Table{"description": description, "tags": stringsToAny(tags)})
}

// proposeSelfDelete proposes the delete of q, which the broker deletes by
// itself (deleteQueueBySelf, ForgetNode), as a command naming q's id,
// when the node is clustered and q's record is replicated: every node,
// this one included, removes it when the command is applied. It reports
// whether q is gone here; false leaves the delete to the caller (a node
// alone, a queue without a record, or a proposal that failed: then the
// caller removes it from this node's memory only, unlockTopology writing
// no replicated record in a cluster). It takes metaMu, as Apply's
// proposals do; the caller holds no lock.
func (v *VHost) proposeSelfDelete(q *Queue) bool {
	c := TopologyCommand{Op: TopoDeleteQueue, VHost: v.name, Name: q.name, ID: q.id}
	return v.proposeBrokerDelete(c, "queue", func() (key string, here bool) {
		if here = v.queues[q.name] == q; here {
			key = v.queueKey(q)
		}
		return key, here
	})
}

// proposeSelfDeleteExchange proposes the delete of x, which the broker
// deletes by itself (ForgetNode), as proposeSelfDelete.
func (v *VHost) proposeSelfDeleteExchange(x *Exchange) bool {
	c := TopologyCommand{Op: TopoDeleteExchange, VHost: v.name, Name: x.name}
	return v.proposeBrokerDelete(c, "exchange", func() (key string, here bool) {
		if here = v.exchanges[x.name] == x; here {
			key = v.exchangeKey(x)
		}
		return key, here
	})
}

// proposeBrokerDelete is proposeSelfDelete of c, a delete of the object
// (a "queue" or an "exchange": what) that look finds, under v.mu held for
// reading: whether it is still this vhost's, and its record key ("" for
// none: nothing is proposed). It reports whether the object is gone here
// once c is applied.
func (v *VHost) proposeBrokerDelete(c TopologyCommand, what string, look func() (key string, here bool)) bool {
	p, on := v.proposerOn()
	if !on {
		return false
	}
	v.metaMu.Lock()
	defer v.metaMu.Unlock()
	v.mu.RLock()
	key, _ := look()
	v.mu.RUnlock()
	if key == "" {
		return false
	}
	if f := v.b.onApply; f != nil {
		f(c)
	}
	if err := v.propose(p, c); err != nil {
		v.b.log.Warn("proposing a delete the broker makes by itself failed: deleting it here only", "vhost", v.name,
			what, c.Name, "err", err)
		return false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, here := look()
	return !here
}
