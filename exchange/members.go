package exchange

// QueueHome is a classic queue's home node ("" when standalone).
func (q *Queue) Home() string { return q.coldOrZero().home }

// Members are a quorum queue's Raft group members.
// It takes no lock: a proxy's Locator asks for them under q.mu.
func (q *Queue) Members() []string {
	if c := q.cold.Load(); c != nil {
		if p := c.members.Load(); p != nil {
			return *p
		}
	}
	return nil
}

func (q *Queue) setMembers(ms []string) {
	if len(ms) == 0 && q.cold.Load() == nil {
		return // none, and no cold part to say so in
	}
	ms = append([]string(nil), ms...)
	q.coldState().members.Store(&ms)
}

// Seed are the members a quorum queue was declared with: they bootstrap
// its group; members added later join the running group.
func (q *Queue) Seed() []string { return q.coldOrZero().seed }

// setHome sets q's home node (cold: none made for "").
func (q *Queue) setHome(node string) {
	if node != "" || q.cold.Load() != nil {
		q.coldState().home = node
	}
}

// setSeed sets q's seed members (cold: none made for none).
func (q *Queue) setSeed(ms []string) {
	if ms != nil || q.cold.Load() != nil {
		q.coldState().seed = ms
	}
}

// SetQueueMembers records a quorum queue's new group members (after its
// leader grew or shrank the group) cluster-wide. Its record is
// replicated explicitly (replicate: forget's and rebalance's members
// records are not a topology command), never dropped as unlockTopology
// drops a replicated record in a cluster.
func (v *VHost) SetQueueMembers(name string, id uint64, members []string) error {
	v.metaMu.Lock()
	defer v.metaMu.Unlock()
	v.mu.Lock()
	q := v.queues[name]
	if q == nil || q.id != id {
		v.mu.Unlock()
		return v.errNoQueue(name)
	}
	q.setMembers(members)
	key, rec := v.key("queue", name), encodeRecord(q.record())
	v.mu.Unlock()
	if err := v.b.replicate(key, rec); err != nil {
		return errorf(KindInternal, "store: %v", err)
	}
	return nil
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func anyToStrings(v any) []string {
	as, _ := v.([]any)
	var out []string
	for _, a := range as {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Quorum reports whether q is a quorum queue.
func (q *Queue) Quorum() bool { return q.xa.quorum }

// ID is the queue's id, unique in the cluster while it exists.
func (q *Queue) ID() uint64 { return q.id }
