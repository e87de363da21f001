package exchange

import (
	"errors"
	"strconv"
)

// ErrSuperStreamExists is DeclareSuperStream's answer when the exchange
// or one of the partitions already exists: nothing was declared.
var ErrSuperStreamExists = errors.New("exchange: super stream or one of its partitions already exists")

// ErrNotSuperStream is DeleteSuperStream's answer for a name that is not
// a super stream's exchange.
var ErrNotSuperStream = errors.New("exchange: not a super stream")

// SuperStreamPartitions names a super stream's partitions and their
// binding keys: n partitions <name>-0 … <name>-(n-1) keyed by their
// index, or, with keys, one partition <name>-<key> per key (RabbitMQ's
// rabbitmq-streams add_super_stream --partitions / --routing-keys).
func SuperStreamPartitions(name string, n int, keys []string) (streams, bindingKeys []string) {
	if len(keys) > 0 {
		for _, k := range keys {
			streams = append(streams, name+"-"+k)
		}
		return streams, append([]string(nil), keys...)
	}
	for i := range n {
		streams = append(streams, name+"-"+strconv.Itoa(i))
		bindingKeys = append(bindingKeys, strconv.Itoa(i))
	}
	return streams, bindingKeys
}

// superStreamCommands are the commands that declare a super stream: its
// exchange, its streams (with streamArgs), their bindings.
func superStreamCommands(name string, streams, keys []string, streamArgs Table) []Command {
	cmds := []Command{ExchangeDeclare{Name: name, Type: KindDirect,
		Opts: ExchangeOpts{Durable: true, Args: Table{ArgSuperStream: true}}}}
	for i, s := range streams {
		args := Table{"x-queue-type": "stream"}
		for k, v := range streamArgs {
			args[k] = v
		}
		cmds = append(cmds, QueueDeclare{Name: s, Opts: QueueOpts{Durable: true, Args: args, turn: i}})
	}
	for i, s := range streams {
		cmds = append(cmds, QueueBind{Queue: s, Exchange: name, Key: keys[i],
			Args: Table{ArgPartitionOrder: int64(i)}})
	}
	return cmds
}

// DeclareSuperStream declares super stream name for a: a durable direct
// exchange (x-super-stream true) bound to durable streams (streams[i]
// with binding key keys[i] and x-stream-partition-order i), as
// RabbitMQ's create_super_stream. Every command is authorized before
// any runs (configure on the exchange and the streams, write on the
// streams and read on the exchange for the bindings), so a refusal
// declares nothing; ErrSuperStreamExists if the exchange or a stream
// exists already. A failure part way deletes what was declared.
func (v *VHost) DeclareSuperStream(a Authorizer, name string, streams, keys []string, streamArgs Table) error {
	switch {
	case name == "" || len(streams) == 0:
		return errorf(KindPreconditionFailed, "a super stream needs a name and partitions")
	case len(keys) != len(streams):
		return errorf(KindPreconditionFailed, "super stream '%s': %d partitions but %d binding keys", name, len(streams), len(keys))
	}
	seen := map[string]bool{}
	for i, s := range streams {
		if s == "" || keys[i] == "" || seen[s] {
			return errorf(KindPreconditionFailed, "super stream '%s': empty or repeated partition or binding key", name)
		}
		seen[s] = true
	}
	cmds := superStreamCommands(name, streams, keys, streamArgs)
	for _, c := range cmds {
		if err := Authorize(a, v.name, c); err != nil {
			return err
		}
	}
	if _, ok := v.Exchange(name); ok {
		return ErrSuperStreamExists
	}
	for _, s := range streams {
		if _, err := v.Queue(s, nil); err == nil || KindOf(err) != KindNotFound {
			return ErrSuperStreamExists
		}
	}
	var created []Command // what to delete if a later command fails
	for _, c := range cmds {
		r, err := v.Do(a, c)
		if err != nil {
			v.undoSuperStream(a, created)
			return err
		}
		switch c := c.(type) {
		case ExchangeDeclare:
			created = append(created, ExchangeDelete{Name: c.Name})
		case QueueDeclare:
			if r.Queue.Created { // not one another client declared meanwhile
				created = append(created, QueueDelete{Name: c.Name})
			}
		}
	}
	return nil
}

// undoSuperStream runs the deletes of what a failed declaration created.
func (v *VHost) undoSuperStream(a Authorizer, deletes []Command) {
	for _, c := range deletes {
		_, _ = v.Do(a, c)
	}
}

// DeleteSuperStream deletes super stream name for a: its exchange, then
// its partitions (configure on each, all checked first), as RabbitMQ's
// delete_super_stream. ErrNotSuperStream if name is not one.
func (v *VHost) DeleteSuperStream(a Authorizer, name string) (partitions []string, err error) {
	partitions, ok := v.Partitions(name)
	if !ok {
		return nil, ErrNotSuperStream
	}
	cmds := []Command{ExchangeDelete{Name: name}}
	for _, s := range partitions {
		cmds = append(cmds, QueueDelete{Name: s})
	}
	for _, c := range cmds {
		if err := Authorize(a, v.name, c); err != nil {
			return nil, err
		}
	}
	for _, c := range cmds {
		if _, err := v.Do(a, c); err != nil && KindOf(err) != KindNotFound {
			return partitions, err
		}
	}
	return partitions, nil
}

// turnMembers places partition i's first member (the one that stands for
// election first, so its leader while all are up) i places further along
// the members the placement chose: a super stream declared on one node
// has its partitions led by different nodes, as RabbitMQ places them.
// The members are the same set; a drained node the placement put last
// may come first for some partition (it then hands over as for any
// stream on a drained node).
func turnMembers(ms []string, i int) []string {
	if i <= 0 || len(ms) < 2 {
		return ms
	}
	k := i % len(ms)
	return append(append([]string(nil), ms[k:]...), ms[:k]...)
}
