package stream

import (
	"errors"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// Super streams (exchange/superstream.go): Route and Partitions answer
// from the core's lookups, with the response bit as RabbitMQ 3.11+ sets
// it; like RabbitMQ they need no permission (they name streams, and
// publishing to or reading one is checked there). A key that routes
// nowhere is an OK answer with no streams; a name that is not a super
// stream's exchange is stream does not exist.

func (c *conn) route(f wire.Route) {
	streams, ok := c.vh.Route(f.SuperStream, f.RoutingKey)
	code := wire.OK
	if !ok {
		code = wire.StreamDoesNotExist
	}
	c.write(func(b []byte) []byte { return wire.AppendStreamsResponse(b, wire.KeyRoute, f.Corr, code, streams) })
}

func (c *conn) partitions(f wire.Partitions) {
	streams, ok := c.vh.Partitions(f.SuperStream)
	code := wire.OK
	if !ok {
		code = wire.StreamDoesNotExist
	}
	c.write(func(b []byte) []byte { return wire.AppendStreamsResponse(b, wire.KeyPartitions, f.Corr, code, streams) })
}

// createSuperStream declares a super stream (RabbitMQ 3.13's
// CreateSuperStream): its exchange, partitions and bindings, each
// through the core's one check (configure on the exchange and every
// partition, write on the partitions, read on the exchange); the
// arguments apply to every partition as Create's do.
func (c *conn) createSuperStream(f wire.CreateSuperStream) wire.Code {
	args := exchange.Table{}
	if !streamArgs(f.Args, args) {
		return wire.PreconditionFailed
	}
	if f.Name == "" || len(f.Name) > 255 {
		return wire.PreconditionFailed
	}
	for _, p := range f.Partitions {
		if p == "" || len(p) > 255 {
			return wire.PreconditionFailed
		}
	}
	err := c.vh.DeclareSuperStream(c.actor, f.Name, f.Partitions, f.BindingKeys, args)
	switch {
	case err == nil:
		return wire.OK
	case errors.Is(err, exchange.ErrSuperStreamExists):
		return wire.StreamAlreadyExists
	case isAccessError(err) || exchange.KindOf(err) == exchange.KindAccessRefused:
		c.denied("create super stream", f.Name, err)
		return wire.AccessRefused
	}
	c.log.Info("super stream not created", append(c.who(), "super_stream", f.Name, "err", err)...)
	return codeOf(err)
}

// deleteSuperStream deletes a super stream's exchange and partitions
// (configure on each) and tells the connections that publish to them.
func (c *conn) deleteSuperStream(f wire.DeleteSuperStream) wire.Code {
	parts, err := c.vh.DeleteSuperStream(c.actor, f.Name)
	for _, p := range parts {
		c.s.streamGone(c.vh.Name(), p)
	}
	switch {
	case err == nil:
		return wire.OK
	case errors.Is(err, exchange.ErrNotSuperStream):
		return wire.StreamDoesNotExist
	case isAccessError(err) || exchange.KindOf(err) == exchange.KindAccessRefused:
		c.denied("delete super stream", f.Name, err)
		return wire.AccessRefused
	}
	return codeOf(err)
}

// partitionIndex is the index of stream among its super stream's
// partitions when a subscription names that super stream (the property
// super-stream, as RabbitMQ's clients set it), else -1.
func (c *conn) partitionIndex(stream, super string) int {
	if super == "" {
		return -1
	}
	s, i, ok := c.vh.PartitionOf(stream)
	if !ok || s != super {
		return -1
	}
	return i
}
