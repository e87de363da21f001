package exchange

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange/event"
)

// ReplyToQueue is the pseudo-queue of RabbitMQ's direct reply-to.
const ReplyToQueue = "amq.rabbitmq.reply-to"

// VHost is a virtual host: a namespace of exchanges, queues and bindings.
type VHost struct {
	b    *Broker
	name string

	// metaMu serialises topology changes with their store writes; it is
	// taken before mu. mu guards the topology in memory and is held only
	// while it changes, never across a store write, so publishers (which
	// read under mu) never wait for an fsync.
	metaMu  sync.Mutex
	metaOps []metaOp // store writes collected under mu
	// metaActor is the user the topology change in progress acts for
	// (under metaMu): the declarations it proposes carry it.
	metaActor string
	// description and tags are management metadata (under mu).
	description string
	tags        []string

	mu        topoMu // its Unlock drops the routing table (routetable.go)
	exchanges map[string]*Exchange
	queues    map[string]*Queue
	owned     map[any]map[*Queue]struct{} // exclusive queues in queues, by owner (CloseOwner)
	replyTo   map[string]*Queue
	// replyRemote are proxies to other nodes' direct reply-to consumers.
	replyRemote map[string]*Queue
	// pending are queues declared on this node whose records are being
	// created through the cluster (see declareQueueLocked): not routable
	// nor visible until committed, when applyQueue installs them as they
	// are (their owner, their id) unless another node's create of the
	// name was committed first.
	pending  map[string]*Queue
	pendingX map[string]*Exchange // the same for exchanges
	policies map[string]*Policy   // policy.go
	// opPolicies are the operator policies (operator_policy.go).
	opPolicies map[string]*Policy

	// anyExpiring is set once any message with a per-message expiration
	// was published, so that queues without x-message-ttl check expiry.
	anyExpiring atomic.Bool

	counters msgCounters // atomics, no lock; totals of its queues and exchanges

	// lat are the latency histograms by protocol (latency.go), made on
	// first use.
	lat [numProtocols]atomic.Pointer[latencySet]

	// The vhost's retries (retry.go), created on first use.
	retryMu sync.Mutex
	retryD  atomic.Pointer[delayer]
}

func newVHost(b *Broker, name string) *VHost {
	v := &VHost{b: b, name: name, exchanges: map[string]*Exchange{}, queues: map[string]*Queue{}, replyTo: map[string]*Queue{},
		policies: map[string]*Policy{}, opPolicies: map[string]*Policy{}}
	for _, p := range predeclared {
		x := &Exchange{vh: v, name: p.name, kind: p.kind, durable: true, router: newRouter(p.kind)}
		v.exchanges[p.name] = x
	}
	if b.eventVHost == name && name != "" {
		v.exchanges[EventExchange] = v.newEventExchange()
	}
	return v
}

// Name is the vhost's name.
func (v *VHost) Name() string { return v.name }

// Metadata returns the vhost's description and tags.
func (v *VHost) Metadata() (description string, tags []string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.description, append([]string(nil), v.tags...)
}

func (v *VHost) key(kind, name string) string { return kind + "/" + v.name + "\x00" + name }

func (v *VHost) errNoQueue(name string) error {
	return errorf(KindNotFound, "no queue '%s' in vhost '%s'", name, v.name)
}

func (v *VHost) errNoExchange(name string) error {
	return errorf(KindNotFound, "no exchange '%s' in vhost '%s'", name, v.name)
}

// metaOp is a metadata write collected under mu.
type metaOp struct {
	key     string
	val     []byte    // nil: delete
	create  *Queue    // a create of this pending queue's record (MetaCreator)
	createX *Exchange // likewise for a pending exchange
}

// lockTopology starts a topology change.
func (v *VHost) lockTopology() {
	v.metaMu.Lock()
	v.mu.Lock()
}

// unlockTopology ends a topology change: it releases mu, then writes the
// collected metadata to the store in order, then releases metaMu.
func (v *VHost) unlockTopology() error {
	ops := v.metaOps
	v.metaOps = nil
	v.mu.Unlock()
	defer v.metaMu.Unlock()
	defer func() { v.metaActor = "" }()
	if err := v.writeMetaBatch(ops); err != errNoBatch {
		if err != nil {
			return errorf(KindInternal, "store: %v", err)
		}
		return nil
	}
	var first error
	for _, op := range ops {
		var err error
		if p, on := v.commandsOn(); on && (op.create != nil || op.createX != nil) {
			// The cluster runs commands: the declaration is proposed, and
			// its apply here installs the pending object if it won
			// (ApplyCommitted); settling drops it otherwise.
			err = v.propose(p, v.createCommand(op, v.metaActor))
			if op.create != nil {
				v.settlePending(op.create, false)
			} else {
				v.settlePendingExchange(op.createX, false)
			}
		} else if op.create != nil || op.createX != nil {
			var created bool
			created, err = v.b.store.(MetaCreator).CreateMeta(op.key, op.val)
			if op.create != nil {
				v.settlePending(op.create, created && err == nil)
			} else {
				v.settlePendingExchange(op.createX, created && err == nil)
			}
		} else if op.val == nil {
			err = v.b.store.DeleteMeta(op.key)
		} else {
			err = v.b.store.PutMeta(op.key, op.val)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return errorf(KindInternal, "store: %v", first)
	}
	return nil
}

// errNoBatch: the records cannot go in one batch (writeMetaBatch).
var errNoBatch = errors.New("exchange: no batch")

// writeMetaBatch writes ops in one store batch (MetaBatcher), or returns
// errNoBatch when it cannot: a store without batches, or a create among
// them (a cluster's, decided by the metadata log).
func (v *VHost) writeMetaBatch(ops []metaOp) error {
	bs, ok := v.b.store.(MetaBatcher)
	if !ok || len(ops) < 2 {
		return errNoBatch
	}
	keys := make([]string, len(ops))
	vals := make([][]byte, len(ops))
	for i, op := range ops {
		if op.create != nil || op.createX != nil {
			return errNoBatch
		}
		keys[i], vals[i] = op.key, op.val
	}
	return bs.WriteMetaBatch(keys, vals)
}

func (v *VHost) putMetaLocked(key string, val []byte) {
	v.metaOps = append(v.metaOps, metaOp{key: key, val: val})
}

func (v *VHost) deleteMetaLocked(key string) {
	v.metaOps = append(v.metaOps, metaOp{key: key})
}

// inTopology runs f as one topology change.
func (v *VHost) inTopology(f func() error) error {
	v.lockTopology()
	err := f()
	if serr := v.unlockTopology(); err == nil {
		err = serr
	}
	return err
}

// --- exchanges ---

// DeclareExchange declares (or, passively, checks) an exchange.
func (v *VHost) DeclareExchange(name, kind string, o ExchangeOpts) error {
	if o.Passive {
		if _, ok := v.Exchange(name); !ok {
			return v.errNoExchange(name)
		}
		return nil
	}
	_, err := v.Apply(TopologyCommand{Op: TopoDeclareExchange, Name: name, Type: kind, Durable: o.Durable,
		AutoDelete: o.AutoDelete, Internal: o.Internal, Args: o.Args})
	return err
}

// applyDeclareExchange applies an exchange.declare command.
func (v *VHost) applyDeclareExchange(c TopologyCommand) error {
	name, kind, o := c.Name, c.Type, c.exchangeOpts()
	if err := checkName("exchange", name); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		var pending *Exchange
		err := v.inTopology(func() error {
			var err error
			v.metaActor = c.Actor
			pending, err = v.declareExchangeLocked(name, kind, o)
			return err
		})
		if err != nil || pending == nil {
			return err
		}
		// A clustered declaration (see declareExchangeLocked): the
		// exchange the name holds now is this one, or another node's
		// that was created first.
		v.mu.RLock()
		cur := v.exchanges[name]
		v.mu.RUnlock()
		switch {
		case cur == pending:
			return nil
		case cur != nil:
			return cur.equivalent(kind, o)
		case attempt == 2:
			return errorf(KindInternal, "exchange '%s' in vhost '%s' was deleted while being declared", name, v.name)
		}
	}
}

// declareExchangeLocked declares an exchange. In a cluster it returns the
// new exchange pending: as a queue's (declareQueueLocked), its record is a
// create, and the exchange exists once that is committed, unless another
// node's create of the name came first.
func (v *VHost) declareExchangeLocked(name, kind string, o ExchangeOpts) (*Exchange, error) {
	x := v.exchanges[name]
	// As RabbitMQ: the type is checked first, even for an existing exchange.
	if !validKind(kind) || !v.hashTypesEnabled(kind) {
		return nil, errorf(KindCommandInvalid, "unknown exchange type '%s'", kind)
	}
	if name == "" {
		return nil, errorf(KindAccessRefused, "operation not permitted on the default exchange")
	}
	if x != nil {
		return nil, x.equivalent(kind, o)
	}
	if strings.HasPrefix(name, "amq.") {
		return nil, errorf(KindAccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", name)
	}
	if kind == KindDelayed {
		if _, err := delayedTypeOf(o.Args); err != nil {
			return nil, err
		}
	}
	if err := v.validateHashArgs(kind, o.Args); err != nil {
		return nil, err
	}
	x = &Exchange{vh: v, name: name, kind: kind, durable: o.Durable, autoDelete: o.AutoDelete,
		internal: o.Internal, args: o.Args, router: routerFor(kind, o.Args)}
	if kind == KindDelayed {
		x.delay = newDelayer(v, name, v.b.nextQueueID(), o.Durable)
		v.putMetaLocked(x.delay.registryKey(), encodeRecord(Table{"vhost": v.name, "exchange": name}))
	}
	if ae, ok := o.Args["alternate-exchange"].(string); ok {
		x.alternate, x.hasAE = ae, true
	}
	if c := v.b.cluster; c != nil && !x.durable {
		x.home = c.NodeName()
	}
	k := v.exchangeKey(x)
	if k != "" && v.sharedMeta() {
		if v.pendingX == nil {
			v.pendingX = map[string]*Exchange{}
		}
		v.pendingX[name] = x
		v.metaOps = append(v.metaOps, metaOp{key: k, val: encodeRecord(x.record()), createX: x})
		return x, nil
	}
	if k != "" {
		v.putMetaLocked(k, encodeRecord(x.record()))
	}
	v.installExchangeLocked(x)
	return nil, nil
}

// installExchangeLocked makes x the vhost's exchange of its name. Called
// with v.mu held.
func (v *VHost) installExchangeLocked(x *Exchange) {
	v.exchanges[x.name] = x
	if v.b.recovering {
		return // policies and delayers start once recovery is done
	}
	v.initExchangePolicyLocked(x)
	if x.delay != nil {
		x.delay.start()
	}
}

// settlePendingExchange ends x's pending create, as settlePending.
func (v *VHost) settlePendingExchange(x *Exchange, created bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pendingX[x.name] == x {
		delete(v.pendingX, x.name)
	}
	if created && v.exchanges[x.name] == nil {
		v.installExchangeLocked(x)
	}
}

func (x *Exchange) record() Table {
	r := Table{"type": x.kind, "durable": x.durable, "auto_delete": x.autoDelete,
		"internal": x.internal, "args": x.args}
	if x.home != "" {
		r["node"] = x.home
	}
	if x.delay != nil {
		r["delay_id"] = x.delay.id
	}
	return r
}

func (x *Exchange) equivalent(kind string, o ExchangeOpts) error {
	ineq := func(arg string, got, cur any) error {
		return errorf(KindPreconditionFailed, "inequivalent arg '%s' for exchange '%s' in vhost '%s': received '%v' but current is '%v'",
			arg, x.name, x.vh.name, got, cur)
	}
	switch {
	case kind != x.kind:
		return ineq("type", kind, x.kind)
	case o.Durable != x.durable:
		return ineq("durable", o.Durable, x.durable)
	case o.AutoDelete != x.autoDelete:
		return ineq("auto_delete", o.AutoDelete, x.autoDelete)
	case o.Internal != x.internal:
		return ineq("internal", o.Internal, x.internal)
	}
	if !tablesEqual(stripXArgs(o.Args, "alternate-exchange"), stripXArgs(x.args, "alternate-exchange")) {
		return ineq("alternate-exchange", o.Args["alternate-exchange"], x.args["alternate-exchange"])
	}
	if x.kind == KindDelayed && !tablesEqual(stripXArgs(o.Args, "x-delayed-type"), stripXArgs(x.args, "x-delayed-type")) {
		return ineq("x-delayed-type", o.Args["x-delayed-type"], x.args["x-delayed-type"])
	}
	return nil
}

func stripXArgs(t Table, keep ...string) Table {
	out := Table{}
	for _, k := range keep {
		if v, ok := t[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Exchange returns the named exchange, if it exists.
func (v *VHost) Exchange(name string) (*Exchange, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	x, ok := v.exchanges[name]
	return x, ok
}

// Exchanges returns all exchanges.
func (v *VHost) Exchanges() []*Exchange {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*Exchange, 0, len(v.exchanges))
	for _, x := range v.exchanges {
		out = append(out, x)
	}
	return out
}

// DeleteExchange deletes an exchange and its bindings. Deleting one that
// does not exist succeeds, as in RabbitMQ.
func (v *VHost) DeleteExchange(name string, ifUnused bool) error {
	_, err := v.Apply(TopologyCommand{Op: TopoDeleteExchange, Name: name, IfUnused: ifUnused})
	return err
}

// applyDeleteExchange applies an exchange.delete command.
func (v *VHost) applyDeleteExchange(c TopologyCommand) error {
	name, ifUnused := c.Name, c.IfUnused
	v.lockTopology()
	keys, err := v.deleteExchangeChecked(name, ifUnused)
	if keys == nil {
		if serr := v.unlockTopology(); err == nil {
			err = serr
		}
		return err
	}
	v.mu.Unlock() // no record was collected: metaMu stays held
	return v.deleteExchangeCommitted(keys)
}

// deleteExchangeCommitted deletes a clustered exchange by its record
// first (keys[0]): it goes when the delete is committed and applied, here
// as on every node (applyExchange: with its bindings and the auto-delete
// sources they leave empty); one that does not commit leaves everything
// as it was. The other records (its bindings', those sources') are
// deleted after it, stopping at a failure (what is left names an exchange
// that is gone and is dropped as recovery drops such bindings).
// It is called with metaMu held and releases it.
func (v *VHost) deleteExchangeCommitted(keys []string) error {
	defer v.metaMu.Unlock()
	if err := v.b.store.DeleteMeta(keys[0]); err != nil {
		return errorf(KindInternal, "store: %v", err)
	}
	for _, k := range keys[1:] {
		if err := v.b.store.DeleteMeta(k); err != nil {
			v.b.log.Warn("deleting a deleted exchange's binding record failed", "vhost", v.name, "record", k, "err", err)
			break
		}
	}
	return nil
}

// deleteExchangeChecked deletes exchange name; in a cluster (its record
// shared) it changes nothing and returns the records to delete instead
// (deleteExchangeCommitted).
func (v *VHost) deleteExchangeChecked(name string, ifUnused bool) ([]string, error) {
	if name == "" || strings.HasPrefix(name, "amq.") {
		if name == "" {
			return nil, errorf(KindAccessRefused, "operation not permitted on the default exchange")
		}
		return nil, errorf(KindAccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", name, v.name)
	}
	x := v.exchanges[name]
	if x == nil {
		return nil, nil
	}
	if ifUnused && len(x.bindings) > 0 {
		return nil, errorf(KindPreconditionFailed, "exchange '%s' in vhost '%s' in use", name, v.name)
	}
	if k := v.exchangeKey(x); k != "" && v.sharedMeta() {
		gone := append(append([]*binding(nil), x.bindings...), x.inbound...)
		return append([]string{k}, v.recordsGoneWith(gone, x)...), nil
	}
	return nil, v.deleteExchangeLocked(x)
}

// recordsGoneWith lists the records that go with the bindings gone (to be
// removed together): theirs, and those of the auto-delete sources they
// leave without bindings, but for except (whose record the caller deletes).
func (v *VHost) recordsGoneWith(gone []*binding, except *Exchange) []string {
	in := make(map[*binding]bool, len(gone))
	for _, b := range gone {
		in[b] = true
	}
	var keys []string
	seen := map[*Exchange]bool{}
	for _, b := range gone {
		if k := v.recordKeyOf(b); k != "" {
			keys = append(keys, k)
		}
		sx := b.src
		if sx == except || seen[sx] || !sx.autoDelete || v.exchanges[sx.name] != sx {
			continue
		}
		seen[sx] = true
		emptied := true
		for _, o := range sx.bindings {
			if !in[o] {
				emptied = false
				break
			}
		}
		if k := v.exchangeKey(sx); emptied && k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

func (v *VHost) deleteExchangeLocked(x *Exchange) error {
	for len(x.bindings) > 0 {
		v.removeBindingLocked(x.bindings[len(x.bindings)-1], false)
	}
	// Removing the bindings into x may leave an auto-delete source
	// exchange without bindings: it goes too, as in RabbitMQ.
	for len(x.inbound) > 0 {
		v.removeBindingLocked(x.inbound[len(x.inbound)-1], true)
	}
	delete(v.exchanges, x.name)
	if k := v.exchangeKey(x); k != "" {
		v.deleteMetaLocked(k)
	}
	if x.delay != nil {
		x.delay.stop(true)
	}
	return nil
}

// --- queues ---

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

// sharedMeta reports whether queue records are created through the
// cluster (MetaCreator) rather than put by this node alone.
func (v *VHost) sharedMeta() bool {
	if v.b.cluster == nil {
		return false
	}
	_, ok := v.b.store.(MetaCreator)
	return ok
}

// settlePending ends q's pending create: created says its record is the
// one the name holds. The apply of the committed record installed q
// already, unless the write was this node's alone (before the cluster's
// metadata group is attached): then it is installed here. A q that lost
// is dropped (it was never visible).
func (v *VHost) settlePending(q *Queue, created bool) {
	v.mu.Lock()
	if v.pending[q.name] == q {
		delete(v.pending, q.name)
	}
	installed := v.queues[q.name] == q
	if created && !installed && v.queues[q.name] == nil {
		v.installQueueLocked(q)
		installed = true
	}
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
	if c := v.b.cluster; c != nil && (q.persisted() || q.home != c.NodeName()) {
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
	if v.sharedMeta() {
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
			q.seed = q.Members()
		} else {
			q.home = c.NodeName()
		}
	}
	k := v.queueKey(q)
	if k != "" && v.sharedMeta() {
		// In a cluster two nodes may declare the name at once. The record
		// is a create, decided in the metadata log's order: the queue
		// comes into being when it is committed (applyQueue installs q),
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
	if q.home != "" {
		r["node"] = q.home
	}
	if ms := q.Members(); len(ms) > 0 {
		r["members"] = stringsToAny(ms)
		r["seed"] = stringsToAny(q.seed)
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

// DeleteQueue deletes a queue and returns how many messages it held.
// Deleting a queue that does not exist succeeds with 0, as in RabbitMQ.
func (v *VHost) DeleteQueue(name string, ifUnused, ifEmpty bool, owner any) (int, error) {
	r, err := v.Apply(TopologyCommand{Op: TopoDeleteQueue, Name: name, IfUnused: ifUnused, IfEmpty: ifEmpty, Owner: owner})
	return r.Count, err
}

// applyDeleteQueue applies a queue.delete command.
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
	if k := v.queueKey(q); k != "" && v.sharedMeta() {
		return v.deleteQueueCommitted(q, k)
	}
	return v.deleteQueue(q)
}

// deleteQueueCommitted deletes a clustered queue by its record first: the
// queue goes when the delete is committed and applied, here as on every
// node (applyQueue, before the write returns: it removes the queue, its
// bindings and the auto-delete exchanges they leave empty); a delete that
// does not commit (no quorum) leaves the queue as it was, everywhere.
// The records of the bindings and of those exchanges are deleted after
// it (one left behind by a failure there names a queue that is gone, and
// is dropped as recovery drops such bindings). Deletes the broker makes
// itself (an exclusive queue's owner closing, auto-delete, x-expires) go
// from memory first (deleteQueue): the queue must go whatever the cluster.
func (v *VHost) deleteQueueCommitted(q *Queue, key string) (int, error) {
	n, _, _ := q.Stats()
	v.lockTopology()
	if v.queues[q.name] != q {
		_ = v.unlockTopology()
		return 0, nil
	}
	keys := v.recordsGoneWith(q.bindings, nil)
	v.mu.Unlock()
	err := v.b.store.DeleteMeta(key)
	for i := 0; err == nil && i < len(keys); i++ {
		if kerr := v.b.store.DeleteMeta(keys[i]); kerr != nil {
			v.b.log.Warn("deleting a deleted queue's binding record failed", "vhost", v.name, "queue", q.name, "record", keys[i], "err", kerr)
			break
		}
	}
	v.metaMu.Unlock()
	if err != nil {
		return 0, errorf(KindInternal, "store: %v", err)
	}
	v.mu.RLock()
	still := v.queues[q.name] == q
	v.mu.RUnlock()
	if still {
		// The record was this node's alone (not applied through the
		// cluster): the queue goes from memory as a standalone one.
		return v.deleteQueue(q)
	}
	return n, nil
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
	v.b.churn.qDeleted.Add(1)
	if m := v.owned[q.owner]; m != nil {
		delete(m, q)
		if len(m) == 0 {
			delete(v.owned, q.owner)
		}
	}
}

// deleteQueue removes q from the vhost, cancels its consumers and drops
// its stored messages.
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

// CloseOwner deletes the exclusive queues of a closing connection.
func (v *VHost) CloseOwner(owner any) {
	v.mu.RLock()
	mine := make([]*Queue, 0, len(v.owned[owner]))
	for q := range v.owned[owner] {
		mine = append(mine, q)
	}
	v.mu.RUnlock()
	for _, q := range mine {
		v.deleteQueueBySelf(q)
	}
}

// Consume adds a consumer to a queue.
func (v *VHost) Consume(queue string, o ConsumeOpts) (*Consumer, error) {
	q, err := v.Queue(queue, o.Owner)
	if err != nil {
		return nil, err
	}
	c, err := q.addConsumer(o)
	if err == nil {
		q.reportConsumer(event.ConsumerCreated, c)
	}
	return c, err
}

// ConsumeReplyTo starts a direct reply-to consumer (basic.consume on
// amq.rabbitmq.reply-to). The consumer must be no-ack. The returned name is
// what the front end writes into the reply-to property of messages the
// same channel publishes with reply-to amq.rabbitmq.reply-to.
func (v *VHost) ConsumeReplyTo(o ConsumeOpts) (*Consumer, string, error) {
	if !o.NoAck {
		return nil, "", errorf(KindPreconditionFailed, "reply consumer cannot acknowledge")
	}
	name := ReplyToQueue + "." + randomToken()
	if c := v.b.cluster; c != nil {
		// The node is in the name, so that a reply published on another
		// node finds its way here (as RabbitMQ does).
		name = ReplyToQueue + "." + base64.RawURLEncoding.EncodeToString([]byte(c.NodeName())) + "." + randomToken()
	}
	q := newQueue(v, name, 0, false, true, true, o.Owner, nil, queueArgs{messageTTL: -1, maxLen: -1, maxLenBytes: -1, memLen: -1, memBytes: -1})
	v.mu.Lock()
	v.replyTo[name] = q
	v.mu.Unlock()
	c, err := q.addConsumer(o)
	return c, name, err
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// --- bindings ---

// BindQueue binds queue to exchange with key and args.
func (v *VHost) BindQueue(queue, exchange, key string, args Table, owner any) error {
	return v.bind(queue, true, exchange, key, args, owner)
}

// UnbindQueue removes a queue binding. Removing one that does not exist
// succeeds, as in RabbitMQ.
func (v *VHost) UnbindQueue(queue, exchange, key string, args Table, owner any) error {
	return v.unbind(queue, true, exchange, key, args, owner)
}

// BindExchange binds destination exchange dst to source src.
func (v *VHost) BindExchange(dst, src, key string, args Table) error {
	return v.bind(dst, false, src, key, args, nil)
}

// UnbindExchange removes an exchange-to-exchange binding.
func (v *VHost) UnbindExchange(dst, src, key string, args Table) error {
	return v.unbind(dst, false, src, key, args, nil)
}

func (v *VHost) lookupBind(dst string, toQueue bool, src string, owner any) (*Exchange, *Queue, *Exchange, error) {
	if src == "" || (dst == "" && !toQueue) {
		return nil, nil, nil, errorf(KindAccessRefused, "operation not permitted on the default exchange")
	}
	sx := v.exchanges[src]
	if sx == nil {
		return nil, nil, nil, v.errNoExchange(src)
	}
	if toQueue {
		q := v.queues[dst]
		if q == nil {
			return nil, nil, nil, v.errNoQueue(dst)
		}
		if q.exclusive && q.owner != owner && owner != anyOwner {
			return nil, nil, nil, errLocked(q)
		}
		return sx, q, nil, nil
	}
	dx := v.exchanges[dst]
	if dx == nil {
		return nil, nil, nil, v.errNoExchange(dst)
	}
	return sx, nil, dx, nil
}

func (v *VHost) bind(dst string, toQueue bool, src, key string, args Table, owner any) error {
	_, err := v.Apply(TopologyCommand{Op: TopoBind, Name: dst, ToQueue: toQueue, Source: src, Key: key, Args: args, Owner: owner})
	return err
}

func (v *VHost) bindLocked(dst string, toQueue bool, src, key string, args Table, owner any) error {
	sx, q, dx, err := v.lookupBind(dst, toQueue, src, owner)
	if err != nil {
		return err
	}
	if sx.findBinding(q, dx, key, args) != nil {
		return nil
	}
	if err := validateBinding(sx, key, args); err != nil {
		return err
	}
	b := &binding{src: sx, q: q, x: dx, key: key, args: args}
	k := v.recordKeyOf(b)
	if k != "" {
		v.putMetaLocked(k, encodeRecord(b.record()))
	}
	if k != "" && v.sharedMeta() {
		// Clustered: the binding comes into being when its record is
		// committed and applied, here as on every node (applyBinding,
		// before the write returns); a failed proposal leaves nothing.
		return nil
	}
	v.addBindingLocked(b)
	return nil
}

// validateBinding checks a new binding's key and arguments against its
// source's type.
func validateBinding(sx *Exchange, key string, args Table) error {
	if err := validateHashBinding(sx.kind, sx.args, key); err != nil {
		return err
	}
	if sx.kind == KindHeaders {
		if xm, ok := args["x-match"]; ok {
			s, _ := xm.(string)
			if s != "all" && s != "any" && s != "all-with-x" && s != "any-with-x" {
				return errorf(KindPreconditionFailed, "Invalid x-match field value %v; expected all, any, all-with-x, or any-with-x", xm)
			}
		}
	}
	return nil
}

func (v *VHost) addBindingLocked(b *binding) {
	listAdd(&b.src.bindings, b, srcPos)
	b.src.indexBinding(b)
	b.src.router.add(b)
	if b.q != nil {
		listAdd(&b.q.bindings, b, dstPos)
	} else {
		listAdd(&b.x.inbound, b, dstPos)
	}
	if b.src.event {
		v.noteEventBindings(b.src)
	}
}

func (v *VHost) unbind(dst string, toQueue bool, src, key string, args Table, owner any) error {
	_, err := v.Apply(TopologyCommand{Op: TopoUnbind, Name: dst, ToQueue: toQueue, Source: src, Key: key, Args: args, Owner: owner})
	return err
}

func (v *VHost) unbindLocked(dst string, toQueue bool, src, key string, args Table, owner any) error {
	sx, q, dx, err := v.lookupBind(dst, toQueue, src, owner)
	if KindOf(err) == KindNotFound {
		return nil // RabbitMQ 3.10: unbinding a missing queue or exchange is ok
	}
	if err != nil {
		return err
	}
	if b := sx.findBinding(q, dx, key, args); b != nil {
		if k := v.recordKeyOf(b); k != "" && v.sharedMeta() {
			// Clustered: the binding goes when its delete is committed
			// and applied, here as on every node (applyBinding); so does
			// an auto-delete source it leaves empty, by its own record.
			v.deleteMetaLocked(k)
			if sx.autoDelete && len(sx.bindings) == 1 {
				if xk := v.exchangeKey(sx); xk != "" {
					v.deleteMetaLocked(xk)
				}
			}
			return nil
		}
		v.removeBindingLocked(b, true)
		return nil
	}
	return nil
}

// removeBindingLocked removes b; autoDelete lets an auto-delete source
// exchange go with its last binding.
func (v *VHost) removeBindingLocked(b *binding, autoDelete bool) {
	sx := b.src
	listRemove(&sx.bindings, b, srcPos)
	sx.unindexBinding(b)
	sx.router.remove(b)
	if sx.event {
		v.noteEventBindings(sx)
	}
	if b.q != nil {
		listRemove(&b.q.bindings, b, dstPos)
	} else {
		listRemove(&b.x.inbound, b, dstPos)
	}
	if k := v.recordKeyOf(b); k != "" {
		v.deleteMetaLocked(k)
	}
	if autoDelete && sx.autoDelete && len(sx.bindings) == 0 && v.exchanges[sx.name] == sx {
		_ = v.deleteExchangeLocked(sx)
	}
}

func (v *VHost) bindingKey(b *binding) string {
	dk := "e"
	if b.q != nil {
		dk = "q"
	}
	return fmt.Sprintf("binding/%s\x00%s\x00%s%s\x00%s\x00%x", v.name, b.src.name, dk, b.destName(), b.key, encodeRecord(b.args))
}

func (b *binding) record() Table {
	dk := "exchange"
	if b.q != nil {
		dk = "queue"
	}
	return Table{"source": b.src.name, "destination": b.destName(), "destination_type": dk, "routing_key": b.key, "args": b.args}
}

// BindingInfo describes one binding, for listings.
type BindingInfo struct {
	Source, Destination, DestinationType, RoutingKey string
	Args                                             Table
}

// Bindings lists every binding of the vhost (the implicit default-exchange
// bindings are not included).
func (v *VHost) Bindings() []BindingInfo {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []BindingInfo
	for _, x := range v.exchanges {
		for _, b := range x.bindings {
			r := b.record()
			out = append(out, BindingInfo{Source: x.name, Destination: b.destName(), DestinationType: r["destination_type"].(string), RoutingKey: b.key, Args: b.args})
		}
	}
	return out
}

// --- publishing ---

// Confirmer receives the outcome of a publish that was pending.
type Confirmer interface {
	Confirm(tag uint64, ok bool)
}

// NotAppendedConfirmer is a Confirmer that is told, instead of
// Confirm(tag, false), when a publish failed only because the message log
// of the one queue it reached never appended it (NotAppended: a quorum
// queue's leader that was handing over or had lost its leadership): no
// member holds the message, so it may be sent to the queue's next owner.
// cluster/forward's Server is one: the node that forwarded the message
// sends it on.
type NotAppendedConfirmer interface {
	Confirmer
	NotAppended(tag uint64)
}

// PublishOpts are per-publish options.
type PublishOpts struct {
	// Confirmer, if set, is told the outcome of a publish that returned
	// Pending, exactly once, from another goroutine.
	Confirmer Confirmer
	Tag       uint64
	// Queue, if set, is the one queue the message goes to, whatever its
	// Exchange and RoutingKey say: a message another node routed and
	// forwarded here (cluster/forward) keeps its original exchange and
	// routing key for its consumers.
	Queue string
	// Batch, if set, is handed to the sinks of the deliveries this
	// publish makes on its way (see Batch).
	Batch *Batch
	// Protocol is the publisher's, the label of its publish-to-confirm
	// latency (latency.go): a publish with a Confirmer is measured only
	// when it names its protocol (a client's confirm, not a transaction's
	// or a shovel's wait).
	Protocol Protocol
	// Mandatory: an unroutable message goes back to the publisher (AMQP's
	// mandatory flag); it counts as returned, not dropped (MsgStats).
	Mandatory bool

	system bool // the broker's own publish (events.go): internal exchanges take it
}

// PublishResult is the outcome of a publish.
type PublishResult struct {
	// Routed is the number of queues (and reply-to consumers) the message
	// reached.
	Routed int
	// Pending is true if the outcome waits for the store: the Confirmer
	// will be called. Otherwise OK is final.
	Pending bool
	// OK is false if a queue refused the message (x-overflow reject-publish).
	OK bool
	// NotAppended is true, with OK false and Pending false, when the
	// one queue the message reached already answered that its log never
	// appended it (see NotAppendedConfirmer): it may go to the queue's
	// next owner.
	NotAppended bool
	// Solo is true if the message was marked reusable (Message.Reuse) and
	// every queue it reached holds it in memory, counting its hold
	// (reuse.go): the publisher may then Release it. Otherwise it must not.
	Solo bool
}

type confirmWait struct {
	c      Confirmer
	tag    uint64
	v      *VHost // set when the wait is measured (LatPublishConfirm)
	start  int64  // when the core accepted the publish
	left   atomic.Int32
	failed atomic.Bool
	proto  Protocol
	// stores counts the queues that took the message to their log, and
	// notAppended those whose log answered NotAppended: when they are the
	// same one queue and nothing else failed, the publish was not stored
	// anywhere and a NotAppendedConfirmer may send it on.
	stores      atomic.Int32
	notAppended atomic.Int32
	fn          func(error) // w.done, bound once: waits are pooled
}

// waitPool recycles confirm waits: a confirmed publish would otherwise
// allocate the wait and the method value its queues call back.
var waitPool sync.Pool

func newConfirmWait(c Confirmer, tag uint64, proto Protocol) *confirmWait {
	w, _ := waitPool.Get().(*confirmWait)
	if w == nil {
		w = new(confirmWait)
		w.fn = w.done
	}
	w.c, w.tag, w.proto = c, tag, proto
	return w
}

// release returns w to the pool; its holder is the last: every queue
// that took its callback has called it.
func (w *confirmWait) release() {
	w.c, w.v, w.start = nil, nil, 0
	w.failed.Store(false)
	w.stores.Store(0)
	w.notAppended.Store(0)
	waitPool.Put(w)
}

func (w *confirmWait) done(err error) {
	if err != nil {
		if NotAppended(err) {
			w.notAppended.Add(1)
		} else {
			w.failed.Store(true)
		}
	}
	if w.left.Add(-1) == 0 {
		if w.resendable() {
			if na, ok := w.c.(NotAppendedConfirmer); ok {
				na.NotAppended(w.tag) // sent on: its confirm comes later
				w.release()
				return
			}
		}
		if w.v != nil {
			w.v.observe(w.proto, LatPublishConfirm, w.v.b.confirmClock(w.start)-w.start)
		}
		w.c.Confirm(w.tag, !w.failed.Load() && w.notAppended.Load() == 0)
		w.release()
	}
}

// resendable: the one queue the publish reached never appended it.
func (w *confirmWait) resendable() bool {
	return !w.failed.Load() && w.notAppended.Load() == 1 && w.stores.Load() == 1
}

var encodePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// routeScratch holds a publish's routing results; pooled so that routing
// allocates nothing per message.
type routeScratch struct {
	qs    []*Queue
	bs    []*binding          // a stack of matched bindings, one region per exchange level
	seenQ map[*Queue]struct{} // the queues in qs, once there are many (addQueue)
}

var routePool = sync.Pool{New: func() any {
	return &routeScratch{qs: make([]*Queue, 0, 8), bs: make([]*binding, 0, 16)}
}}

// Publish routes m from m.Exchange by m.RoutingKey and enqueues it. The
// message must not be modified afterwards.
func (v *VHost) Publish(m *Message, o PublishOpts) (PublishResult, error) {
	var now int64
	if o.Batch != nil {
		now = o.Batch.time()
	} else {
		now = nowNano()
	}
	m.ts = now
	if ms, ok := parseExpiration(m.Props.Expiration); ok {
		m.expiresAt = now + ms*int64(time.Millisecond)
		v.anyExpiring.Store(true)
	}
	res, err := v.publish(m, o, now, nil)
	if o.Confirmer != nil && o.Protocol != ProtoOther && err == nil && !res.Pending {
		// Confirmed at once (nothing to store): the front end sends it
		// now. A batch's publishes share one clock reading, so their
		// latency is 0 (the zero bucket: under 7.6 µs) rather than a
		// second clock read per message.
		end := now
		if o.Batch == nil {
			end = nowNano()
		}
		v.observe(o.Protocol, LatPublishConfirm, end-now)
	}
	return res, err
}

func (v *VHost) publish(m *Message, o PublishOpts, now int64, skip func(*Queue) bool) (PublishResult, error) {
	sc := routePool.Get().(*routeScratch)
	defer func() {
		clear(sc.qs)
		sc.qs = sc.qs[:0]
		routePool.Put(sc)
	}()
	qs := &sc.qs
	rv := v.routes() // no lock but for a while after a topology change
	var x *Exchange
	if o.Queue != "" {
		xr, _ := rv.exchange("")
		x = xr.x
		if q := rv.queue(o.Queue); q != nil {
			*qs = append(*qs, q)
		}
	} else {
		xr, ok := rv.exchange(m.Exchange)
		x = xr.x
		if !ok {
			rv.release()
			return PublishResult{}, v.errNoExchange(m.Exchange)
		}
		if x.internal && !o.system {
			rv.release()
			return PublishResult{}, errorf(KindAccessRefused, "cannot publish to internal exchange '%s' in vhost '%s'", x.name, v.name)
		}
		if x.delay != nil && skip == nil {
			ms, hold, err := messageDelay(m.Props.Headers)
			if err != nil || hold {
				rv.release()
				if err != nil {
					return PublishResult{}, err
				}
				v.counters.publish.Add(1)
				x.counters.publishIn.Add(1)
				return x.delay.holdBack(m, ms, o, now), nil
			}
		}
		*qs = rv.route(xr, m, sc)
	}
	rv.release()
	if len(*qs) == 0 && x.name == "" && v.b.cluster != nil && strings.HasPrefix(m.RoutingKey, ReplyToQueue+".") {
		if q := v.remoteReplyTo(m.RoutingKey); q != nil {
			*qs = append(*qs, q)
		}
	}

	res := PublishResult{OK: true}
	var data []byte
	var wait *confirmWait
	// A confirm waits for the queues that store the message and for the
	// nodes that own proxied queues.
	needWait := false
	for _, q := range *qs {
		if q.storesMessage(m) {
			needWait = true
			break
		}
	}
	if needWait {
		// The store copies what it is given, so the record is encoded
		// into a pooled buffer.
		buf := encodePool.Get().(*[]byte)
		data = encodeMessage(m, now, (*buf)[:0])
		defer func() {
			if cap(data) <= 64<<10 {
				*buf = data[:0]
				encodePool.Put(buf)
			}
		}()
	}
	if needWait && o.Confirmer != nil {
		wait = newConfirmWait(o.Confirmer, o.Tag, o.Protocol)
		if o.Protocol != ProtoOther { // a client's confirm, not the broker's own wait
			wait.v, wait.start = v, now
		}
		wait.left.Store(1) // held by this call until the end
	}
	var done func(error)
	if wait != nil {
		done = wait.fn
	}
	if m.rec != nil && len(*qs) > 1 {
		// The queues' holds on a reusable message in one atomic add,
		// not one each: those that take theirs use them up (enqueue),
		// the rest are given back after the loop. The publisher's own
		// hold keeps the count above zero meanwhile.
		k := min(len(*qs), maxHeld-int(m.held))
		m.holds.Add(int32(k))
		m.prepaid = uint8(k)
	}
	for _, q := range *qs {
		if skip != nil && skip(q) {
			continue
		}
		if wait != nil {
			wait.left.Add(1)
			wait.stores.Add(1)
		}
		accepted, stored, refused := q.enqueue(m, data, done, now, o.Batch)
		if wait != nil && !stored {
			wait.left.Add(-1)
			wait.stores.Add(-1)
		}
		if accepted {
			res.Routed++
		} else if refused {
			res.OK = false
		}
	}
	if wait != nil {
		if !res.OK {
			wait.failed.Store(true)
		}
		if wait.left.Load() > 1 {
			res.Pending = true
			wait.done(nil) // drop this call's hold; wait is not touched after
		} else {
			if wait.failed.Load() || wait.notAppended.Load() > 0 {
				// The store already answered, with an error: the
				// outcome is final here and the Confirmer is not called.
				res.OK = false
				res.NotAppended = res.Routed == 1 && wait.resendable()
			}
			wait.release() // every queue has called back: this call holds the last
		}
	}
	if m.prepaid > 0 {
		m.holds.Add(-int32(m.prepaid))
		m.prepaid = 0
	}
	// Every queue reached holds m in memory alone (none stored it, none
	// forwarded it): only they, and the publisher, hold it.
	res.Solo = m.held > 0 && int(m.held) == len(*qs) && skip == nil
	if skip == nil { // not a dead-lettered republish
		v.counters.publish.Add(1)
		x.counters.publishIn.Add(1)
		switch {
		case res.Routed > 0:
			x.counters.publishOut.Add(1)
		case o.Mandatory:
			v.counters.returnUnroutable.Add(1)
		default:
			v.counters.dropUnroutable.Add(1)
		}
	}
	return res, nil
}

// route collects the queues m reaches from x, following
// exchange-to-exchange bindings and alternate exchanges, each queue once.
func (rv routeView) route(x xRoute, m *Message, sc *routeScratch) []*Queue {
	out := sc.qs
	if x.x.name == "" {
		if q := rv.queue(m.RoutingKey); q != nil {
			return append(out, q)
		}
		if strings.HasPrefix(m.RoutingKey, ReplyToQueue+".") {
			if q := rv.replyQueue(m.RoutingKey); q != nil {
				return append(out, q)
			}
		}
		return out
	}
	var seen [8]*Exchange
	out = rv.routeExchange(x, m, out, seen[:0], sc)
	clear(sc.bs)
	sc.bs = sc.bs[:0]
	if len(sc.seenQ) > 0 {
		clear(sc.seenQ)
	}
	return out
}

// addQueue appends q to out unless it is there: by a scan while out is
// short, by a set (kept in the pooled scratch) once it is long, so that a
// fan-out to many queues costs n rather than n².
func (sc *routeScratch) addQueue(out []*Queue, q *Queue) []*Queue {
	const scan = 16
	if len(out) < scan {
		for _, o := range out {
			if o == q {
				return out
			}
		}
		return append(out, q)
	}
	if len(sc.seenQ) == 0 {
		if sc.seenQ == nil {
			sc.seenQ = make(map[*Queue]struct{}, 2*scan)
		}
		for _, o := range out {
			sc.seenQ[o] = struct{}{}
		}
	}
	if _, dup := sc.seenQ[q]; dup {
		return out
	}
	sc.seenQ[q] = struct{}{}
	return append(out, q)
}

func (rv routeView) routeExchange(x xRoute, m *Message, out []*Queue, seen []*Exchange, sc *routeScratch) []*Queue {
	for _, s := range seen {
		if s == x.x {
			return out
		}
	}
	seen = append(seen, x.x)
	start := len(sc.bs)
	if mr, ok := x.r.(messageRouter); ok {
		sc.bs = mr.routeMessage(m, sc.bs)
	} else {
		sc.bs = x.r.route(m.RoutingKey, m.Props.Headers, sc.bs)
	}
	end := len(sc.bs)
	for i := start; i < end; i++ {
		b := sc.bs[i] // sc.bs may grow (and move) in the recursion below
		if b.q != nil {
			out = sc.addQueue(out, b.q)
		} else if bx, ok := rv.to(b.x); ok {
			out = rv.routeExchange(bx, m, out, seen, sc)
		}
	}
	sc.bs = sc.bs[:start]
	// As RabbitMQ does, the AE is used only if none of x's own bindings
	// matched, whatever its destinations then route to.
	if end == start && x.hasAE {
		if ae, ok := rv.exchange(x.alternate); ok {
			out = rv.routeExchange(ae, m, out, seen, sc)
		}
	}
	return out
}

// --- dead-lettering ---

// deadLetter republishes m from queue q to q's dead-letter exchange with an
// x-death header as RabbitMQ writes it.
func (v *VHost) deadLetter(q *Queue, d deadLetter) {
	m, reason := d.msg, d.reason
	nm := &Message{Exchange: d.dlx, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body}
	if d.hasDLRK {
		nm.RoutingKey = d.dlrk
	}
	h := make(Table, len(m.Props.Headers)+4)
	for k, val := range m.Props.Headers {
		h[k] = val
	}
	now := time.Now().UTC().Truncate(time.Second)
	entry := Table{
		"count":        int64(1),
		"reason":       reason,
		"queue":        q.name,
		"time":         now,
		"exchange":     m.Exchange,
		"routing-keys": []any{m.RoutingKey},
	}
	if m.Props.Expiration != "" {
		entry["original-expiration"] = m.Props.Expiration
		nm.Props.Expiration = ""
	}
	deaths, _ := h["x-death"].([]any)
	rest := make([]any, 0, len(deaths)+1)
	for _, d := range deaths {
		t, ok := asTable(d)
		if ok && t["queue"] == q.name && t["reason"] == reason {
			n, _ := asInt64(t["count"])
			entry["count"] = n + 1
			continue
		}
		rest = append(rest, d)
	}
	h["x-death"] = append([]any{entry}, rest...)
	if _, ok := h["x-first-death-reason"]; !ok {
		h["x-first-death-reason"] = reason
		h["x-first-death-queue"] = q.name
		h["x-first-death-exchange"] = m.Exchange
	}
	h["x-last-death-reason"] = reason
	h["x-last-death-queue"] = q.name
	h["x-last-death-exchange"] = m.Exchange
	nm.Props.Headers = h
	nowNs := nowNano()
	nm.ts = nowNs
	nm.expiresAt = 0
	// Cycle detection: a message that would come back to a queue it died
	// in, with no rejection on the way, is dropped (as RabbitMQ does).
	rejected := false
	for _, d := range h["x-death"].([]any) {
		if t, ok := asTable(d); ok && t["reason"] == "rejected" {
			rejected = true
		}
	}
	skip := func(target *Queue) bool {
		if rejected {
			return false
		}
		for _, d := range h["x-death"].([]any) {
			if t, ok := asTable(d); ok && t["queue"] == target.name {
				return true
			}
		}
		return false
	}
	v.mu.RLock()
	_, ok := v.exchanges[nm.Exchange]
	v.mu.RUnlock()
	if !ok {
		return
	}
	_, _ = v.publish(nm, PublishOpts{}, nowNs, skip)
}
