package exchange

import "strings"

// RecordsOf returns the records command c makes or removes, as the
// records path writes them: what a cluster's proposer replicates in place
// of the command while a member cannot read topology commands (a v0.1.0
// member, the feature flag topology_commands off). A v0.1.0 member applies
// them as it always did; a node of this build applies them as the command
// they stand for (ApplyMeta, then ApplyCommitted with the record set).
//
// A declaration is a create (MetaOp.Create: it takes effect only where
// the key holds no other record, so the first committed wins everywhere)
// of the record built from c by the code the apply uses
// (queueOfCommand, exchangeOfCommand): byte-equal to what a node alone
// writes for the same declaration. The other commands' records come from
// the topology now, under the vhost's lock: a queue's delete removes its
// record and its bindings' (and those of the auto-delete exchanges they
// leave empty), an exchange's delete its record and those of the bindings
// it is the source or destination of (likewise), an unbind the binding's
// record (and its auto-delete source's, if it leaves it empty), a bind
// puts the binding's, a policy's set or delete its record, a vhost's its
// record (a vhost's delete, the prefixes of what it held too).
//
// No records (nil, nil): c changes nothing here (the object is gone, the
// binding exists already), or c names an object without a record.
//
// Call it with the vhost's metaMu held or not, never its mu.
func (b *Broker) RecordsOf(c TopologyCommand) ([]MetaOp, error) {
	if c.Op.vhostOp() {
		return b.vhostRecordsOf(c), nil
	}
	v, ok := b.VHost(c.VHost)
	if !ok {
		return nil, nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.recordsOfLocked(c)
}

// recordsOfLocked is RecordsOf in v, v.mu held (read).
func (v *VHost) recordsOfLocked(c TopologyCommand) ([]MetaOp, error) {
	put := func(k string, val []byte) []MetaOp {
		if k == "" {
			return nil
		}
		return []MetaOp{{Key: k, Val: val}}
	}
	dels := func(first string, rest []string) []MetaOp {
		if first == "" {
			return nil
		}
		ops := []MetaOp{{Key: first}}
		for _, k := range rest {
			ops = append(ops, MetaOp{Key: k})
		}
		return ops
	}
	switch c.Op {
	case TopoDeclareQueue:
		q, err := v.queueOfCommand(c)
		if err != nil {
			return nil, err
		}
		ops := put(v.queueKey(q), encodeRecord(q.record()))
		for i := range ops {
			ops[i].Create = true
		}
		return ops, nil
	case TopoDeclareExchange:
		x, err := v.exchangeOfCommand(c)
		if err != nil {
			return nil, err
		}
		ops := put(v.exchangeKey(x), encodeRecord(x.record()))
		for i := range ops {
			ops[i].Create = true
		}
		return ops, nil
	case TopoDeleteQueue:
		q := v.queues[c.Name]
		if q == nil || (c.ID != 0 && q.id != c.ID) {
			return nil, nil
		}
		return dels(v.queueKey(q), v.recordsGoneWith(q.bindings, nil)), nil
	case TopoDeleteExchange:
		x := v.exchanges[c.Name]
		if x == nil || c.Name == "" || strings.HasPrefix(c.Name, "amq.") {
			return nil, nil
		}
		gone := append(append([]*binding(nil), x.bindings...), x.inbound...)
		return dels(v.exchangeKey(x), v.recordsGoneWith(gone, x)), nil
	case TopoBind:
		sx, q, dx, err := v.lookupBind(c.Name, c.ToQueue, c.Source, anyOwner)
		if err != nil || sx.findBinding(q, dx, c.Key, c.Args) != nil {
			return nil, nil
		}
		bd := &binding{src: sx, q: q, x: dx, key: c.Key, args: c.Args}
		return put(v.recordKeyOf(bd), encodeRecord(bd.record())), nil
	case TopoUnbind:
		sx, q, dx, err := v.lookupBind(c.Name, c.ToQueue, c.Source, anyOwner)
		if err != nil {
			return nil, nil
		}
		bd := sx.findBinding(q, dx, c.Key, c.Args)
		if bd == nil {
			return nil, nil
		}
		var rest []string
		if sx.autoDelete && len(sx.bindings) == 1 {
			// The source goes with its last binding, by its own record.
			if xk := v.exchangeKey(sx); xk != "" {
				rest = append(rest, xk)
			}
		}
		return dels(v.recordKeyOf(bd), rest), nil
	case TopoSetPolicy:
		np, err := compilePolicy(v.name, c.policy())
		if err != nil {
			return nil, err
		}
		return put(v.key("policy", np.Name), encodeRecord(np.record())), nil
	case TopoDeletePolicy:
		if _, ok := v.policies[c.Name]; !ok {
			return nil, nil
		}
		return dels(v.key("policy", c.Name), nil), nil
	case TopoSetOperatorPolicy:
		np, err := compileOperatorPolicy(v.name, c.policy())
		if err != nil {
			return nil, err
		}
		return put(v.opPolicyKey(np.Name), encodeRecord(np.record())), nil
	case TopoDeleteOperatorPolicy:
		if _, ok := v.opPolicies[c.Name]; !ok {
			return nil, nil
		}
		return dels(v.opPolicyKey(c.Name), nil), nil
	}
	return nil, errorf(KindInternal, "unknown topology command %v", c.Op)
}

// vhostRecordsOf is RecordsOf of a command on a vhost itself, as a node
// alone writes them (applyEnsureVHost, applySetVHostMetadata,
// applyDeleteVHost).
func (b *Broker) vhostRecordsOf(c TopologyCommand) []MetaOp {
	key := "vhost/" + c.VHost
	_, exists := b.VHost(c.VHost)
	switch c.Op {
	case TopoDeclareVHost:
		if exists {
			return nil
		}
		return []MetaOp{{Key: key, Val: vhostRecord(c.Description, c.Tags)}}
	case TopoSetVHostMeta:
		if !exists {
			return nil
		}
		return []MetaOp{{Key: key, Val: encodeRecord(Table{"description": c.Description, "tags": stringsToAny(c.Tags)})}}
	case TopoDeleteVHost:
		if !exists {
			return nil
		}
		ops := []MetaOp{{Key: key}}
		for _, p := range vhostRecordPrefixes {
			ops = append(ops, MetaOp{Key: p + c.VHost + "\x00", Prefix: true})
		}
		return ops
	}
	return nil
}
