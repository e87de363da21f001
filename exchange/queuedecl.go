package exchange

import (
	"strings"
)

// QueueOpts describe a queue declaration.
type QueueOpts struct {
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Args       Table
	Passive    bool
	Owner      any // the declaring connection (comparable: a pointer); exclusive queues are indexed by it

	generated bool // the name is a server-chosen "amq.gen-…" (Do chose it to check its permission)
	turn      int  // a clustered stream's members turned by this many (superstream_declare.go)
}

// QueueInfo answers a declaration.
type QueueInfo struct {
	Name      string
	Messages  int
	Consumers int
	Created   bool // the declaration created the queue

	q *Queue // a clustered declaration's pending queue (see adoptDeclared)
}

// DeclareQueue declares (or, passively, checks) a queue. An empty name makes
// a server-named queue.
func (v *VHost) DeclareQueue(name string, o QueueOpts) (QueueInfo, error) {
	if o.Passive {
		return v.declarePassive(name, o.Owner)
	}
	r, err := v.Apply(TopologyCommand{Op: TopoDeclareQueue, Name: name, Durable: o.Durable, Exclusive: o.Exclusive,
		AutoDelete: o.AutoDelete, Args: o.Args, Owner: o.Owner, generated: o.generated})
	return r.Queue, err
}

// applyDeclareQueue applies a queue.declare command.
func (v *VHost) applyDeclareQueue(c TopologyCommand) (QueueInfo, error) {
	name, o := c.Name, c.queueOpts()
	v.b.churn.qDeclared.Add(1)
	if err := checkName("queue", name); err != nil {
		return QueueInfo{}, err
	}
	var info QueueInfo
	var err error
	for attempt := 0; ; attempt++ {
		err = v.inTopology(func() error {
			var err error
			v.metaActor = c.Actor
			info, err = v.declareQueueLocked(name, o)
			return err
		})
		if err != nil || info.q == nil {
			break
		}
		var again bool
		if info, again, err = v.adoptDeclared(info.q, o); !again || attempt == 2 {
			break
		}
	}
	if err == nil && info.Created {
		err = v.waitReady(info.Name)
	}
	return info, err
}

// adoptDeclared ends a clustered declaration of q once its create is
// applied here: q itself if its record won, else the queue another node
// created under the name first, if it is equivalent to what was asked
// (declare-ok), as if it had been there before. again: that queue is
// already gone, declare anew.
func (v *VHost) adoptDeclared(q *Queue, o QueueOpts) (info QueueInfo, again bool, err error) {
	v.mu.RLock()
	cur := v.queues[q.name]
	v.mu.RUnlock()
	switch {
	case cur == q:
		return QueueInfo{Name: q.name, Created: true}, false, nil
	case cur == nil:
		return QueueInfo{}, true, errorf(KindInternal, "queue '%s' in vhost '%s' was deleted while being declared", q.name, v.name)
	case cur.exclusive && cur.owner != o.Owner:
		return QueueInfo{}, false, errLocked(cur)
	}
	if err := cur.equivalent(o); err != nil {
		return QueueInfo{}, false, err
	}
	cur.touch()
	r, _, c := cur.Stats()
	return QueueInfo{Name: cur.name, Messages: r, Consumers: c}, false, nil
}

// settlePending ends q's pending create once its proposal returned: the
// apply of the committed declaration installed q already if it won; a q
// that lost, or whose proposal failed, is dropped (it was never visible).
func (v *VHost) settlePending(q *Queue) {
	v.mu.Lock()
	if v.pending[q.name] == q {
		delete(v.pending, q.name)
	}
	installed := v.queues[q.name] == q
	v.mu.Unlock()
	if !installed {
		q.markDeleted()
	}
}

// installQueueLocked makes q the vhost's queue of its name. Called with
// v.mu held.
func (v *VHost) installQueueLocked(q *Queue) {
	if !v.b.recovering {
		v.initPolicyLocked(q) // else once its messages are loaded
	}
	v.queues[q.name] = q
	if !v.b.recovering {
		v.b.churn.qCreated.Add(1)
	}
	if q.exclusive && q.owner != nil {
		if v.owned == nil {
			v.owned = map[any]map[*Queue]struct{}{}
		}
		m := v.owned[q.owner]
		if m == nil {
			m = map[*Queue]struct{}{}
			v.owned[q.owner] = m
		}
		m[q] = struct{}{}
	}
	if c := v.b.cluster; c != nil && (q.persisted() || q.Home() != c.NodeName()) {
		c.Attach(q)
	}
}

// waitReady waits until a new quorum queue's group can take messages.
func (v *VHost) waitReady(name string) error {
	c := v.b.cluster
	if c == nil {
		return nil
	}
	v.mu.RLock()
	q := v.queues[name]
	v.mu.RUnlock()
	if q == nil || !q.Replicated() {
		return nil
	}
	if err := c.WaitReady(q); err != nil {
		return errorf(KindInternal, "quorum queue '%s' in vhost '%s' has no leader: %v", name, v.name, err)
	}
	return nil
}

// Binding names a binding of a queue to an exchange, for DeclareQueueBound.
type Binding struct {
	Exchange string
	Key      string
	Args     Table
}

// DeclareQueueBound declares a queue and binds it in one topology change:
// the queue and its bindings route together, before the store writes of
// either (a subscription is live as soon as it exists in memory; the call
// still returns only once they are durable).
func (v *VHost) DeclareQueueBound(name string, o QueueOpts, binds []Binding) (QueueInfo, error) {
	if v.clustered() {
		// The queue exists once its create is committed: bind after.
		info, err := v.DeclareQueue(name, o)
		if err != nil {
			return info, err
		}
		for _, b := range binds {
			if err := v.bind(info.Name, true, b.Exchange, b.Key, b.Args, o.Owner); err != nil {
				return info, err
			}
		}
		return info, nil
	}
	var info QueueInfo
	err := v.inTopology(func() error {
		var err error
		if info, err = v.declareQueueLocked(name, o); err != nil {
			return err
		}
		for _, b := range binds {
			if err := v.bindLocked(info.Name, true, b.Exchange, b.Key, b.Args, o.Owner); err != nil {
				return err
			}
		}
		return nil
	})
	return info, err
}

func (v *VHost) declarePassive(name string, owner any) (QueueInfo, error) {
	if name == ReplyToQueue {
		return QueueInfo{Name: name}, nil
	}
	v.mu.RLock()
	q := v.queues[name]
	if q == nil && strings.HasPrefix(name, ReplyToQueue+".") {
		q = v.replyTo[name]
	}
	v.mu.RUnlock()
	if q == nil {
		return QueueInfo{}, v.errNoQueue(name)
	}
	if q.exclusive && q.owner != owner {
		return QueueInfo{}, errLocked(q)
	}
	q.touch()
	r, _, c := q.Stats()
	if n, nc, ok := q.ownerCounts(); ok { // a proxy: the owner's counts
		r, c = n, nc
	}
	return QueueInfo{Name: q.name, Messages: r, Consumers: c}, nil
}

func (v *VHost) declareQueueLocked(name string, o QueueOpts) (QueueInfo, error) {
	if q := v.queues[name]; q != nil {
		if q.exclusive && q.owner != o.Owner {
			return QueueInfo{}, errLocked(q)
		}
		if err := q.equivalent(o); err != nil {
			return QueueInfo{}, err
		}
		q.touch() // lock order: vhost, then queue
		r, _, c := q.Stats()
		return QueueInfo{Name: q.name, Messages: r, Consumers: c}, nil
	}
	if name == "" {
		name = "amq.gen-" + randomToken()
	} else if strings.HasPrefix(name, "amq.") && !o.generated {
		return QueueInfo{}, errorf(KindAccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", name)
	}
	a, err := parseQueueArgs(o.Args)
	if err != nil {
		return QueueInfo{}, namedArgError(err, name, v.name)
	}
	if m := v.b.limits.maxQueue.Load(); m > 0 && int64(len(v.queues)) >= m {
		return QueueInfo{}, errorf(KindPreconditionFailed, "cannot declare queue '%s': queue limit in vhost '%s' (%d) is reached", name, v.name, m)
	}
	if a.quorum || a.stream {
		switch {
		case !o.Durable:
			return QueueInfo{}, errorf(KindPreconditionFailed, "invalid property 'non-durable' for queue '%s' in vhost '%s'", name, v.name)
		case o.Exclusive:
			return QueueInfo{}, errorf(KindPreconditionFailed, "invalid property 'exclusive-owner' for queue '%s' in vhost '%s'", name, v.name)
		case o.AutoDelete:
			return QueueInfo{}, errorf(KindPreconditionFailed, "invalid property 'auto-delete' for queue '%s' in vhost '%s'", name, v.name)
		}
	}
	var owner any
	if o.Exclusive {
		owner = o.Owner
	}
	q := newQueue(v, name, v.b.nextQueueID(), o.Durable, o.Exclusive, o.AutoDelete, owner, o.Args, a)
	if c := v.b.cluster; c != nil {
		if a.quorum || a.stream {
			q.setMembers(turnMembers(c.QuorumMembers(max(a.groupSize, a.streamA.clusterSize)), o.turn))
			q.setSeed(q.Members())
		} else {
			q.setHome(c.NodeName())
		}
	}
	k := v.queueKey(q)
	if k != "" && v.clustered() {
		// In a cluster two nodes may declare the name at once. The
		// declaration is proposed (unlockTopology) and decided in the
		// metadata log's order: the queue comes into being when it is
		// committed (ApplyCommitted, or ApplyMeta of its record, installs q),
		// or, if another node's create came first, that queue is the one
		// and DeclareQueue adopts it. Either way every node ends with the
		// same queue and no live queue is ever replaced.
		if v.pending == nil {
			v.pending = map[string]*Queue{}
		}
		v.pending[name] = q
		v.metaOps = append(v.metaOps, metaOp{key: k, val: encodeRecord(q.record()), create: q})
		return QueueInfo{Name: name, Created: true, q: q}, nil
	}
	if k != "" {
		v.putMetaLocked(k, encodeRecord(q.record()))
	}
	// Every queue is bound to the default exchange by its name; that
	// binding is implicit (see route).
	v.installQueueLocked(q)
	return QueueInfo{Name: name, Created: true}, nil
}

func errLocked(q *Queue) error {
	return errorf(KindResourceLocked, "cannot obtain exclusive access to locked queue '%s' in vhost '%s'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.", q.name, q.vh.name)
}

// persisted reports whether the queue's definition is stored. Exclusive
// queues die with their connection, so they are never stored.
func (q *Queue) persisted() bool { return q.durable && !q.exclusive }

// storesMessage reports whether m is kept in the queue's message log: a
// persistent message in a durable queue, every message in a quorum queue.
func (q *Queue) storesMessage(m *Message) bool {
	return q.persisted() && (m.Props.Persistent() || q.xa.quorum || q.st != nil)
}

func (q *Queue) record() Table {
	r := Table{"id": q.id, "durable": q.durable, "auto_delete": q.autoDelete, "args": q.args}
	if q.exclusive {
		r["exclusive"] = true
	}
	if h := q.Home(); h != "" {
		r["node"] = h
	}
	if ms := q.Members(); len(ms) > 0 {
		r["members"] = stringsToAny(ms)
		r["seed"] = stringsToAny(q.Seed())
	}
	return r
}

func (q *Queue) equivalent(o QueueOpts) error {
	ineq := func(arg string, got, cur any) error {
		return errorf(KindPreconditionFailed, "inequivalent arg '%s' for queue '%s' in vhost '%s': received '%v' but current is '%v'",
			arg, q.name, q.vh.name, got, cur)
	}
	switch {
	case o.Durable != q.durable:
		return ineq("durable", o.Durable, q.durable)
	case o.Exclusive != q.exclusive:
		return errLocked(q)
	case o.AutoDelete != q.autoDelete:
		return ineq("auto_delete", o.AutoDelete, q.autoDelete)
	}
	for _, k := range []string{"x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
		"x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority", "x-single-active-consumer", "x-queue-type",
		"x-max-age", "x-stream-max-segment-size-bytes"} {
		a, aok := o.Args[k]
		b, bok := q.args[k]
		if aok != bok || (aok && !valuesEqual(a, b)) {
			if k == "x-queue-type" && (!aok || !bok) {
				continue // "classic" is the default
			}
			return ineq(k, a, b)
		}
	}
	return nil
}

// Queue finds a queue for use by owner (exclusive queues only by theirs).
func (v *VHost) Queue(name string, owner any) (*Queue, error) {
	v.mu.RLock()
	q := v.queues[name]
	v.mu.RUnlock()
	if q == nil {
		return nil, v.errNoQueue(name)
	}
	if q.exclusive && q.owner != owner {
		return nil, errLocked(q)
	}
	return q, nil
}

// Queues returns all queues.
func (v *VHost) Queues() []*Queue {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*Queue, 0, len(v.queues))
	for _, q := range v.queues {
		out = append(out, q)
	}
	return out
}
