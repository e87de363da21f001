package exchange

import (
	"bytes"
	"strings"

	"github.com/trident-broker/trident/exchange/event"
)

// Topology commands in a cluster.
//
// Once the cluster runs them (TopologyProposer.TopologyCommands: its
// feature flag is enabled), a topology change made on this node is not
// applied here first: VHost.Apply checks it against what this node holds
// (so that the user gets the protocol's error at once), then proposes the
// command; the metadata group commits it and every node, this one
// included, applies it with Broker.ApplyCommitted, which changes memory
// and returns the records to write to the node's own store. The proposer
// returns once its own node applied the command. Until the flag is
// enabled (a node of an older release is a member), the records path of
// cluster.go is used: the records are written through the node's Store,
// which replicates them, and Broker.ApplyMeta follows.

// TopologyProposer replicates topology commands: the cluster's metadata
// group.
type TopologyProposer interface {
	// TopologyCommands reports whether commands are proposed: every
	// member reads them (the feature flag is enabled).
	TopologyCommands() bool
	// ProposeTopology replicates c and returns once it is committed and
	// applied on this node (ApplyCommitted), or with an error (which may
	// leave it committed: a timeout does not cancel it).
	ProposeTopology(c TopologyCommand) error
}

type proposerBox struct{ p TopologyProposer }

// SetTopologyProposer makes the broker propose its topology commands
// through p once p says the cluster runs them. Call it once the metadata
// group is started.
func (b *Broker) SetTopologyProposer(p TopologyProposer) {
	b.proposer.Store(&proposerBox{p})
}

// commandsOn reports whether topology changes are proposed as commands,
// and through what.
func (v *VHost) commandsOn() (TopologyProposer, bool) { return v.b.commandsOn() }

func (b *Broker) commandsOn() (TopologyProposer, bool) {
	if b.cluster == nil {
		return nil, false
	}
	box := b.proposer.Load()
	if box == nil || box.p == nil || !box.p.TopologyCommands() {
		return nil, false
	}
	return box.p, true
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
			Exclusive: q.exclusive, AutoDelete: q.autoDelete, Args: q.args, ID: q.id, Node: q.home, Members: q.Members()}
	}
	x := op.createX
	c := TopologyCommand{Op: TopoDeclareExchange, Actor: actor, Name: x.name, Type: x.kind, Durable: x.durable,
		AutoDelete: x.autoDelete, Internal: x.internal, Args: x.args, Node: x.home}
	if x.delay != nil {
		c.ID = x.delay.id
	}
	return c
}

// proposeChange is Apply of a delete, bind or unbind in a cluster that
// runs commands: c is checked against this node's topology (its errors
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

// ApplyCommitted applies a command the cluster's metadata group committed:
// every node calls it for every such command, in log order, the proposer
// included. Memory changes here; the records the change makes or removes
// are returned, for the caller (the group's FSM) to write to this node's
// own store. It decides from the replicated topology only, which every
// node holds alike at the command's index, never from what is this
// node's alone (consumers, message counts: the proposer checked those),
// so every node ends with the same topology:
//
//   - a declaration creates the object only if the name is free (of two
//     nodes declaring one name at once, the first committed wins
//     everywhere, and the other's proposer adopts it); on the proposer it
//     installs the object the declaration made (its pending queue, with
//     its connection as owner);
//   - a queue delete deletes the queue of the command's id only;
//   - a bind or unbind whose source or destination is gone changes
//     nothing.
//
// It takes no metaMu: a proposer waits for its command under metaMu.
// Applying a command twice (a replay after a crash) changes nothing more.
func (b *Broker) ApplyCommitted(c TopologyCommand) ([]MetaOp, error) {
	if c.Op.vhostOp() {
		return b.applyCommittedVHost(c), nil
	}
	v, ok := b.VHost(c.VHost)
	if !ok {
		return nil, nil // the vhost is gone, and what it held with it
	}
	v.mu.Lock()
	gone, reapply, err := v.applyCommittedLocked(c)
	ops := make([]MetaOp, 0, len(v.metaOps))
	for _, op := range v.metaOps {
		ops = append(ops, MetaOp{Key: op.key, Val: op.val})
	}
	v.metaOps = nil
	v.mu.Unlock()
	if reapply {
		v.reapplyQueues()
	}
	if gone != nil {
		gone.markDeleted()
		if derr := b.dropQueue(gone); derr != nil {
			b.log.Warn("dropping a deleted queue's messages failed", "vhost", v.name, "queue", gone.name, "err", derr)
		}
	}
	return ops, err
}

// applyCommittedLocked is ApplyCommitted under v.mu; gone is a deleted
// queue whose messages are to be dropped once v.mu is released, reapply
// that the policies changed and the queues take them again then.
func (v *VHost) applyCommittedLocked(c TopologyCommand) (gone *Queue, reapply bool, err error) {
	switch c.Op {
	case TopoSetPolicy:
		np, err := compilePolicy(v.name, c.policy())
		if err != nil {
			return nil, false, err
		}
		if cur := v.policies[c.Name]; cur != nil && cur.same(np) {
			return nil, false, nil
		}
		v.policies[np.Name] = np
		v.reapplyExchangesLocked()
		v.putMetaLocked(v.key("policy", np.Name), encodeRecord(np.record()))
		return nil, true, nil
	case TopoDeletePolicy:
		if _, ok := v.policies[c.Name]; !ok {
			return nil, false, nil
		}
		delete(v.policies, c.Name)
		v.reapplyExchangesLocked()
		v.deleteMetaLocked(v.key("policy", c.Name))
		return nil, true, nil
	case TopoSetOperatorPolicy:
		np, err := compileOperatorPolicy(v.name, c.policy())
		if err != nil {
			return nil, false, err
		}
		if cur := v.opPolicies[c.Name]; cur != nil && cur.same(np) {
			return nil, false, nil
		}
		v.opPolicies[np.Name] = np
		v.putMetaLocked(v.opPolicyKey(np.Name), encodeRecord(np.record()))
		return nil, true, nil
	case TopoDeleteOperatorPolicy:
		if _, ok := v.opPolicies[c.Name]; !ok {
			return nil, false, nil
		}
		delete(v.opPolicies, c.Name)
		v.deleteMetaLocked(v.opPolicyKey(c.Name))
		return nil, true, nil
	case TopoDeclareExchange:
		if v.exchanges[c.Name] != nil || c.Name == "" {
			return nil, false, nil
		}
		r := Table{"type": c.Type, "durable": c.Durable, "auto_delete": c.AutoDelete, "internal": c.Internal, "args": c.Args}
		if c.Node != "" {
			r["node"] = c.Node
		}
		if c.Type == KindDelayed {
			r["delay_id"] = c.ID
		}
		x, err := exchangeFromRecord(v, c.Name, r)
		if err != nil {
			return nil, false, err
		}
		if p := v.pendingX[c.Name]; p != nil && bytes.Equal(encodeRecord(p.record()), encodeRecord(x.record())) {
			x = p // this node's own declaration
			delete(v.pendingX, c.Name)
		}
		v.installExchangeLocked(x)
		if k := v.exchangeKey(x); k != "" {
			v.putMetaLocked(k, encodeRecord(x.record()))
		}
	case TopoDeclareQueue:
		if v.queues[c.Name] != nil {
			return nil, false, nil
		}
		r := Table{"id": c.ID, "durable": c.Durable, "auto_delete": c.AutoDelete, "args": c.Args}
		if c.Exclusive {
			r["exclusive"] = true
		}
		if c.Node != "" {
			r["node"] = c.Node
		}
		if len(c.Members) > 0 {
			r["members"] = stringsToAny(c.Members)
		}
		if len(c.seed) > 0 {
			r["seed"] = stringsToAny(c.seed)
		}
		q, err := queueFromRecord(v, c.Name, r)
		if err != nil {
			return nil, false, err
		}
		if p := v.pending[c.Name]; p != nil && p.id == q.id {
			q = p // this node's own declaration: its owner, its group
			delete(v.pending, c.Name)
		}
		v.installQueueLocked(q)
		if k := v.queueKey(q); k != "" {
			v.putMetaLocked(k, encodeRecord(q.record()))
		}
	case TopoDeleteExchange:
		x := v.exchanges[c.Name]
		if x == nil || c.Name == "" || strings.HasPrefix(c.Name, "amq.") || (c.IfUnused && len(x.bindings) > 0) {
			return nil, false, nil
		}
		return nil, false, v.deleteExchangeLocked(x)
	case TopoDeleteQueue:
		q := v.queues[c.Name]
		if q == nil || (c.ID != 0 && q.id != c.ID) {
			return nil, false, nil
		}
		v.removeQueueLocked(q)
		for len(q.bindings) > 0 {
			v.removeBindingLocked(q.bindings[len(q.bindings)-1], true)
		}
		if k := v.queueKey(q); k != "" {
			v.deleteMetaLocked(k)
		}
		return q, false, nil
	case TopoBind:
		sx, q, dx, err := v.lookupBind(c.Name, c.ToQueue, c.Source, anyOwner)
		if err != nil || sx.findBinding(q, dx, c.Key, c.Args) != nil || validateBinding(sx, c.Key, c.Args) != nil {
			return nil, false, nil // gone since, or there already
		}
		bd := &binding{src: sx, q: q, x: dx, key: c.Key, args: c.Args}
		v.addBindingLocked(bd)
		if k := v.recordKeyOf(bd); k != "" {
			v.putMetaLocked(k, encodeRecord(bd.record()))
		}
	case TopoUnbind:
		sx, q, dx, err := v.lookupBind(c.Name, c.ToQueue, c.Source, anyOwner)
		if err != nil {
			return nil, false, nil
		}
		if bd := sx.findBinding(q, dx, c.Key, c.Args); bd != nil {
			v.removeBindingLocked(bd, true)
		}
	default:
		return nil, false, errorf(KindInternal, "unknown topology command %v", c.Op)
	}
	return nil, false, nil
}

// applyVHostCommand applies a command on a vhost itself: proposed in a
// cluster that runs commands, else as standalone.
func (b *Broker) applyVHostCommand(c TopologyCommand) error {
	if p, on := b.commandsOn(); on {
		return b.proposeVHost(p, c)
	}
	switch c.Op {
	case TopoDeclareVHost:
		return b.applyEnsureVHost(c.VHost)
	case TopoSetVHostMeta:
		return b.applySetVHostMetadata(c.VHost, c.Description, c.Tags)
	case TopoDeleteVHost:
		return b.applyDeleteVHost(c.VHost)
	}
	return errorf(KindInternal, "unknown topology command %v", c.Op)
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

// applyCommittedVHost is ApplyCommitted of a command on a vhost itself:
// a declaration creates the vhost if it does not exist; a delete removes
// it with everything in it, and the records of all of it.
func (b *Broker) applyCommittedVHost(c TopologyCommand) []MetaOp {
	name := c.VHost
	switch c.Op {
	case TopoDeclareVHost:
		b.mu.Lock()
		_, ok := b.vhosts[name]
		if !ok {
			v := newVHost(b, name)
			v.description, v.tags = c.Description, c.Tags
			b.vhosts[name] = v
		}
		b.mu.Unlock()
		if ok {
			return nil
		}
		return []MetaOp{{Key: "vhost/" + name, Val: vhostRecord(c.Description, c.Tags)}}
	case TopoSetVHostMeta:
		v, ok := b.VHost(name)
		if !ok {
			return nil
		}
		v.mu.Lock()
		v.description, v.tags = c.Description, append([]string(nil), c.Tags...)
		v.mu.Unlock()
		return []MetaOp{{Key: "vhost/" + name, Val: encodeRecord(Table{"description": c.Description, "tags": stringsToAny(c.Tags)})}}
	case TopoDeleteVHost:
		if _, ok := b.VHost(name); !ok {
			return nil
		}
		_ = b.applyVHost(name, nil) // a delete cannot fail
		ops := []MetaOp{{Key: "vhost/" + name}}
		for _, p := range []string{"exchange/", "queue/", "binding/", "policy/"} {
			ops = append(ops, MetaOp{Key: p + name + "\x00", Prefix: true})
		}
		return ops
	}
	return nil
}

// proposeSelfDelete proposes the delete of q, which the broker deletes by
// itself (deleteQueueBySelf), as a command naming q's id, when the
// cluster runs commands and q's record is replicated: every node, this
// one included, removes it when the command is applied
// (ApplyCommitted). It reports whether q is gone here; false leaves the
// delete to the caller (no commands, a queue of this node alone, or a
// proposal that failed). It takes metaMu, as Apply's proposals do; the
// caller holds no lock.
func (v *VHost) proposeSelfDelete(q *Queue) bool {
	p, on := v.commandsOn()
	if !on {
		return false
	}
	v.metaMu.Lock()
	defer v.metaMu.Unlock()
	v.mu.RLock()
	key := ""
	if v.queues[q.name] == q {
		key = v.queueKey(q)
	}
	v.mu.RUnlock()
	if key == "" {
		return false
	}
	c := TopologyCommand{Op: TopoDeleteQueue, VHost: v.name, Name: q.name, ID: q.id}
	if f := v.b.onApply; f != nil {
		f(c)
	}
	if err := v.propose(p, c); err != nil {
		v.b.log.Warn("proposing the delete of a queue the broker deletes failed: deleting it here", "vhost", v.name,
			"queue", q.name, "err", err)
		return false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.queues[q.name] != q
}
