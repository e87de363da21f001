package exchange

import (
	"encoding/base64"
	"errors"
	"strings"

	"github.com/trident-broker/trident/exchange/streamlog"
)

// What the core needs from a cluster (issue 7). The core knows nothing of
// Raft or of the network: the node wires these interfaces to cluster/*.
//
//   - Topology changes are commands proposed to the metadata Raft group
//     (TopologyProposer, topocluster.go), never written by the core
//     through its Store in a cluster; every node applies every committed
//     one (Broker.ApplyCommitted), or the records standing for it
//     (Broker.ApplyMeta; idempotent: a record equal to what memory holds
//     changes nothing). A queue or exchange declaration waits, pending and
//     invisible, until it is committed and applied; if another node's
//     declaration of the name came first, that one is adopted.
//   - A queue's messages live in a MessageLog: the node's Store for classic
//     queues, the queue's Raft group for quorum queues on the node that
//     leads it.
//   - A queue whose messages live on another node (a classic queue homed
//     elsewhere, a quorum queue led elsewhere) is a proxy: publishes,
//     consumes, acks and gets go to that node through a Remote.

// MetaOp is one topology record write: a put (Val non-nil), a delete
// (Val nil) or, with Prefix set, the delete of every key starting with Key.
// A put with Create set takes effect only where Key holds no record or
// holds Val already (a declaration's record: RecordsOf); the ops passed
// to ApplyMeta are those that took effect.
type MetaOp struct {
	Key    string
	Val    []byte
	Prefix bool
	Create bool
}

// MessageLog is where a queue keeps its messages. The node's Store is
// one; a quorum queue's or a clustered stream's Raft group is another.
// AppendMessage stores message seq of queue qid; done (may be nil) is
// called once it is durable (committed by a majority, for a Raft group)
// or with an error; data is copied. DeleteMessage removes message seq
// (batched, not waited for). One definition with the stream log's.
type MessageLog = streamlog.MessageLog

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
		q.setHome(string(node))
		if v.replyRemote == nil {
			v.replyRemote = map[string]*Queue{}
		}
		v.replyRemote[name] = q
		q.BecomeProxy(c.Remote(v.name, name, string(node)))
	}
	v.mu.Unlock()
	return q
}

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
			if !q.xa.quorum && q.Home() == "" {
				// Declared before the node was clustered: it lives here.
				q.setHome(self)
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
			if err := b.unreplicate(k); err != nil {
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
// many it removed. In a cluster each delete is proposed, as a command
// naming the object (proposeSelfDelete, proposeSelfDeleteExchange); one
// whose proposal fails goes from this node's memory only.
func (b *Broker) ForgetNode(node string) int {
	n := 0
	for _, vn := range b.VHosts() {
		v, ok := b.VHost(vn)
		if !ok {
			continue
		}
		for _, q := range v.Queues() {
			if !q.persisted() && q.Home() == node && node != "" {
				if v.proposeSelfDelete(q) {
					n++
				} else if _, err := v.deleteQueue(q); err == nil {
					n++
				}
			}
		}
		for _, x := range v.Exchanges() {
			if !x.durable && x.home == node && node != "" {
				if v.proposeSelfDeleteExchange(x) {
					n++
					continue
				}
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

// Owners for exclusive queues in a cluster: remoteOwner owns the exclusive
// queues of other nodes (no connection of this node matches it); anyOwner
// passed as the owner skips the check (records applied from the cluster).
var (
	remoteOwner = new(byte)
	anyOwner    = new(byte)
)
