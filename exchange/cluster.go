package exchange

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// What the core needs from a cluster (issue 7). The core knows nothing of
// Raft or of the network: the node wires these interfaces to cluster/*.
//
//   - Topology writes (MetaOp) go through the node's Store as before; in a
//     cluster that Store replicates the records of replicated prefixes
//     through the metadata Raft group, and every node applies every
//     committed record with Broker.ApplyMeta (idempotent: a record equal to
//     what memory holds changes nothing, so the node that made the change
//     and replays after a restart are no-ops). A queue or exchange
//     declaration is a create (MetaCreator): the new object waits, pending
//     and invisible, until its record is committed and applied; if another
//     node's create of the name came first, that one is adopted.
//   - A queue's messages live in a MessageLog: the node's Store for classic
//     queues, the queue's Raft group for quorum queues on the node that
//     leads it.
//   - A queue whose messages live on another node (a classic queue homed
//     elsewhere, a quorum queue led elsewhere) is a proxy: publishes,
//     consumes, acks and gets go to that node through a Remote.

// MetaOp is one topology record write: a put (Val non-nil), a delete
// (Val nil) or, with Prefix set, the delete of every key starting with Key.
// A put with Create set takes effect only where Key holds no record or
// holds Val already (see MetaCreator); the ops passed to ApplyMeta are
// those that took effect.
type MetaOp struct {
	Key    string
	Val    []byte
	Prefix bool
	Create bool
}

// MessageLog is where a queue keeps its messages. The node's Store is
// one; a quorum queue's Raft group is another.
type MessageLog interface {
	// AppendMessage stores message seq of queue qid; done (may be nil)
	// is called once it is durable (committed by a majority, for a
	// quorum queue) or with an error. data is copied.
	AppendMessage(qid, seq uint64, data []byte, done func(error))
	// DeleteMessage removes message seq (batched, not waited for).
	DeleteMessage(qid, seq uint64)
}

// LogGroup is what a replicated log holds of the messages whose keys share
// their top byte: one priority level.
type LogGroup struct {
	Top    byte
	Count  int64
	Bytes  int64  // an estimate of their records' sizes
	MaxKey uint64 // the largest key ever appended
}

// LogState is what a queue that becomes local learns of its replicated
// log (its FSM on this node): the groups, and how often each message came
// back (delivered and requeued).
type LogState struct {
	Groups  []LogGroup
	Returns func(key uint64) uint32
	// HeldQID, if not 0, is the store id under which the log keeps the
	// messages it holds aside (HoldLog: a quorum queue's waiting retries).
	HeldQID uint64
	// StoredSeparately: the log's FSM writes its messages to the store
	// some time after applying them, and says what is there through
	// Queue.LogStored; LogApplied then only commits.
	StoredSeparately bool
}

// ReturnLog is implemented by a MessageLog that counts deliveries across
// failovers (quorum queues): ReturnMessage records that seq was delivered
// and came back (requeued), for x-delivery-limit.
type ReturnLog interface {
	ReturnMessage(qid, seq uint64)
}

// Remote reaches a queue whose messages live on another node. Publish,
// Consume, StopConsuming, Ack, Nack and Close may be called with the
// proxy queue's lock held and must not block (STYLE 14): they queue work
// and report through callbacks. Get, Purge and Count are called with no
// lock held.
type Remote interface {
	// Publish sends m to the queue. done(nil) once the owning node
	// accepted it (confirmed it, for a persistent message), done(err)
	// if it did not. done is called exactly once, from another goroutine.
	Publish(m *Message, done func(error))
	// Consume starts (or, with prefetch changed, resizes) the upstream
	// consumer: up to prefetch unacked messages are pushed to push, in
	// order, from another goroutine. reset is called when the upstream
	// consumer was lost (node down, leader change) and restarted: every
	// tag pushed before is dead (its message will be redelivered).
	Consume(prefetch int, push func(m *Message, tag uint64, redelivered bool), reset func())
	// StopConsuming cancels the upstream consumer; its unacked messages
	// go back to the queue.
	StopConsuming()
	// Ack and Nack settle a pushed delivery. A tag from before a reset
	// is ignored.
	Ack(tag uint64)
	Nack(tag uint64, requeue bool)
	// Get takes one message (basic.get) from the owning node; tag is for
	// Ack/Nack unless noAck. ok false when the queue is empty.
	Get(noAck bool) (m *Message, tag uint64, redelivered bool, remaining int, ok bool, err error)
	// Purge removes the queue's ready messages on the owning node.
	Purge() (int, error)
	// Count returns the owning node's ready message and consumer counts.
	Count() (messages, consumers int, err error)
	// Close stops everything (the proxy queue is gone or became local).
	Close()
}

// A PacedRemote is a Remote with back-pressure: PublishPaced is Publish
// (it queues m and never blocks, so it is called under the proxy queue's
// lock, which keeps one publisher's messages in order and a hand-back
// exact) and returns, when the way to the owning node is over its budget,
// the wait for room (nil when there is room). The caller runs wait once it
// holds no lock; it ends when room is made, the link closes, or by its
// own deadline. This is how a slow or frozen owner slows the publisher
// (its connection's reader) without holding any core lock.
type PacedRemote interface {
	Remote
	PublishPaced(m *Message, done func(error)) (wait func())
}

// publishRemote publishes m through r (under the proxy queue's lock) and
// returns the wait to run once the lock is released, nil for none.
func publishRemote(r Remote, m *Message, done func(error)) (wait func()) {
	if p, ok := r.(PacedRemote); ok {
		return p.PublishPaced(m, done)
	}
	r.Publish(m, done)
	return nil
}

// A HandBackRemote is a Remote that holds publishes it has not sent yet
// (the queue's owner could not be located: a new quorum group electing
// its first leader, a node restarting). When the queue stops being a
// proxy here, HandBack gives them back in order, so that the queue takes
// them ahead of any later publish instead of failing them: a publish made
// while this node was becoming the queue's leader is not nacked. Every
// Publish after HandBack goes to later. It is called with the proxy
// queue's lock held; the caller then closes the remote.
type HandBackRemote interface {
	Remote
	HandBack(later func(m *Message, done func(error))) []HeldPublish
}

// HeldPublish is a publish a HandBackRemote had not sent: done is its
// Publish callback, still to be called exactly once.
type HeldPublish struct {
	Msg  *Message
	Done func(error)
}

// errRefusedHeld fails a held publish the queue refused (its overflow
// rejects publishes) once it took it back;
// errQueueGone: the queue was deleted first.
var (
	errRefusedHeld = errors.New("exchange: the queue refused the publish")
	errQueueGone   = errors.New("exchange: the queue was deleted")
)

// handBack takes the unsent publishes of old (nil, or a Remote that
// cannot give them back: none).
func handBack(old Remote, later func(m *Message, done func(error))) []HeldPublish {
	if h, ok := old.(HandBackRemote); ok {
		return h.HandBack(later)
	}
	return nil
}

// Cluster is the node's clustering as the core sees it (Broker.SetCluster);
// the core runs standalone without one.
type Cluster interface {
	// NodeName is this node's name: the home of the classic queues
	// declared here.
	NodeName() string
	// QuorumMembers picks the nodes of a new quorum queue's Raft group;
	// size 0 means the default (3, or fewer nodes if the cluster is
	// smaller).
	QuorumMembers(size int) []string
	// Attach is called when a durable queue comes into being on this node
	// (declared here, applied from the cluster, or recovered at start) and
	// whenever its definition changes. The cluster decides where its
	// messages live and calls BecomeProxy or BecomeLocal, now or later.
	// Attach is called with core locks held: it must not block or call
	// into the core synchronously.
	Attach(q *Queue)
	// Detach is called once a durable queue is deleted (the quorum group
	// stops and drops its log).
	Detach(q *Queue)
	// WaitReady waits until a newly declared quorum queue has a leader.
	WaitReady(q *Queue) error
	// Remote reaches queue in vhost on node (a direct reply-to consumer
	// of another node).
	Remote(vhost, queue, node string) Remote
	// StreamRemote reaches clustered stream q, of which this node is not
	// a member, through one of its members (streamremote.go): one per
	// consumer. nil if there is no way.
	StreamRemote(q *Queue) StreamRemote
}

// maxRemoteReplyTo bounds the reply-to proxies a vhost keeps.
const maxRemoteReplyTo = 4096

// remoteReplyTo is the proxy for another node's direct reply-to name
// (amq.rabbitmq.reply-to.<node>.<token>), nil if the name is not one.
func (v *VHost) remoteReplyTo(name string) *Queue {
	rest := strings.TrimPrefix(name, ReplyToQueue+".")
	enc, _, ok := strings.Cut(rest, ".")
	if !ok {
		return nil
	}
	node, err := base64.RawURLEncoding.DecodeString(enc)
	c := v.b.cluster
	if err != nil || string(node) == c.NodeName() {
		return nil
	}
	v.mu.Lock()
	q := v.replyRemote[name]
	if q == nil {
		if len(v.replyRemote) >= maxRemoteReplyTo {
			for k, old := range v.replyRemote {
				delete(v.replyRemote, k)
				defer old.markDeleted()
			}
		}
		q = newQueue(v, name, 0, false, true, true, remoteOwner, nil, queueArgs{messageTTL: -1, maxLen: -1, maxLenBytes: -1, deliveryLimit: -1})
		q.home = string(node)
		if v.replyRemote == nil {
			v.replyRemote = map[string]*Queue{}
		}
		v.replyRemote[name] = q
		q.BecomeProxy(c.Remote(v.name, name, string(node)))
	}
	v.mu.Unlock()
	return q
}

// QueueHome is a classic queue's home node ("" when standalone).
func (q *Queue) Home() string { return q.home }

// Members are a quorum queue's Raft group members.
// It takes no lock: a proxy's Locator asks for them under q.mu.
func (q *Queue) Members() []string {
	if p := q.members.Load(); p != nil {
		return *p
	}
	return nil
}

func (q *Queue) setMembers(ms []string) {
	ms = append([]string(nil), ms...)
	q.members.Store(&ms)
}

// Seed are the members a quorum queue was declared with: they bootstrap
// its group; members added later join the running group.
func (q *Queue) Seed() []string { return q.seed }

// SetQueueMembers records a quorum queue's new group members (after its
// leader grew or shrank the group) cluster-wide.
func (v *VHost) SetQueueMembers(name string, id uint64, members []string) error {
	return v.inTopology(func() error {
		q := v.queues[name]
		if q == nil || q.id != id {
			return v.errNoQueue(name)
		}
		q.setMembers(members)
		v.putMetaLocked(v.key("queue", name), encodeRecord(q.record()))
		return nil
	})
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

// SetCluster makes the broker part of a cluster and attaches every durable
// queue recovered so far. Call it once, before serving clients.
func (b *Broker) SetCluster(c Cluster) {
	b.cluster = c
	self := c.NodeName()
	for _, name := range b.VHosts() {
		v, _ := b.VHost(name)
		for _, q := range v.Queues() {
			if !q.persisted() {
				continue
			}
			if !q.xa.quorum && q.home == "" {
				// Declared before the node was clustered: it lives here.
				q.home = self
			}
			c.Attach(q)
		}
	}
	b.recoverTransient(self)
}

// recoverTransient takes the other nodes' transient topology from the
// store (their non-durable exchanges and queues and the bindings to them)
// and drops this node's own, which did not survive its restart, from the
// cluster.
func (b *Broker) recoverTransient(self string) {
	var ops []MetaOp
	var stale []string
	for _, p := range []string{"texchange/", "tqueue/", "tbinding/"} {
		_ = b.store.LoadMeta(p, func(key string, val []byte) error {
			if p != "tbinding/" {
				if r, err := decodeRecord(val); err == nil && r["node"] == self {
					stale = append(stale, key)
					return nil
				}
			}
			ops = append(ops, MetaOp{Key: key, Val: append([]byte(nil), val...)})
			return nil
		})
	}
	if err := b.ApplyMeta(ops); err != nil {
		b.log.Error("transient topology records not applied", "err", err)
	}
	for _, op := range ops {
		if strings.HasPrefix(op.Key, "tbinding/") && !b.hasBindingRecord(op.Key) {
			stale = append(stale, op.Key) // its queue or exchange was ours
		}
	}
	if len(stale) == 0 {
		return
	}
	b.log.Info("dropping this node's transient topology from before its restart", "records", len(stale))
	go func() {
		for _, k := range stale {
			if err := b.store.DeleteMeta(k); err != nil {
				b.log.Warn("could not drop a stale transient record", "key", k, "err", err)
			}
		}
	}()
}

// hasBindingRecord reports whether the binding a record key names exists.
func (b *Broker) hasBindingRecord(key string) bool {
	v, _, ok := b.splitVHostKey(strings.TrimPrefix(key, "t"), "binding/")
	if !ok {
		return false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.bindingByRecordKey(key) != nil
}

// ForgetNode removes the non-durable exchanges and queues that live on
// node (it died or left: they died with it), cluster-wide. It returns how
// many it removed.
func (b *Broker) ForgetNode(node string) int {
	n := 0
	for _, vn := range b.VHosts() {
		v, ok := b.VHost(vn)
		if !ok {
			continue
		}
		for _, q := range v.Queues() {
			if !q.persisted() && q.home == node && node != "" {
				if _, err := v.deleteQueue(q); err == nil {
					n++
				}
			}
		}
		for _, x := range v.Exchanges() {
			if !x.durable && x.home == node && node != "" {
				_ = v.inTopology(func() error {
					if v.exchanges[x.name] == x {
						n++
						return v.deleteExchangeLocked(x)
					}
					return nil
				})
			}
		}
	}
	return n
}

// replicatedPrefixes are the core's metadata records shared by a cluster:
// the durable topology, and in a cluster the transient one too (t*: a
// non-durable or exclusive object lives on the node that declared it, its
// "node", and the others route to it; those records are dropped when that
// node restarts or dies, see SetCluster and ForgetNode).
var replicatedPrefixes = []string{"vhost/", "exchange/", "queue/", "binding/", "texchange/", "tqueue/", "tbinding/", "policy/", opPolicyPrefix, "streamoff/"}

// Owners for exclusive queues in a cluster: remoteOwner owns the exclusive
// queues of other nodes (no connection of this node matches it); anyOwner
// passed as the owner skips the check (records applied from the cluster).
var (
	remoteOwner = new(byte)
	anyOwner    = new(byte)
)

// exchangeKey is the record key of x: durable ones always, non-durable
// ones in a cluster; "" for none.
func (v *VHost) exchangeKey(x *Exchange) string {
	switch {
	case x.durable:
		return v.key("exchange", x.name)
	case v.b.cluster != nil:
		return v.key("texchange", x.name)
	}
	return ""
}

// queueKey is the record key of q, as exchangeKey. Reply-to pseudo queues
// have none.
func (v *VHost) queueKey(q *Queue) string {
	switch {
	case q.persisted():
		return v.key("queue", q.name)
	case v.b.cluster != nil && v.replyTo[q.name] != q:
		return v.key("tqueue", q.name)
	}
	return ""
}

// durable reports whether a binding survives restarts: a durable source
// and a durable destination.
func (b *binding) durable() bool {
	return b.src.durable && ((b.q != nil && b.q.persisted()) || (b.x != nil && b.x.durable))
}

// recordKeyOf is a binding's record key, as exchangeKey.
func (v *VHost) recordKeyOf(b *binding) string {
	switch {
	case b.durable():
		return v.bindingKey(b)
	case v.b.cluster != nil:
		return "t" + v.bindingKey(b)
	}
	return ""
}

// ReplicatedKey reports whether a core metadata key is cluster-wide (the
// rest, such as the clean-shutdown marker, is the node's own).
func ReplicatedKey(key string) bool {
	for _, p := range replicatedPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
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
	if !q.xa.quorum && (b.cluster == nil || q.home == "" || q.home == b.cluster.NodeName()) {
		// The queue's id is never reused, so its messages can go after
		// the topology lock.
		err = b.store.DropMessages(q.id)
	}
	if b.cluster != nil {
		b.cluster.Detach(q)
	}
	return err
}

// ApplyMeta brings memory in line with metadata records committed by the
// cluster (the node has already written them to its store). It is
// idempotent: a record equal to what memory holds changes nothing, which
// is the case on the node that made the change. It takes no metaMu, so a
// node waiting under metaMu for its own change to commit cannot block it.
//
// A record that does not decode, or that names something this node cannot
// build (an unknown exchange type, invalid queue arguments), changes
// nothing in memory and is reported: the error names every such record
// (ErrBadRecord), the others are applied.
func (b *Broker) ApplyMeta(ops []MetaOp) error {
	var errs []error
	for _, op := range ops {
		if err := b.applyOp(op); err != nil {
			errs = append(errs, &RecordError{Key: op.Key, Err: err})
		}
	}
	return errors.Join(errs...)
}

// ErrBadRecord is what a RecordError wraps: a metadata record this node
// cannot apply.
var ErrBadRecord = errors.New("exchange: metadata record cannot be applied")

// RecordError names a metadata record that could not be applied.
type RecordError struct {
	Key string // the record's key (vhost and name separated by NUL)
	Err error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("exchange: metadata record %q: %v", strings.ReplaceAll(e.Key, "\x00", "/"), e.Err)
}

// Unwrap returns ErrBadRecord and the cause.
func (e *RecordError) Unwrap() []error { return []error{ErrBadRecord, e.Err} }

func (b *Broker) applyOp(op MetaOp) error {
	if op.Prefix {
		// Only DeleteVHost deletes by prefix, after the vhost's own
		// record, whose delete cleared memory (applyVHost).
		return nil
	}
	if isPolicyKey(op.Key) {
		if v, name, ok := b.splitVHostKey(op.Key, "policy/"); ok {
			return v.applyPolicy(name, op.Val)
		}
		return nil
	}
	if strings.HasPrefix(op.Key, opPolicyPrefix) {
		if v, name, ok := b.splitVHostKey(op.Key, opPolicyPrefix); ok {
			return v.applyOperatorPolicy(name, op.Val)
		}
		return nil
	}
	key := op.Key
	transient := strings.HasPrefix(key, "t")
	if transient {
		key = key[1:]
	}
	switch {
	case key == op.Key && strings.HasPrefix(key, "vhost/"):
		return b.applyVHost(strings.TrimPrefix(key, "vhost/"), op.Val)
	case strings.HasPrefix(key, "exchange/"):
		if v, name, ok := b.splitVHostKey(key, "exchange/"); ok {
			return v.applyExchange(name, op.Val, transient)
		}
	case strings.HasPrefix(key, "queue/"):
		if v, name, ok := b.splitVHostKey(key, "queue/"); ok {
			return v.applyQueue(name, op.Val, transient)
		}
	case strings.HasPrefix(key, "binding/"):
		if v, _, ok := b.splitVHostKey(key, "binding/"); ok {
			return v.applyBinding(op.Key, op.Val)
		}
	case strings.HasPrefix(key, "streamoff/"):
		if v, rest, ok := b.splitVHostKey(key, "streamoff/"); ok {
			return v.applyStreamOffset(rest, op.Val) // stream.go
		}
	}
	return nil
}

func (b *Broker) splitVHostKey(key, prefix string) (*VHost, string, bool) {
	vn, rest, ok := splitKey(key, prefix)
	if !ok {
		return nil, "", false
	}
	v, ok := b.VHost(vn)
	return v, rest, ok
}

func vhostMetadata(val []byte) (description string, tags []string) {
	r, err := decodeRecord(val)
	if err != nil {
		return "", nil
	}
	description, _ = r["description"].(string)
	if ts, ok := r["tags"].([]any); ok {
		for _, t := range ts {
			if s, ok := t.(string); ok {
				tags = append(tags, s)
			}
		}
	}
	return description, tags
}

func (b *Broker) applyVHost(name string, val []byte) error {
	if val != nil {
		if _, err := decodeRecord(val); err != nil {
			return err
		}
		d, tags := vhostMetadata(val)
		b.mu.Lock()
		v, ok := b.vhosts[name]
		if !ok {
			v = newVHost(b, name)
			b.vhosts[name] = v
		}
		b.mu.Unlock()
		v.mu.Lock()
		v.description, v.tags = d, tags
		v.mu.Unlock()
		return nil
	}
	b.mu.Lock()
	v, ok := b.vhosts[name]
	delete(b.vhosts, name)
	b.mu.Unlock()
	if !ok {
		return nil
	}
	for _, q := range v.Queues() {
		_ = v.applyQueue(q.name, nil, !q.persisted()) // a delete cannot fail
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
	return nil
}

// exchangeFromRecord rebuilds an exchange; an error for an unknown type.
func exchangeFromRecord(v *VHost, name string, r Table) (*Exchange, error) {
	kind, _ := r["type"].(string)
	args, _ := asTable(r["args"])
	x := &Exchange{vh: v, name: name, kind: kind, durable: true, router: routerFor(kind, args)}
	if x.router == nil {
		return nil, fmt.Errorf("unknown exchange type %q", kind)
	}
	if d, ok := r["durable"].(bool); ok {
		x.durable = d
	}
	x.home, _ = r["node"].(string)
	x.autoDelete, _ = r["auto_delete"].(bool)
	x.internal, _ = r["internal"].(bool)
	x.args = args
	if kind == KindDelayed {
		id, _ := r["delay_id"].(uint64)
		x.delay = newDelayer(v, name, id, x.durable)
	}
	if ae, ok := x.args["alternate-exchange"].(string); ok {
		x.alternate, x.hasAE = ae, true
	}
	return x, nil
}

func (v *VHost) applyExchange(name string, val []byte, transient bool) error {
	v.mu.Lock()
	defer func() {
		v.metaOps = nil // this node's store already has the records
		v.mu.Unlock()
	}()
	cur := v.exchanges[name]
	if val == nil {
		if cur != nil && cur.durable == !transient && !strings.HasPrefix(name, "amq.") && name != "" {
			_ = v.deleteExchangeLocked(cur)
		}
		return nil
	}
	r, err := decodeRecord(val)
	if err != nil {
		return err
	}
	x, err := exchangeFromRecord(v, name, r)
	if err != nil {
		return err
	}
	if cur != nil {
		// The same exchange (its own record coming back, or another
		// node's equal declaration): nothing changes, its bindings stay.
		if bytes.Equal(encodeRecord(cur.record()), val) || (cur.kind == x.kind && cur.durable == x.durable &&
			cur.autoDelete == x.autoDelete && cur.internal == x.internal && valuesEqual(cur.args, x.args)) {
			return nil
		}
		_ = v.deleteExchangeLocked(cur)
	}
	if p := v.pendingX[name]; p != nil && bytes.Equal(encodeRecord(p.record()), val) {
		// This node's own declaration, committed.
		x = p
		delete(v.pendingX, name)
	}
	v.installExchangeLocked(x)
	return nil
}

// queueFromRecord rebuilds a queue. An exclusive queue's record is
// another node's: it belongs to remoteOwner here.
func queueFromRecord(v *VHost, name string, r Table) (*Queue, error) {
	id, _ := r["id"].(uint64)
	args, _ := asTable(r["args"])
	ad, _ := r["auto_delete"].(bool)
	durable := true
	if d, ok := r["durable"].(bool); ok {
		durable = d
	}
	excl, _ := r["exclusive"].(bool)
	var owner any
	if excl {
		owner = remoteOwner
	}
	a, err := parseQueueArgs(args)
	if err != nil {
		return nil, err
	}
	q := newQueue(v, name, id, durable, excl, ad, owner, args, a)
	q.home, _ = r["node"].(string)
	q.setMembers(anyToStrings(r["members"]))
	q.seed = anyToStrings(r["seed"])
	if q.seed == nil {
		q.seed = q.Members()
	}
	return q, nil
}

func (v *VHost) applyQueue(name string, val []byte, transient bool) error {
	var q *Queue
	if val != nil {
		r, err := decodeRecord(val)
		if err != nil {
			return err
		}
		if q, err = queueFromRecord(v, name, r); err != nil {
			return err
		}
	}
	v.mu.Lock()
	cur := v.queues[name]
	if cur != nil && q != nil && cur.id == q.id {
		// The same queue; a quorum queue's group may have changed.
		changed := !slices.Equal(cur.Members(), q.Members())
		if changed {
			cur.setMembers(q.Members())
		}
		if changed && v.b.cluster != nil {
			v.b.cluster.Attach(cur)
		}
		v.mu.Unlock()
		return nil
	}
	if cur != nil && q == nil && cur.persisted() == transient {
		v.mu.Unlock()
		return nil // a record of the other kind: not this queue's
	}
	if cur != nil {
		v.removeQueueLocked(cur)
		for len(cur.bindings) > 0 {
			v.removeBindingLocked(cur.bindings[len(cur.bindings)-1], true)
		}
	}
	if q != nil {
		if p := v.pending[name]; p != nil && p.id == q.id {
			// This node's own declaration, committed: the queue as its
			// declarer made it (an exclusive one keeps its owner).
			q = p
			delete(v.pending, name)
		}
		v.installQueueLocked(q)
	}
	v.metaOps = nil // this node's store already has the records
	v.mu.Unlock()
	if cur != nil {
		cur.markDeleted()
		if err := v.b.dropQueue(cur); err != nil {
			v.b.log.Warn("dropping a deleted queue's messages failed", "queue", name, "err", err)
		}
	}
	return nil
}

func (v *VHost) applyBinding(key string, val []byte) error {
	v.mu.Lock()
	defer func() {
		v.metaOps = nil
		v.mu.Unlock()
	}()
	if val == nil {
		if b := v.bindingByRecordKey(key); b != nil {
			v.removeBindingLocked(b, false)
		}
		return nil
	}
	r, err := decodeRecord(val)
	if err != nil {
		return err
	}
	src, _ := r["source"].(string)
	dst, _ := r["destination"].(string)
	dt, _ := r["destination_type"].(string)
	rk, _ := r["routing_key"].(string)
	args, _ := asTable(r["args"])
	sx, q, dx, err := v.lookupBind(dst, dt == "queue", src, anyOwner)
	if err != nil {
		// Its source or destination is gone (deleted after the binding
		// was committed): the binding went with it, as in recovery.
		return nil
	}
	if sx.findBinding(q, dx, rk, args) != nil {
		return nil
	}
	v.addBindingLocked(&binding{src: sx, q: q, x: dx, key: rk, args: args})
	return nil
}
