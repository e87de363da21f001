package exchange

import (
	"bytes"
	"slices"
	"strings"
)

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
// Recovery replays the stored records through it, and ApplyMeta the
// records committed on the records path, read as commands
// (commandOfRecord); for the latter the record is the state
// (TopologyCommand.record).
//
// It takes no metaMu: a proposer waits for its command under metaMu.
// Applying a command twice (a replay after a crash) changes nothing more.
func (b *Broker) ApplyCommitted(c TopologyCommand) ([]MetaOp, error) {
	if f := committedHook; f != nil {
		f(c)
	}
	if c.Op.vhostOp() {
		return b.applyCommittedVHost(c), nil
	}
	v, ok := b.VHost(c.VHost)
	if !ok {
		return nil, nil // the vhost is gone, and what it held with it
	}
	return v.applyCommitted(c)
}

// committedHook, if set, sees each command ApplyCommitted applies (tests).
var committedHook func(TopologyCommand)

// applyCommitted is ApplyCommitted in v.
func (v *VHost) applyCommitted(c TopologyCommand) ([]MetaOp, error) {
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
		if gone.st != nil {
			ops = v.dropCommittedStream(gone, c.record, ops)
		} else if derr := v.b.dropQueue(gone); derr != nil {
			v.b.log.Warn("dropping a deleted queue's messages failed", "vhost", v.name, "queue", gone.name, "err", derr)
		}
	}
	return ops, err
}

// dropCommittedStream drops stream q, deleted by a committed command, on
// this node. Its named offsets are cluster-wide records, and every node
// applies the delete: a command's apply returns their prefix delete with
// its records (the group's applier writes them); a record read as a
// command (record: a v0.1.0 member may be in the cluster, which proposes
// that delete itself) proposes it, as v0.1.0 does, but without waiting
// here: this runs on the group's FSM, which would have to apply the
// proposal before it returned.
func (v *VHost) dropCommittedStream(q *Queue, record bool, ops []MetaOp) []MetaOp {
	if err := q.st.log.DropAll(); err != nil {
		v.b.log.Warn("dropping a deleted stream's log failed", "vhost", v.name, "queue", q.name, "err", err)
	}
	if v.b.cluster != nil {
		v.b.cluster.Detach(q)
	}
	prefix := q.st.offsetPrefix()
	if !record {
		return append(ops, MetaOp{Key: prefix, Prefix: true})
	}
	go func() {
		if err := v.b.replicatePrefix(prefix); err != nil {
			v.b.log.Warn("a deleted stream's named offsets not deleted", "vhost", v.name, "queue", q.name, "err", err)
		}
	}()
	return ops
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
		cur := v.exchanges[c.Name]
		if c.Name == "" || (cur != nil && !c.record) {
			return nil, false, nil
		}
		x, err := v.exchangeOfCommand(c)
		if err != nil {
			return nil, false, err
		}
		if cur != nil { // a record (c.record)
			if bytes.Equal(encodeRecord(cur.record()), encodeRecord(x.record())) || (cur.kind == x.kind &&
				cur.durable == x.durable && cur.autoDelete == x.autoDelete && cur.internal == x.internal &&
				valuesEqual(cur.args, x.args)) {
				// The same exchange (its own record coming back, or
				// another node's equal declaration): its bindings stay.
				return nil, false, nil
			}
			// Another exchange of the name: the record replaces it.
			_ = v.deleteExchangeLocked(cur)
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
		cur := v.queues[c.Name]
		if cur != nil && !c.record {
			return nil, false, nil
		}
		q, err := v.queueOfCommand(c)
		if err != nil {
			return nil, false, err
		}
		if cur != nil { // a record (c.record)
			if cur.id == q.id {
				// The same queue. Forget and rebalance re-write a quorum
				// queue's or a stream's record with its new members: it
				// takes them, and the cluster attaches it again.
				if !slices.Equal(cur.Members(), q.Members()) {
					cur.setMembers(q.Members())
					if v.b.cluster != nil {
						v.b.cluster.Attach(cur)
					}
				}
				return nil, false, nil
			}
			// Another queue of the name: the record replaces it.
			gone = cur
			v.removeQueueLocked(cur)
			for len(cur.bindings) > 0 {
				v.removeBindingLocked(cur.bindings[len(cur.bindings)-1], true)
			}
		}
		if p := v.pending[c.Name]; p != nil && p.id == q.id {
			q = p // this node's own declaration: its owner, its group
			delete(v.pending, c.Name)
		}
		v.installQueueLocked(q)
		if k := v.queueKey(q); k != "" {
			v.putMetaLocked(k, encodeRecord(q.record()))
		}
		return gone, false, nil
	case TopoDeleteExchange:
		x := v.exchanges[c.Name]
		if x == nil || c.Name == "" || strings.HasPrefix(c.Name, "amq.") || (c.IfUnused && len(x.bindings) > 0) ||
			(c.record && x.durable != c.Durable) {
			return nil, false, nil
		}
		return nil, false, v.deleteExchangeLocked(x)
	case TopoDeleteQueue:
		q := v.queues[c.Name]
		if q == nil || (c.ID != 0 && q.id != c.ID) || (c.record && q.persisted() != c.Durable) {
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
		if err != nil || sx.findBinding(q, dx, c.Key, c.Args) != nil {
			return nil, false, nil // gone since, or there already
		}
		if !c.record && validateBinding(sx, c.Key, c.Args) != nil {
			return nil, false, nil // a record is taken as it was made
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
		bd := sx.findBinding(q, dx, c.Key, c.Args)
		if bd == nil || (c.record && (v.recordKeyOf(bd) == "" || bd.durable() != c.Durable)) {
			return nil, false, nil
		}
		// A record's unbind leaves an auto-delete source to that
		// exchange's own record.
		v.removeBindingLocked(bd, !c.record)
	default:
		return nil, false, errorf(KindInternal, "unknown topology command %v", c.Op)
	}
	return nil, false, nil
}

// exchangeOfCommand builds the exchange an exchange.declare command
// declares, as every node builds it: the one code from which both the
// committed apply (ApplyCommitted) and the records of the command
// (RecordsOf) take the exchange and its record.
func (v *VHost) exchangeOfCommand(c TopologyCommand) (*Exchange, error) {
	r := Table{"type": c.Type, "durable": c.Durable, "auto_delete": c.AutoDelete, "internal": c.Internal, "args": c.Args}
	if c.Node != "" {
		r["node"] = c.Node
	}
	if c.Type == KindDelayed {
		r["delay_id"] = c.ID
	}
	return exchangeFromRecord(v, c.Name, r)
}

// queueOfCommand builds the queue a queue.declare command declares, as
// exchangeOfCommand.
func (v *VHost) queueOfCommand(c TopologyCommand) (*Queue, error) {
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
	return queueFromRecord(v, c.Name, r)
}

// applyVHostCommand applies a command on a vhost itself: proposed in a
// cluster, else as standalone.
func (b *Broker) applyVHostCommand(c TopologyCommand) error {
	if p, on := b.proposerOn(); on {
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

// applyCommittedVHost is ApplyCommitted of a command on a vhost itself:
// a declaration creates the vhost if it does not exist; a delete removes
// it with everything in it, and the records of all of it.
func (b *Broker) applyCommittedVHost(c TopologyCommand) []MetaOp {
	name := c.VHost
	switch c.Op {
	case TopoDeclareVHost:
		b.mu.Lock()
		v, ok := b.vhosts[name]
		if !ok {
			v = newVHost(b, name)
			v.description, v.tags = c.Description, c.Tags
			b.vhosts[name] = v
		}
		b.mu.Unlock()
		if ok {
			if c.record {
				// The vhost's record holds its metadata too.
				v.mu.Lock()
				v.description, v.tags = c.Description, c.Tags
				v.mu.Unlock()
			}
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
		if !b.dropVHost(name) {
			return nil
		}
		ops := []MetaOp{{Key: "vhost/" + name}}
		for _, p := range vhostRecordPrefixes {
			ops = append(ops, MetaOp{Key: p + name + "\x00", Prefix: true})
		}
		// Its streams' named offsets: dropVHost's stream deletes return
		// theirs to it, which it does not write.
		return append(ops, MetaOp{Key: streamOffsetPrefix + name + "\x00", Prefix: true})
	}
	return nil
}

// dropVHost removes vhost name from memory with everything in it (its
// queues and their messages, its exchanges and their delayers, its retry
// delayer), without writing records: the committed vhost.delete. It
// reports whether there was such a vhost.
func (b *Broker) dropVHost(name string) bool {
	b.mu.Lock()
	v, ok := b.vhosts[name]
	delete(b.vhosts, name)
	b.mu.Unlock()
	if !ok {
		return false
	}
	for _, q := range v.Queues() {
		_, _ = v.applyCommitted(TopologyCommand{Op: TopoDeleteQueue, VHost: name, Name: q.name, ID: q.id})
	}
	// As DeleteVHost: the retry delayer and the exchanges (their
	// delayers, whose held messages are this node's) go too.
	v.stopRetries()
	v.mu.Lock()
	for _, x := range v.exchanges {
		_ = v.deleteExchangeLocked(x)
	}
	v.metaOps = nil // the records go by the vhost's own deletes
	v.mu.Unlock()
	return true
}
