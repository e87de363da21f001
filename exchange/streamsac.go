package exchange

// Single active consumer on streams (RabbitMQ 3.11's semantics): the
// consumers of one stream that share a name and ask for it form a group;
// one of them is active, the others wait (their cursors deliver nothing
// and read nothing). When the active one goes (cancel, its connection
// closed or killed) the next member in subscription order becomes active
// and starts after the group's stored offset (the named offset of the
// group's name, stream.go), or at its own x-stream-offset if the name has
// none stored.
//
// A member may belong to a partition of a super stream (ConsumeOpts.
// PartitionIndex): partition i's active consumer is then member i mod n
// of its n members in subscription order, so that a group whose members
// consume every partition spreads the partitions evenly over them; a
// member that joins or leaves may move the partition to another member,
// and the one that was active steps down. A stream that is not a
// partition behaves as partition 0: its first member stays active until
// it goes.
//
// Two ways to activate: a consumer whose sink is an ActivationSink (the
// stream protocol's, which asks its client with ConsumerUpdate) is told
// and starts only when its front end calls Consumer.ActivationAnswered
// with the offset its client chose; one that steps down is told too, and
// the next member is activated only when that answer comes. Every other
// consumer (AMQP, STOMP) is started at once, from the stored offset.
//
// Everything here runs under stream.mu.

// ActivationSink is a Sink told when its single-active stream consumer
// is activated (active) or asked to step down (!active). It is called
// with the stream's lock held: it must not block nor call back into the
// core; the front end answers later with Consumer.ActivationAnswered.
type ActivationSink interface {
	Sink
	Activation(c *Consumer, active bool)
}

type sacState uint8

const (
	sacWaiting  sacState = iota // a member that is not active
	sacPending                  // told it is active, waiting for its answer
	sacActive                   // delivering
	sacStepping                 // told to step down, waiting for its answer
)

// sacGroup is the members of one name's group on one stream.
type sacGroup struct {
	name    string
	part    int       // the stream's partition index, -1 none
	members []*cursor // in subscription order
}

// designated is the member that should be active.
func (g *sacGroup) designated() *cursor {
	n := len(g.members)
	if n == 0 {
		return nil
	}
	return g.members[max(g.part, 0)%n]
}

// holder is the member that is active, being activated or stepping down.
func (g *sacGroup) holder() *cursor {
	for _, m := range g.members {
		if m.sac != sacWaiting {
			return m
		}
	}
	return nil
}

// live reports whether cur may read and deliver.
func (cur *cursor) live() bool { return cur.grp == nil || cur.sac == sacActive }

// joinGroupLocked adds cur to its name's group.
func (st *stream) joinGroupLocked(cur *cursor, name string, part int) {
	if st.groups == nil {
		st.groups = map[string]*sacGroup{}
	}
	g := st.groups[name]
	if g == nil {
		g = &sacGroup{name: name, part: part}
		st.groups[name] = g
	}
	cur.grp, cur.sac = g, sacWaiting
	g.members = append(g.members, cur)
	st.rebalanceLocked(g)
}

// leaveGroupLocked removes cur (cancelled) from its group.
func (st *stream) leaveGroupLocked(cur *cursor) {
	g := cur.grp
	if g == nil {
		return
	}
	for i, m := range g.members {
		if m == cur {
			g.members = append(g.members[:i], g.members[i+1:]...)
			break
		}
	}
	cur.sac = sacWaiting
	if len(g.members) == 0 {
		delete(st.groups, g.name)
		return
	}
	st.rebalanceLocked(g)
}

// rebalanceLocked makes the designated member active, stepping the
// current holder down first.
func (st *stream) rebalanceLocked(g *sacGroup) {
	want, h := g.designated(), g.holder()
	if h == want {
		return
	}
	if h != nil {
		if h.sac == sacStepping {
			return // its answer activates the next one
		}
		h.gen++
		h.buf, h.bufNext = nil, h.next
		if as, ok := h.c.sink.(ActivationSink); ok {
			h.sac = sacStepping
			as.Activation(h.c, false)
			return
		}
		h.sac = sacWaiting
	}
	if want == nil {
		return
	}
	if as, ok := want.c.sink.(ActivationSink); ok {
		want.sac = sacPending
		as.Activation(want.c, true)
		return
	}
	want.sac = sacActive
	st.positionLocked(want, nil)
}

// positionLocked starts an activated member at spec, or (nil) after its
// group's stored offset, or at its own x-stream-offset.
func (st *stream) positionLocked(cur *cursor, spec *offsetSpec) {
	var start uint64
	if spec != nil {
		start = st.resolve(*spec)
	} else if no, ok := st.offsets[cur.grp.name]; ok {
		first, _ := st.log.Bounds()
		start = max(no.off+1, first)
	} else {
		start = st.resolve(cur.spec)
	}
	cur.gen++
	cur.next, cur.bufNext, cur.buf = start, start, nil
	cur.signal()
}

// ActivationAnswered is the front end's answer to an Activation: for an
// activation, offset (an x-stream-offset value; nil or a bad one: after
// the group's stored offset, else the consumer's own) is where the
// consumer starts; for a step-down, the group's next member is activated.
// An answer that comes too late (the consumer was cancelled, or is no
// longer asked) does nothing.
func (c *Consumer) ActivationAnswered(offset any) {
	st := c.q.st
	if st == nil {
		return
	}
	var spec *offsetSpec
	if offset != nil {
		if s, _, err := parseOffsetSpec(offset, nowNano()); err == nil {
			spec = &s
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, cur := range st.cursors {
		if cur.c == c && cur.up != nil && cur.up.held {
			st.answeredUpstreamLocked(cur, spec)
		}
		if cur.c != c || cur.grp == nil {
			continue
		}
		switch cur.sac {
		case sacPending:
			cur.sac = sacActive
			st.positionLocked(cur, spec)
		case sacStepping:
			cur.sac = sacWaiting
			st.rebalanceLocked(cur.grp)
		}
	}
}

// StreamHomer is a Cluster that names a clustered stream's home for its
// single-active groups: the first of its members (in their recorded
// order) that is alive, where its single-active members' upstream
// consumers go (StreamHomeRemote).
type StreamHomer interface {
	StreamHome(q *Queue) string
	// StreamHomeRemote is a consumer's way to q's home: the node
	// StreamHome names when it connects, this node included.
	StreamHomeRemote(q *Queue) StreamRemote
}

// upstreamRemote is a new upstream consumer's way to the stream: a
// single-active member's (group) goes to the stream's home, whichever
// member that is when it connects, this node included, so that after the
// home's death the members on every node join the group on the next home
// (a member on that node through itself) and the group forms once; any
// other consumer's goes to the first other member alive.
func (st *stream) upstreamRemote(group string) StreamRemote {
	c := st.q.vh.b.cluster
	if h, ok := c.(StreamHomer); ok && group != "" {
		return h.StreamHomeRemote(st.q)
	}
	return c.StreamRemote(st.q)
}

// groupElsewhere reports whether a new member of group of a clustered
// stream joins it on the stream's home, another node, through an
// upstream consumer (streamremote.go), so that one name has one group in
// the cluster. A consumer that came from another node (with
// consumerEpochArg) joins here.
//
// An upstream member is active when its upstream consumer is: it is
// pushed messages only then. So an ActivationSink member on another node
// than the home is told it is active at the first push, which waits for
// its answer; an answer with an offset beyond what was pushed drops what
// comes before it, one before it cannot go back (the home starts an
// activated member after the group's stored offset). A stream that is a
// partition moves members' activity on the home, which an upstream member
// does not hear of: its front end is not told of a step-down.
func (st *stream) groupElsewhere(o ConsumeOpts, group string) bool {
	if group == "" || len(st.q.Members()) == 0 {
		return false
	}
	if _, fromPeer := o.Args[consumerEpochArg]; fromPeer {
		return false
	}
	c := st.q.vh.b.cluster
	h, ok := c.(StreamHomer)
	if !ok {
		return false
	}
	home := h.StreamHome(st.q)
	return home != "" && home != c.NodeName()
}

// sacGroupArg carries a stream-protocol member's group to its upstream
// consumer on the stream's home (a member whose acks store no offset).
const sacGroupArg = "x-stream-sac-group"

// joinUpstream records in u that the consumer is a member of group.
func (u *upstream) joinUpstream(o ConsumeOpts, group string) {
	if group == "" {
		return
	}
	u.sac = true
	if u.name == "" {
		u.group = group
	}
	_, u.ask = o.Sink.(ActivationSink)
}

// toldUpstreamLocked tells an upstream ActivationSink member it is
// active at its first push, and holds the pushes until it answered.
func (st *stream) toldUpstreamLocked(cur *cursor) {
	u := cur.up
	if !u.ask || u.told {
		return
	}
	u.told, u.held = true, true
	cur.c.sink.(ActivationSink).Activation(cur.c, true)
}

// answeredUpstreamLocked lets an upstream member's pushes out once it
// answered; what was pushed before the offset it answered is dropped.
func (st *stream) answeredUpstreamLocked(cur *cursor, spec *offsetSpec) {
	u := cur.up
	u.held = false
	if spec != nil && spec.kind == offsetAt {
		for len(u.pend) > 0 && u.pend[0].off < spec.n {
			if tag, ok := u.tags[u.pend[0].off]; ok {
				delete(u.tags, u.pend[0].off)
				u.r.Ack(tag)
			}
			u.pend[0] = upMsg{}
			u.pend = u.pend[1:]
		}
	}
	st.deliverUpstreamLocked(cur)
}

// sacArgs reads a consumer's single-active group: ConsumeOpts.SingleActive
// with GroupName (the stream protocol), or x-single-active-consumer true
// with x-stream-consumer-name among its arguments (AMQP, STOMP).
func (st *stream) sacArgs(o ConsumeOpts, name string) (string, error) {
	q := st.q
	if o.SingleActive {
		if o.GroupName == "" || len(o.GroupName) > 255 {
			return "", errorf(KindPreconditionFailed, "single active consumer on queue '%s' in vhost '%s' needs a name of at most 255 bytes", q.name, q.vh.name)
		}
		return o.GroupName, nil
	}
	if g, ok := o.Args[sacGroupArg].(string); ok && g != "" && len(g) <= 255 {
		return g, nil // a stream-protocol member on another node
	}
	v, ok := o.Args["x-single-active-consumer"]
	if !ok {
		return "", nil
	}
	on, isBool := v.(bool)
	if !isBool {
		return "", errorf(KindPreconditionFailed, "invalid arg 'x-single-active-consumer' for queue '%s' in vhost '%s': %v is not a boolean", q.name, q.vh.name, v)
	}
	if !on {
		return "", nil
	}
	if name == "" {
		return "", errorf(KindPreconditionFailed, "x-single-active-consumer on stream '%s' in vhost '%s' needs x-stream-consumer-name", q.name, q.vh.name)
	}
	return name, nil
}

// ackedLocked follows cur's ack of off: a named consumer's highest ack is
// its name's offset (dirty, for the next flush), and whether it moved it.
// A consumer that went back (an explicit x-stream-offset) moves its name's
// offset back: it is a later consumer, with a later epoch. One consumer's
// offset only rises, though, whichever cursor acked it: a non-member's
// consumer reads through one member, then another after a failover, each
// with a cursor of the consumer's epoch, and the late acks of what the
// first one delivered must not take the name back behind what the second
// stored (the metadata group would leave such a record out: this node
// would keep an offset no other node has).
func (st *stream) ackedLocked(cur *cursor, off int64) bool {
	if cur.name == "" || off <= cur.acked || !st.mayStoreLocked(cur, off) {
		return false
	}
	cur.acked = off
	no := namedOffset{off: uint64(off), epoch: cur.epoch}
	have, ok := st.offsets[cur.name]
	if ok && (have == no || have.epoch == no.epoch && have.off > no.off) {
		return false
	}
	st.offsets[cur.name] = no
	st.dirty[cur.name] = true
	return true
}

// mayStoreLocked reports whether an ack of off by cur moves its name's
// stored offset: a group member that is not active (it stepped down, its
// acks of what it had were late) only moves it forward, so that it never
// takes the group back behind its active member.
func (st *stream) mayStoreLocked(cur *cursor, off int64) bool {
	if cur.grp == nil || cur.sac == sacActive {
		return true
	}
	no, ok := st.offsets[cur.name]
	return !ok || uint64(off) > no.off
}
