package exchange

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

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
