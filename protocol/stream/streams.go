package stream

import (
	"strconv"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// createArgs maps the stream protocol's create arguments onto the core's
// stream arguments (x-queue-type stream), with the kind of value each
// takes. Other arguments are ignored, as RabbitMQ ignores them.
var createArgs = map[string]struct {
	arg string
	num bool
}{
	"max-length-bytes":              {"x-max-length-bytes", true},
	"max-age":                       {"x-max-age", false},
	"stream-max-segment-size-bytes": {"x-stream-max-segment-size-bytes", true},
	"initial-cluster-size":          {"x-initial-cluster-size", true},
	"queue-leader-locator":          {"x-queue-leader-locator", false},
}

// streamArgs puts the core's arguments for kvs (createArgs) into args;
// false if a numeric one does not parse.
func streamArgs(kvs []wire.KV, args exchange.Table) bool {
	for _, kv := range kvs {
		m, ok := createArgs[kv.Key]
		if !ok {
			continue
		}
		if !m.num {
			args[m.arg] = kv.Value
			continue
		}
		n, err := strconv.ParseInt(kv.Value, 10, 64)
		if err != nil {
			return false
		}
		args[m.arg] = n
	}
	return true
}

// create declares a durable stream, through the one permission check
// (configure on the stream's name), as queue.declare would.
func (c *conn) create(f wire.Create) wire.Code {
	args := exchange.Table{"x-queue-type": "stream"}
	if !streamArgs(f.Args, args) {
		return wire.PreconditionFailed
	}
	cmd := exchange.QueueDeclare{Name: f.Stream, Opts: exchange.QueueOpts{Durable: true, Args: args}}
	if err := exchange.Authorize(c.actor, c.vh.Name(), cmd); err != nil {
		c.denied("create", f.Stream, err)
		return wire.AccessRefused
	}
	if f.Stream == "" || len(f.Stream) > 255 {
		return wire.PreconditionFailed
	}
	if _, err := c.vh.Queue(f.Stream, c); err == nil {
		return wire.StreamAlreadyExists
	}
	if _, err := c.vh.Do(c.actor, cmd); err != nil {
		c.log.Info("stream not created", append(c.who(), "stream", f.Stream, "err", err)...)
		return codeOf(err)
	}
	return wire.OK
}

// delete deletes a stream (configure on its name) and tells the
// connections that publish to it.
func (c *conn) delete(f wire.Delete) wire.Code {
	cmd := exchange.QueueDelete{Name: f.Stream, Owner: c}
	if err := exchange.Authorize(c.actor, c.vh.Name(), cmd); err != nil {
		c.denied("delete", f.Stream, err)
		return wire.AccessRefused
	}
	if code := c.streamCode(f.Stream, false); code != wire.OK {
		return code
	}
	if _, err := c.vh.Do(c.actor, cmd); err != nil {
		return codeOf(err)
	}
	c.s.streamGone(c.vh.Name(), f.Stream)
	return wire.OK
}

// metadata answers with this node as every stream's leader and no
// replicas: any node serves any stream (the core reads and appends
// through the stream's members), so a client stays on the address it
// reached and is never sent behind a load balancer to a node it cannot
// reach.
func (c *conn) metadata(f wire.Metadata) {
	host, port := c.advertised()
	brokers := []wire.Broker{{Ref: 0, Host: host, Port: uint32(port)}}
	out := make([]wire.StreamMetadata, 0, len(f.Streams))
	for _, name := range f.Streams {
		md := wire.StreamMetadata{Stream: name, Code: wire.OK}
		if code := c.streamCode(name, false); code != wire.OK {
			md.Code, md.Leader = code, 0xffff
		}
		out = append(out, md)
	}
	c.write(func(b []byte) []byte { return wire.AppendMetadataResponse(b, f.Corr, brokers, out) })
}

// streamStats answers with the first and last offsets (-1 while empty):
// first_chunk_id, committed_chunk_id and committed_offset, a chunk here
// being one message.
func (c *conn) streamStats(f wire.StreamStats) {
	reply := func(code wire.Code, stats []wire.Stat) {
		c.write(func(b []byte) []byte { return wire.AppendStreamStatsResponse(b, f.Corr, code, stats) })
	}
	if code := c.streamCode(f.Stream, true); code != wire.OK {
		reply(code, nil)
		return
	}
	q, err := c.vh.Queue(f.Stream, c)
	if err != nil {
		reply(wire.StreamDoesNotExist, nil)
		return
	}
	si, _ := q.StreamInfo()
	first := int64(si.FirstOffset)
	if si.LastOffset < 0 {
		first = -1
	}
	reply(wire.OK, []wire.Stat{{Key: "first_chunk_id", Value: first}, {Key: "committed_chunk_id", Value: si.LastOffset},
		{Key: "committed_offset", Value: si.LastOffset}})
}
