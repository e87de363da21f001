package exchange

// DeleteQueue deletes a queue and returns how many messages it held.
// Deleting a queue that does not exist succeeds with 0, as in RabbitMQ.
func (v *VHost) DeleteQueue(name string, ifUnused, ifEmpty bool, owner any) (int, error) {
	r, err := v.Apply(TopologyCommand{Op: TopoDeleteQueue, Name: name, IfUnused: ifUnused, IfEmpty: ifEmpty, Owner: owner})
	return r.Count, err
}

// applyDeleteQueue applies a queue.delete command on a node alone (in a
// cluster Apply proposes it: proposeChange).
func (v *VHost) applyDeleteQueue(c TopologyCommand) (int, error) {
	name, ifUnused, ifEmpty, owner := c.Name, c.IfUnused, c.IfEmpty, c.Owner
	v.mu.RLock()
	q := v.queues[name]
	v.mu.RUnlock()
	if q == nil {
		return 0, nil
	}
	if q.exclusive && q.owner != owner {
		return 0, errLocked(q)
	}
	r, _, nc := q.Stats()
	if ifUnused && nc > 0 {
		return 0, errorf(KindPreconditionFailed, "queue '%s' in vhost '%s' in use", name, v.name)
	}
	if ifEmpty && r > 0 {
		return 0, errorf(KindPreconditionFailed, "queue '%s' in vhost '%s' not empty", name, v.name)
	}
	return v.deleteQueue(q)
}

// PurgeQueue removes a queue's ready messages.
func (v *VHost) PurgeQueue(name string, owner any) (int, error) {
	q, err := v.Queue(name, owner)
	if err != nil {
		return 0, err
	}
	if q.st != nil {
		return 0, errNotForStream("queue.purge", q)
	}
	return q.Purge(), nil
}

// removeQueueLocked takes q, which is in v.queues, out of it. v.mu is held.
func (v *VHost) removeQueueLocked(q *Queue) {
	delete(v.queues, q.name)
	v.queues = shrinkMap(v.queues, &v.queuesPeak)
	v.b.churn.qDeleted.Add(1)
	if m := v.owned[q.owner]; m != nil {
		delete(m, q)
		if len(m) == 0 {
			delete(v.owned, q.owner)
		}
	}
}

// deleteQueue removes q from the vhost, cancels its consumers and drops
// its stored messages. In a cluster it changes this node's memory only
// (unlockTopology writes no replicated record there): the callers are
// the broker's own deletes whose proposal failed (deleteQueueBySelf,
// ForgetNode) and the committed vhost delete.
func (v *VHost) deleteQueue(q *Queue) (int, error) {
	v.lockTopology()
	if v.queues[q.name] == q {
		v.removeQueueLocked(q)
	} else if v.replyTo[q.name] == q {
		delete(v.replyTo, q.name)
	} else {
		_ = v.unlockTopology()
		return 0, nil
	}
	for len(q.bindings) > 0 {
		v.removeBindingLocked(q.bindings[len(q.bindings)-1], true)
	}
	if k := v.queueKey(q); k != "" {
		v.deleteMetaLocked(k)
	}
	err := v.unlockTopology()
	n := q.markDeleted()
	if derr := v.b.dropQueue(q); derr != nil && err == nil {
		err = errorf(KindInternal, "store: %v", derr)
	}
	return n, err
}

// dropQueue releases a deleted durable queue's messages: the stored ones
// of a classic queue living here, the Raft group of a quorum queue.
func (b *Broker) dropQueue(q *Queue) error {
	if q.st != nil {
		err := q.st.drop()
		if b.cluster != nil {
			b.cluster.Detach(q)
		}
		return err
	}
	if !q.persisted() {
		return nil
	}
	var err error
	if !q.xa.quorum && (b.cluster == nil || q.Home() == "" || q.Home() == b.cluster.NodeName()) {
		// The queue's id is never reused, so its messages can go after
		// the topology lock.
		err = b.store.DropMessages(q.id)
	}
	if b.cluster != nil {
		b.cluster.Detach(q)
	}
	return err
}
