package exchange

import (
	"errors"
	"fmt"
	"strings"
)

// ApplyMeta brings memory in line with metadata records committed by the
// cluster (the node has already written them to its store): the records
// path of the metadata group, which a v0.1.0 member and this build with
// the feature flag topology_commands off write, a snapshot restore
// installs, and forget/rebalance re-write a queue's members by. Each
// topology record is read as the command it stands for (commandOfRecord)
// and applied by ApplyCommitted, as a committed command is, with the
// command's record set (see TopologyCommand.record: the record is the
// state, so a put replaces what the name holds); the records that apply
// would write are dropped, the store has them. A stream's named offset
// ("streamoff/"), which is not topology, is taken by its stream
// (applyStreamOffsetRecord). Keys of neither kind are another hook's.
//
// It is idempotent: a record equal to what memory holds changes nothing,
// which is the case on the node that made the change. It takes no
// metaMu, so a node waiting under metaMu for its own change to commit
// cannot block it.
//
// A record that does not decode, or that names something this node cannot
// build (an unknown exchange type, invalid queue arguments), changes
// nothing in memory and is reported: the error names every such record
// (ErrBadRecord), the others are applied.
func (b *Broker) ApplyMeta(ops []MetaOp) error {
	var errs []error
	for _, op := range ops {
		if err := b.applyRecord(op); err != nil {
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

// applyRecord applies one committed record op (ApplyMeta).
func (b *Broker) applyRecord(op MetaOp) error {
	if op.Prefix {
		// Only a vhost's delete deletes by prefix, after the vhost's own
		// record, whose delete cleared memory.
		return nil
	}
	if rest, ok := strings.CutPrefix(op.Key, streamOffsetPrefix); ok {
		return b.applyStreamOffsetRecord(rest, op.Val)
	}
	kind, vn, name, ok := splitRecordKey(op.Key)
	if !ok {
		return nil // not the core's
	}
	c, err := commandOfRecord(kind, vn, name, op.Val)
	if err != nil {
		if _, ok := b.VHost(vn); !ok && kind != recVHost {
			return nil // of a vhost that is gone: it went with it
		}
		return err
	}
	c.record = true
	_, err = b.ApplyCommitted(c) // its records are in the store already
	return err
}

func (b *Broker) splitVHostKey(key, prefix string) (*VHost, string, bool) {
	vn, rest, ok := splitKey(key, prefix)
	if !ok {
		return nil, "", false
	}
	v, ok := b.VHost(vn)
	return v, rest, ok
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
	home, _ := r["node"].(string)
	q.setHome(home)
	q.setMembers(anyToStrings(r["members"]))
	seed := anyToStrings(r["seed"])
	if seed == nil {
		seed = q.Members()
	}
	q.setSeed(seed)
	return q, nil
}
