package amqp

import "github.com/trident-broker/trident/protocol/amqp/wire"

// Publisher confirms are coalesced as RabbitMQ does: a run of positive
// confirms for consecutive tags goes out as one basic.ack with
// multiple=true when the writer next takes the output buffer, instead of
// one frame per message.
//
// What a multiple ack for tag T covers is every tag up to T that the
// client has not seen confirmed yet, so a run may only hold tags that
// follow, without a gap, the last tag written in order:
//   - a confirm in order (its tag is the next one) joins the run;
//   - a nack in order ends the run (written first) and goes out alone,
//     multiple=false: no multiple ack ever covers a nack;
//   - a confirm out of order (an earlier tag is still pending, say a
//     persistent message behind a transient one) ends the run and goes out
//     alone at once; the tag is remembered, and when the in-order tags
//     reach it the run is written up to the tag before it and restarts
//     after it, so no multiple ack covers a tag the client already has.
//
// Confirms therefore reach the client in the order the core gave them,
// and a tag is confirmed exactly once.

// confirmState is a channel's confirm bookkeeping, under its conn's w.Mu.
type confirmState struct {
	next   uint64          // the lowest tag not yet confirmed in order (tags start at 1)
	sent   uint64          // the highest tag of the in-order sequence written
	queued bool            // in conn.confirmRuns
	early  map[uint64]bool // tags written out of order, all ≥ next
	// confirmed counts the publishes confirmed positively (basic.ack
	// written, a multiple one counting every tag it covers), for
	// management's message_stats.confirm.
	confirmed uint64
}

// sendConfirm records the outcome of publish tag on channel ch.
func (c *conn) sendConfirm(ch *channel, tag uint64, ok bool) {
	c.w.Mu.Lock()
	defer c.w.Mu.Unlock()
	if c.w.Closed {
		return
	}
	cf := &ch.cf
	if cf.next == 0 {
		cf.next = 1
	}
	if tag != cf.next {
		// Out of order (or a tag already passed, which the core does
		// not give; it is written as it comes rather than lost).
		c.writeRunLocked(ch)
		c.appendConfirmLocked(ch.id, tag, false, ok)
		if ok {
			cf.confirmed++
		}
		if tag > cf.next {
			if cf.early == nil {
				cf.early = map[uint64]bool{}
			}
			cf.early[tag] = true
		}
		c.queued()
		return
	}
	if !ok {
		c.writeRunLocked(ch)
		c.appendConfirmLocked(ch.id, tag, false, false)
		cf.sent = tag
		cf.next = tag + 1
		c.skipEarlyLocked(ch)
		c.queued()
		return
	}
	cf.next = tag + 1
	if len(cf.early) > 0 && cf.early[cf.next] {
		c.writeRunLocked(ch)
		c.skipEarlyLocked(ch)
		c.queued()
		return
	}
	if !cf.queued {
		cf.queued = true
		c.confirmRuns = append(c.confirmRuns, ch)
		c.queued()
	}
}

// skipEarlyLocked moves the in-order point past the tags already written
// out of order, the run having been written up to them.
func (c *conn) skipEarlyLocked(ch *channel) {
	cf := &ch.cf
	for len(cf.early) > 0 && cf.early[cf.next] {
		delete(cf.early, cf.next)
		cf.sent = cf.next
		cf.next++
	}
}

// writeRunLocked appends ch's pending run of acks, if any.
func (c *conn) writeRunLocked(ch *channel) {
	cf := &ch.cf
	if end := cf.next - 1; cf.next > 0 && end > cf.sent {
		c.appendConfirmLocked(ch.id, end, end-cf.sent > 1, true)
		cf.confirmed += end - cf.sent
		cf.sent = end
	}
}

// writeConfirmRunsLocked appends every channel's pending run.
func (c *conn) writeConfirmRunsLocked() {
	for i, ch := range c.confirmRuns {
		c.writeRunLocked(ch)
		ch.cf.queued = false
		c.confirmRuns[i] = nil
	}
	c.confirmRuns = c.confirmRuns[:0]
}

func (c *conn) appendConfirmLocked(ch uint16, tag uint64, multiple, ok bool) {
	var m wire.Method
	if ok {
		c.ack = wire.BasicAck{DeliveryTag: tag, Multiple: multiple}
		m = &c.ack
	} else {
		c.nack = wire.BasicNack{DeliveryTag: tag, Multiple: multiple}
		m = &c.nack
	}
	c.w.Buf, _ = wire.AppendMethodFrame(c.w.Buf, ch, m)
}
