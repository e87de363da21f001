package exchange

import "fmt"

// Recovery replays the durable records through the apply a committed
// topology command takes (issue 43, item 1): each record is read as the
// command that made it (commandOfRecord) and applied by
// applyCommittedLocked / applyCommittedVHost, the code every node of a
// cluster runs for a committed command, so that a restart rebuilds the
// topology by the same code as every other change. The records it would
// write are the ones being read: replay drops them.

// Record kinds commandOfRecord reads: the key prefix without its slash.
const (
	recVHost    = "vhost"
	recExchange = "exchange"
	recQueue    = "queue"
	recBinding  = "binding"
	recPolicy   = "policy"
	recOpPolicy = "oppolicy"
)

// commandOfRecord is the command the durable record val of kind stands
// for, in vhost, for name (a binding's name is in its record). A record
// that does not decode is an error. Fields an older release left out
// take the defaults that release meant (durable when absent).
func commandOfRecord(kind, vhost, name string, val []byte) (TopologyCommand, error) {
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
		c.Description, c.Tags = vhostMetadata(val)
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

// replayHook, if set, sees each command recovery replays (tests).
var replayHook func(TopologyCommand)

// replay applies a command recovery read from a record: as a committed
// command is applied, without writing records (they are what was read).
func (b *Broker) replay(c TopologyCommand) error {
	if f := replayHook; f != nil {
		f(c)
	}
	if c.Op.vhostOp() {
		b.applyCommittedVHost(c)
		return nil
	}
	v, ok := b.VHost(c.VHost)
	if !ok {
		return nil // a record of a vhost that is gone: it went with it
	}
	v.mu.Lock()
	_, reapply, err := v.applyCommittedLocked(c)
	v.metaOps = nil
	v.mu.Unlock()
	if reapply {
		v.reapplyQueues()
	}
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
