package exchange

import (
	"errors"
	"fmt"
	"slices"
)

// Topology as typed commands (issue 43, item 1).
//
// A TopologyCommand is one change of a vhost's topology, as data: what to
// declare or delete, with its arguments, and the user it acts for. It is
// what the core applies (VHost.Apply) and what a cluster replicates: it
// has a versioned encoding (EncodeTopology, DecodeTopology; golden bytes in
// testdata/topology) so that a node can read what another node of the same
// or an older release wrote.
//
// VHost.Apply is the one entry point for the commands: the front ends'
// VHost.Do (after exchange.Authorize, the one permission check, made on
// the command before it is applied or proposed) and the core's own
// Declare*/Delete*/Bind*/Unbind* methods build a command and apply it.
// Standalone, Apply changes memory and writes the records it collected in
// one store batch (MetaBatcher) before it returns.

// TopoOp is what a TopologyCommand does.
type TopoOp uint8

// Topology operations. The numbers are part of the encoding: never reuse
// one.
const (
	TopoDeclareExchange TopoOp = 1
	TopoDeleteExchange  TopoOp = 2
	TopoDeclareQueue    TopoOp = 3
	TopoDeleteQueue     TopoOp = 4
	TopoBind            TopoOp = 5
	TopoUnbind          TopoOp = 6
	TopoSetPolicy       TopoOp = 7
	TopoDeletePolicy    TopoOp = 8
	TopoDeclareVHost    TopoOp = 9
	TopoSetVHostMeta    TopoOp = 10
	TopoDeleteVHost     TopoOp = 11
	// Operator policies (a policy's fields; Definition holds the limits).
	TopoSetOperatorPolicy    TopoOp = 12
	TopoDeleteOperatorPolicy TopoOp = 13
)

var topoOpNames = map[TopoOp]string{
	TopoDeclareExchange: "exchange.declare",
	TopoDeleteExchange:  "exchange.delete",
	TopoDeclareQueue:    "queue.declare",
	TopoDeleteQueue:     "queue.delete",
	TopoBind:            "bind",
	TopoUnbind:          "unbind",
	TopoSetPolicy:       "policy.set",
	TopoDeletePolicy:    "policy.delete",
	TopoDeclareVHost:    "vhost.declare",
	TopoSetVHostMeta:    "vhost.set-metadata",
	TopoDeleteVHost:     "vhost.delete",

	TopoSetOperatorPolicy:    "operator-policy.set",
	TopoDeleteOperatorPolicy: "operator-policy.delete",
}

// vhostOp reports whether o changes a vhost itself (VHost names it).
func (o TopoOp) vhostOp() bool {
	return o == TopoDeclareVHost || o == TopoSetVHostMeta || o == TopoDeleteVHost
}

func (o TopoOp) String() string {
	if s, ok := topoOpNames[o]; ok {
		return s
	}
	return fmt.Sprintf("topology-op-%d", uint8(o))
}

// TopologyCommand is one topology change. Which fields count depends on
// Op:
//
//	exchange.declare  Name, Type, Durable, AutoDelete, Internal, Args
//	exchange.delete   Name, IfUnused
//	queue.declare     Name, Durable, Exclusive, AutoDelete, Args
//	queue.delete      Name, IfUnused, IfEmpty
//	bind, unbind      Source (an exchange), Name (the destination: a
//	                  queue if ToQueue, else an exchange), Key, Args
//	policy.set        Name, Pattern, ApplyTo, Priority, Definition
//	policy.delete     Name
//	operator-policy.set, operator-policy.delete: as policy.set, policy.delete
//	vhost.declare     VHost (the vhost itself: created if it does not exist)
//	vhost.set-metadata VHost, Description, Tags
//	vhost.delete      VHost, with everything in it
//
// Actor is the user the command acts for ("" for the broker itself); it
// is recorded, not checked: the check is Authorize's, before Apply.
type TopologyCommand struct {
	Op    TopoOp
	VHost string
	Actor string

	Name       string
	Type       string
	Durable    bool
	AutoDelete bool
	Internal   bool
	Exclusive  bool
	Args       Table
	IfUnused   bool
	IfEmpty    bool
	Source     string
	ToQueue    bool
	Key        string
	Pattern    string
	ApplyTo    string
	Priority   int64
	Definition Table
	// Description and Tags are a vhost's management metadata.
	Description string
	Tags        []string

	// Decided by the node that proposes the command in a cluster, so that
	// every node builds the same object: a new queue's id (a delayed
	// exchange's store id; the queue a delete means), the home node of a
	// classic queue or a transient exchange, a quorum queue's or stream's
	// members.
	ID      uint64
	Node    string
	Members []string

	// Owner is the declaring connection (exclusive queues belong to it):
	// meaningful on the node that issues the command only, never encoded.
	Owner any
	// generated: Name is a server-chosen "amq.gen-…" (not encoded either).
	generated bool
	// turn: a super stream partition's index (QueueOpts.turn), not encoded.
	turn int
	// seed: a quorum queue's first members, as its record keeps them
	// (recovery's replay only, not encoded).
	seed []string
	// record: the command is a record committed on the metadata group's
	// records path (ApplyMeta; not encoded), and the record is the state,
	// as v0.1.0 applies it: a declaration replaces an object of the name
	// that is another (another queue id, an inequivalent exchange), and
	// re-writes a quorum queue's or stream's members (forget, rebalance);
	// a vhost's record sets its metadata. A delete read from a record's
	// key goes by name, and only for an object recorded as Durable says
	// (durable, or transient: its record key starts with "t"); an unbind
	// does not auto-delete its source (that exchange's own record's
	// delete does).
	record bool
}

// topologyVersion is the first byte of an encoded TopologyCommand.
const topologyVersion = 1

// ErrTopologyUnreadable is an encoded command of a version, an operation
// or a field this release does not know: a newer release wrote it. It is
// never skipped: the reader stops rather than hold a topology that left a
// change out.
var ErrTopologyUnreadable = errors.New("exchange: topology command of a newer format")

// ErrBadTopology is an encoded command that does not decode.
var ErrBadTopology = errors.New("exchange: bad topology command")

// The field names of the encoding (a Stored table; a field at its zero
// value is left out).
var topoFields = []string{"vhost", "actor", "name", "type", "durable", "auto_delete", "internal", "exclusive",
	"args", "if_unused", "if_empty", "source", "to_queue", "key", "id", "node", "members",
	"pattern", "apply_to", "priority", "definition", "description", "tags"}

// EncodeTopology encodes c:
//
//	version 1 | op | Stored table of the fields that are not zero
func EncodeTopology(c TopologyCommand) []byte {
	t := Table{}
	str := func(k, v string) {
		if v != "" {
			t[k] = v
		}
	}
	flag := func(k string, v bool) {
		if v {
			t[k] = true
		}
	}
	str("vhost", c.VHost)
	str("actor", c.Actor)
	str("name", c.Name)
	str("type", c.Type)
	flag("durable", c.Durable)
	flag("auto_delete", c.AutoDelete)
	flag("internal", c.Internal)
	flag("exclusive", c.Exclusive)
	if c.Args != nil {
		t["args"] = c.Args
	}
	flag("if_unused", c.IfUnused)
	flag("if_empty", c.IfEmpty)
	str("source", c.Source)
	flag("to_queue", c.ToQueue)
	str("key", c.Key)
	if c.ID != 0 {
		t["id"] = c.ID
	}
	str("node", c.Node)
	if len(c.Members) > 0 {
		t["members"] = stringsToAny(c.Members)
	}
	str("pattern", c.Pattern)
	str("apply_to", c.ApplyTo)
	if c.Priority != 0 {
		t["priority"] = c.Priority
	}
	if c.Definition != nil {
		t["definition"] = c.Definition
	}
	str("description", c.Description)
	if c.Tags != nil {
		t["tags"] = stringsToAny(c.Tags)
	}
	return append([]byte{topologyVersion, byte(c.Op)}, encodeRecord(t)...)
}

// DecodeTopology decodes what EncodeTopology made. A version, an op or a
// field it does not know is ErrTopologyUnreadable; bytes that do not
// decode are ErrBadTopology.
func DecodeTopology(b []byte) (TopologyCommand, error) {
	var c TopologyCommand
	if len(b) < 2 {
		return c, fmt.Errorf("%w: %d bytes", ErrBadTopology, len(b))
	}
	if b[0] != topologyVersion {
		if b[0] > topologyVersion {
			return c, fmt.Errorf("%w: version %d", ErrTopologyUnreadable, b[0])
		}
		return c, fmt.Errorf("%w: version %d", ErrBadTopology, b[0])
	}
	c.Op = TopoOp(b[1])
	if _, ok := topoOpNames[c.Op]; !ok {
		return c, fmt.Errorf("%w: operation %d", ErrTopologyUnreadable, b[1])
	}
	t, err := decodeRecord(b[2:])
	if err != nil {
		return c, fmt.Errorf("%w: %v", ErrBadTopology, err)
	}
	for k := range t {
		if !slices.Contains(topoFields, k) {
			return c, fmt.Errorf("%w: field %q", ErrTopologyUnreadable, k)
		}
	}
	var bad []string
	str := func(k string, p *string) {
		if v, ok := t[k]; ok {
			if *p, ok = v.(string); !ok {
				bad = append(bad, k)
			}
		}
	}
	flag := func(k string, p *bool) {
		if v, ok := t[k]; ok {
			if *p, ok = v.(bool); !ok {
				bad = append(bad, k)
			}
		}
	}
	str("vhost", &c.VHost)
	str("actor", &c.Actor)
	str("name", &c.Name)
	str("type", &c.Type)
	flag("durable", &c.Durable)
	flag("auto_delete", &c.AutoDelete)
	flag("internal", &c.Internal)
	flag("exclusive", &c.Exclusive)
	if v, ok := t["args"]; ok {
		if c.Args, ok = asTable(v); !ok {
			bad = append(bad, "args")
		}
	}
	flag("if_unused", &c.IfUnused)
	flag("if_empty", &c.IfEmpty)
	str("source", &c.Source)
	flag("to_queue", &c.ToQueue)
	str("key", &c.Key)
	if v, ok := t["id"]; ok {
		if c.ID, ok = v.(uint64); !ok {
			bad = append(bad, "id")
		}
	}
	str("node", &c.Node)
	if v, ok := t["members"]; ok {
		as, isList := v.([]any)
		c.Members = anyToStrings(v)
		if !isList || len(c.Members) != len(as) {
			bad = append(bad, "members")
		}
	}
	str("pattern", &c.Pattern)
	str("apply_to", &c.ApplyTo)
	if v, ok := t["priority"]; ok {
		if c.Priority, ok = v.(int64); !ok {
			bad = append(bad, "priority")
		}
	}
	if v, ok := t["definition"]; ok {
		if c.Definition, ok = asTable(v); !ok {
			bad = append(bad, "definition")
		}
	}
	str("description", &c.Description)
	if v, ok := t["tags"]; ok {
		as, isList := v.([]any)
		c.Tags = anyToStrings(v)
		if c.Tags == nil {
			c.Tags = []string{}
		}
		if !isList || len(c.Tags) != len(as) {
			bad = append(bad, "tags")
		}
	}
	if len(bad) > 0 {
		return c, fmt.Errorf("%w: fields %v of the wrong type", ErrBadTopology, bad)
	}
	return c, nil
}

// Apply applies c to the broker's vhost c.VHost: see VHost.Apply.
func (b *Broker) Apply(c TopologyCommand) (Result, error) {
	if c.Op.vhostOp() {
		if f := b.onApply; f != nil {
			f(c)
		}
		return Result{}, b.applyVHostCommand(c)
	}
	v, ok := b.VHost(c.VHost)
	if !ok {
		return Result{}, errorf(KindNotFound, "no vhost '%s'", c.VHost)
	}
	return v.Apply(c)
}

// Apply applies c to the vhost: the one path by which exchanges, queues
// and bindings are declared, deleted, bound and unbound, for a user
// (VHost.Do, after Authorize) or for the broker itself. It returns once
// the change is in memory and its records are durable. c.VHost is set to
// the vhost's name.
//
// A passive declaration is not a command (it changes nothing): use
// DeclareExchange or DeclareQueue with Passive set.
func (v *VHost) Apply(c TopologyCommand) (Result, error) {
	c.VHost = v.name
	if f := v.b.onApply; f != nil {
		f(c)
	}
	if p, on := v.proposerOn(); on {
		switch c.Op {
		case TopoDeleteExchange, TopoDeleteQueue, TopoBind, TopoUnbind, TopoSetPolicy, TopoDeletePolicy,
			TopoSetOperatorPolicy, TopoDeleteOperatorPolicy:
			return v.proposeChange(p, c)
		}
	}
	switch c.Op {
	case TopoDeclareExchange:
		return Result{}, v.applyDeclareExchange(c)
	case TopoDeleteExchange:
		return Result{}, v.applyDeleteExchange(c)
	case TopoDeclareQueue:
		info, err := v.applyDeclareQueue(c)
		return Result{Queue: info}, err
	case TopoDeleteQueue:
		n, err := v.applyDeleteQueue(c)
		return Result{Count: n}, err
	case TopoBind:
		return Result{}, v.inTopology(func() error {
			return v.bindLocked(c.Name, c.ToQueue, c.Source, c.Key, c.Args, c.Owner)
		})
	case TopoUnbind:
		return Result{}, v.inTopology(func() error {
			return v.unbindLocked(c.Name, c.ToQueue, c.Source, c.Key, c.Args, c.Owner)
		})
	case TopoSetPolicy:
		created, err := v.applySetPolicy(c)
		return Result{Created: created}, err
	case TopoDeletePolicy:
		return Result{}, v.applyDeletePolicy(c)
	case TopoSetOperatorPolicy:
		created, err := v.applySetOperatorPolicy(c)
		return Result{Created: created}, err
	case TopoDeleteOperatorPolicy:
		return Result{}, v.applyDeleteOperatorPolicy(c)
	}
	return Result{}, errorf(KindInternal, "unknown topology command %v", c.Op)
}

// policy is c's policy.
func (c TopologyCommand) policy() Policy {
	return Policy{VHost: c.VHost, Name: c.Name, Pattern: c.Pattern, ApplyTo: c.ApplyTo, Priority: int(c.Priority),
		Definition: c.Definition}
}

// exchangeOpts are c's exchange options.
func (c TopologyCommand) exchangeOpts() ExchangeOpts {
	return ExchangeOpts{Durable: c.Durable, AutoDelete: c.AutoDelete, Internal: c.Internal, Args: c.Args}
}

// queueOpts are c's queue options.
func (c TopologyCommand) queueOpts() QueueOpts {
	return QueueOpts{Durable: c.Durable, Exclusive: c.Exclusive, AutoDelete: c.AutoDelete, Args: c.Args,
		Owner: c.Owner, generated: c.generated, turn: c.turn}
}

// MetaBatcher is implemented by a Store that writes several metadata
// records in one durable batch: keys[i] gets vals[i], or is deleted when
// vals[i] is nil. Apply writes a command's records with it, so that a
// crash leaves all of them or none.
type MetaBatcher interface {
	WriteMetaBatch(keys []string, vals [][]byte) error
}
