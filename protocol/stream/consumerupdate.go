package stream

import (
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// Single active consumer (RabbitMQ 3.11): a subscription with the
// properties single-active-consumer=true and name=<group> is a member of
// the stream's group of that name (exchange/streamsac.go). When the core
// makes it active, the broker sends it ConsumerUpdate(active) and waits
// for the client's answer, whose offset specification says where it
// starts (none or a bad one: after the offset stored under the group's
// name, else the subscription's own offset). A member that must step
// down (a partition moving to a newcomer) gets ConsumerUpdate(inactive),
// its deliveries not yet written are dropped, and the next member is
// activated once it answered. The subscription's acks store nothing: the
// client stores offsets itself (StoreOffset under the group's name).
//
// An answer that does not come within consumerUpdateTimeout is taken as
// one without an offset, so that a silent client cannot hold its group.

var consumerUpdateTimeout = 30 * time.Second

// Activation is the core's request (stream.mu held): ask the client.
func (s *subscription) Activation(_ *exchange.Consumer, active bool) {
	c := s.c
	c.w.Mu.Lock()
	defer c.w.Mu.Unlock()
	if s.gone || c.w.Closed {
		return // cleanup cancels it, which moves the group on
	}
	if !active {
		// Stepping down: what waits for credit is not written; its
		// credit goes back to the core with the writer's acks.
		for _, d := range s.pending {
			c.toAck = append(c.toAck, ackRef{q: d.Queue, seq: d.Seq})
		}
		if len(s.runs) > 0 {
			last := s.runs[len(s.runs)-1]
			n := -s.runAt
			for _, r := range s.runs {
				n += len(r.Recs)
			}
			c.toAck = append(c.toAck, ackRef{q: last.Queue, seq: last.Seq, n: n})
		}
		s.dropPending()
	}
	corr := c.corr.Add(1)
	if s.askT != nil {
		s.askT.Stop()
	}
	s.askCorr, s.askActive = corr, active
	s.askT = time.AfterFunc(consumerUpdateTimeout, func() { c.consumerUpdated(corr, nil) })
	if !s.answered {
		return // subscribe writes it after its answer
	}
	c.w.Buf = wire.AppendConsumerUpdate(c.w.Buf, corr, s.id, active)
	c.w.Signal()
}

// consumerUpdateResponse takes the client's answer.
func (c *conn) consumerUpdateResponse(f wire.ConsumerUpdateResponse) {
	var off any
	if f.Code == wire.OK {
		off, _ = offsetArg(f.OffsetType, f.Offset)
	}
	c.consumerUpdated(f.Corr, off)
}

// consumerUpdated hands the answer to corr (or its timeout, off nil) to
// the core, unless it was answered already.
func (c *conn) consumerUpdated(corr uint32, off any) {
	var cons *exchange.Consumer
	c.w.Mu.Lock()
	for _, s := range c.wsubs {
		if s.askCorr == corr && corr != 0 {
			s.askCorr = 0
			s.askT.Stop()
			cons = s.cons
			break
		}
	}
	c.w.Mu.Unlock()
	if cons != nil {
		cons.ActivationAnswered(off)
	}
}
