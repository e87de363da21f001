package exchange

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// A topology record is read as the command it stands for (issue 43, item
// 1), by one decoder (commandOfRecord), wherever it comes from:
//
//   - recovery replays each durable record through the apply a committed
//     topology command takes (ApplyCommitted), so that a restart rebuilds
//     the topology by the same code as every other change; the records it
//     would write are the ones being read, and are dropped;
//   - in a cluster, a record committed on the metadata group's records
//     path (a v0.1.0 member's change, this build's while the feature flag
//     topology_commands is off, a snapshot restore, forget/rebalance
//     re-writing a queue's members) is applied the same way by ApplyMeta,
//     with TopologyCommand.record set: the record is the state.

// Record kinds commandOfRecord reads: the key prefix without its slash.
// Exchanges, queues and bindings have a transient kind too, "t" and the
// durable one ("tqueue"): the records of the non-durable ones a cluster
// shares.
const (
	recVHost    = "vhost"
	recExchange = "exchange"
	recQueue    = "queue"
	recBinding  = "binding"
	recPolicy   = "policy"
	recOpPolicy = "oppolicy"
)

// recordKinds are the kinds of the topology records.
var recordKinds = []string{recVHost, recExchange, recQueue, recBinding, recPolicy, recOpPolicy,
	"t" + recExchange, "t" + recQueue, "t" + recBinding}

// splitRecordKey splits a topology record's key into its kind, vhost and
// name: "vhost/<vhost>", else "<kind>/<vhost>\x00<name>", where a
// binding's name is the rest of its key (source, destination, routing key
// and arguments). ok is false for a key that is no topology record's.
func splitRecordKey(key string) (kind, vhost, name string, ok bool) {
	kind, rest, ok := strings.Cut(key, "/")
	if !ok || !slices.Contains(recordKinds, kind) {
		return "", "", "", false
	}
	if kind == recVHost {
		return kind, rest, "", true
	}
	vhost, name, ok = strings.Cut(rest, "\x00")
	return kind, vhost, name, ok
}

// commandOfRecord is the command the record val of kind stands for, in
// vhost, for name: a put (val non-nil) is the declaration or set that
// made it; a delete (val nil) is the delete that removed it, read from
// the key alone (deleteOfRecord). A record that does not decode is an
// error. Fields an older release left out take the defaults that release
// meant (durable when absent).
func commandOfRecord(kind, vhost, name string, val []byte) (TopologyCommand, error) {
	transient := false
	if k, ok := strings.CutPrefix(kind, "t"); ok && (k == recExchange || k == recQueue || k == recBinding) {
		kind, transient = k, true
	}
	if val == nil {
		return deleteOfRecord(kind, vhost, name, transient)
	}
	r, err := decodeRecord(val)
	if err != nil {
		return TopologyCommand{}, err
	}
	str := func(k string) string { s, _ := r[k].(string); return s }
	flag := func(k string) bool { f, _ := r[k].(bool); return f }
	durable := true
	if d, ok := r["durable"].(bool); ok {
		durable = d
	}
	args, _ := asTable(r["args"])
	c := TopologyCommand{VHost: vhost, Name: name}
	switch kind {
	case recVHost:
		c = TopologyCommand{Op: TopoDeclareVHost, VHost: vhost}
		c.Description, c.Tags = vhostMetadata(r)
	case recExchange:
		c.Op, c.Type, c.Durable, c.AutoDelete, c.Internal, c.Args = TopoDeclareExchange, str("type"), durable,
			flag("auto_delete"), flag("internal"), args
		c.Node = str("node")
		c.ID, _ = r["delay_id"].(uint64)
	case recQueue:
		c.Op, c.Durable, c.AutoDelete, c.Exclusive, c.Args = TopoDeclareQueue, durable, flag("auto_delete"), flag("exclusive"), args
		c.ID, _ = r["id"].(uint64)
		c.Node = str("node")
		c.Members = anyToStrings(r["members"])
		c.seed = anyToStrings(r["seed"])
	case recBinding:
		c.Op, c.Source, c.Name, c.ToQueue, c.Key, c.Args = TopoBind, str("source"), str("destination"),
			str("destination_type") == "queue", str("routing_key"), args
	case recPolicy, recOpPolicy:
		c.Op = TopoSetPolicy
		if kind == recOpPolicy {
			c.Op = TopoSetOperatorPolicy
		}
		c.Pattern, c.ApplyTo = str("pattern"), str("apply-to")
		c.Priority, _ = asInt64(r["priority"])
		c.Definition, _ = asTable(r["definition"])
	default:
		return TopologyCommand{}, fmt.Errorf("no command for records of kind %q", kind)
	}
	return c, nil
}

// deleteOfRecord is the delete a record's delete stands for. The key is
// all there is: a queue's delete names the queue by name (a deleted
// record carries no id), an unbind is read from the binding key
// (bindingKey: source, "q" or "e" and the destination, routing key, the
// arguments' encoding in hex). Durable is the record's kind: only an
// object recorded as durable, or as transient, goes by a delete of that
// kind (an exchange, queue or binding of one name may have had a record
// of the other).
func deleteOfRecord(kind, vhost, name string, transient bool) (TopologyCommand, error) {
	c := TopologyCommand{VHost: vhost, Name: name, Durable: !transient}
	switch kind {
	case recVHost:
		return TopologyCommand{Op: TopoDeleteVHost, VHost: vhost}, nil
	case recExchange:
		c.Op = TopoDeleteExchange
	case recQueue:
		c.Op = TopoDeleteQueue
	case recPolicy:
		c.Op = TopoDeletePolicy
	case recOpPolicy:
		c.Op = TopoDeleteOperatorPolicy
	case recBinding:
		// Names hold no NUL (checkName); a routing key may.
		parts := strings.Split(name, "\x00")
		if len(parts) < 4 || len(parts[1]) == 0 || (parts[1][0] != 'q' && parts[1][0] != 'e') {
			return TopologyCommand{}, fmt.Errorf("binding record key %q does not parse", name)
		}
		enc, err := hex.DecodeString(parts[len(parts)-1])
		if err != nil {
			return TopologyCommand{}, fmt.Errorf("binding record key: arguments: %v", err)
		}
		args, err := decodeRecord(enc)
		if err != nil {
			return TopologyCommand{}, fmt.Errorf("binding record key: arguments: %v", err)
		}
		c.Op, c.Source, c.Name, c.ToQueue = TopoUnbind, parts[0], parts[1][1:], parts[1][0] == 'q'
		c.Key, c.Args = strings.Join(parts[2:len(parts)-1], "\x00"), args
	default:
		return TopologyCommand{}, fmt.Errorf("no command for records of kind %q", kind)
	}
	return c, nil
}

// vhostMetadata is a vhost record's description and tags.
func vhostMetadata(r Table) (description string, tags []string) {
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

// replayHook, if set, sees each command recovery replays (tests).
var replayHook func(TopologyCommand)

// replay applies a command recovery read from a record: as a committed
// command is applied, without writing records (they are what was read).
func (b *Broker) replay(c TopologyCommand) error {
	if f := replayHook; f != nil {
		f(c)
	}
	_, err := b.ApplyCommitted(c)
	return err
}

// replayRecord is replay of the record key = val, of kind under prefix
// (key is prefix + vhost + "\x00" + name).
func (b *Broker) replayRecord(kind, prefix, key string, val []byte) (TopologyCommand, error) {
	vn, name, ok := splitKey(key, prefix)
	if kind == recVHost {
		vn, name, ok = key[len(prefix):], "", true
	}
	if !ok {
		return TopologyCommand{}, nil
	}
	c, err := commandOfRecord(kind, vn, name, val)
	if err != nil {
		return c, err
	}
	return c, b.replay(c)
}
