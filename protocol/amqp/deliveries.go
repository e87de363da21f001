package amqp

import (
	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
)

// unackedRef maps a delivery tag to the queue's handle.
type unackedRef struct {
	tag uint64
	q   *exchange.Queue
	seq uint64
	at  int64 // delivered no earlier than this (conn.now, unix ns): consumer timeout
}

// requeue returns deliveries to their queues (or drops them), grouped by queue.
func (ch *channel) requeue(refs []unackedRef, requeue bool) {
	for len(refs) > 0 {
		q := refs[0].q
		seqs := ch.scratch[:0]
		rest := refs[:0]
		for _, r := range refs {
			if r.q == nil {
				continue
			}
			if r.q == q {
				seqs = append(seqs, r.seq)
			} else {
				rest = append(rest, r)
			}
		}
		if q != nil && len(seqs) > 0 {
			q.Reject(seqs, requeue)
		}
		ch.scratch = seqs[:0]
		refs = rest
	}
}

func (ch *channel) get(m *wire.BasicGet) error {
	if err := ch.check(auth.Read, "queue", m.Queue); err != nil {
		return err
	}
	q, err := ch.vh().Queue(m.Queue, ch.c)
	if err != nil {
		return err
	}
	if err := q.CheckGet(); err != nil {
		return err
	}
	// Take the message first (the queue's lock comes before dmu in the
	// lock order), then assign its tag under dmu so that tags reach the
	// client in order with deliveries.
	d, ok, err := q.Fetch(m.NoAck)
	if err != nil {
		return err // the queue's leader did not answer: a channel error, never get-empty
	}
	if !ok {
		ch.stats.getEmpty.Add(1)
		ch.c.send(ch.id, &wire.BasicGetEmpty{})
		return nil
	}
	ch.dmu.Lock()
	ch.nextTag++
	if d.Redelivered {
		ch.counts.redeliver++
	}
	tag := ch.nextTag
	if m.NoAck {
		ch.counts.getNoAck++
	} else {
		ch.counts.get++
		ch.c.watchTimeouts()
		ch.unacked = append(ch.unacked, unackedRef{tag: tag, q: q, seq: d.Seq, at: ch.c.wd.Now()})
	}
	ch.c.s.cfg.Tracer.Deliver(d, tracing.AMQP091)
	ch.c.w.Mu.Lock()
	gm := wire.BasicGetOK{DeliveryTag: tag, Redelivered: d.Redelivered, Exchange: d.Msg.Exchange,
		RoutingKey: d.Msg.RoutingKey, MessageCount: uint32(d.Remaining)}
	ch.c.appendContentLocked(ch.id, &gm, d.Msg, nil)
	ch.c.w.Mu.Unlock()
	ch.dmu.Unlock()
	return nil
}

// settle handles basic.ack, basic.nack and basic.reject.
func (ch *channel) settle(m wire.Method, tag uint64, multiple, ack, requeue bool) error {
	if ch.tx {
		if err := ch.checkTag(m, tag, multiple); err != nil {
			return err
		}
		ch.txAcks = append(ch.txAcks, txAck{tag: tag, multiple: multiple, requeue: requeue, ack: ack})
		return nil
	}
	refs, err := ch.take(m, tag, multiple, ack)
	if err != nil {
		return err
	}
	if !ack {
		for _, r := range refs {
			if err := r.q.CheckReject(); err != nil {
				return err
			}
		}
	}
	ch.apply(refs, ack, requeue)
	return nil
}

func (ch *channel) apply(refs []unackedRef, ack, requeue bool) {
	if !ack {
		ch.requeue(refs, requeue)
		return
	}
	for len(refs) > 0 {
		q := refs[0].q
		seqs := ch.scratch[:0]
		rest := refs[:0]
		for _, r := range refs {
			if r.q == q {
				seqs = append(seqs, r.seq)
			} else {
				rest = append(rest, r)
			}
		}
		if len(seqs) == 1 {
			q.Ack(seqs[0])
		} else {
			q.AckMany(seqs)
		}
		ch.scratch = seqs[:0]
		refs = rest
	}
}

// checkTag verifies a tag without taking it (for transactions).
func (ch *channel) checkTag(m wire.Method, tag uint64, multiple bool) error {
	ch.dmu.Lock()
	defer ch.dmu.Unlock()
	if (multiple && tag == 0) || ch.timedOut {
		return nil
	}
	if i := ch.find(tag); i < 0 {
		return chanErr(wire.PreconditionFailed, m, "unknown delivery tag %d", tag)
	}
	return nil
}

// find returns the index in unacked of tag, or -1.
func (ch *channel) find(tag uint64) int {
	lo, hi := ch.uhead, len(ch.unacked)
	for lo < hi {
		mid := (lo + hi) / 2
		if ch.unacked[mid].tag < tag {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(ch.unacked) && ch.unacked[lo].tag == tag && ch.unacked[lo].q != nil {
		return lo
	}
	return -1
}

// take removes tag (or every tag up to it, with multiple; tag 0 with
// multiple means all) from the unacked list; with ack they count as
// acknowledged in the channel's message_stats.
func (ch *channel) take(m wire.Method, tag uint64, multiple, ack bool) ([]unackedRef, error) {
	ch.dmu.Lock()
	defer ch.dmu.Unlock()
	if ch.timedOut {
		return nil, nil // the watchdog took them back
	}
	if multiple {
		end := len(ch.unacked)
		if tag != 0 {
			lo, hi := ch.uhead, len(ch.unacked)
			for lo < hi {
				mid := (lo + hi) / 2
				if ch.unacked[mid].tag <= tag {
					lo = mid + 1
				} else {
					hi = mid
				}
			}
			end = lo
			if ch.find(tag) < 0 {
				return nil, chanErr(wire.PreconditionFailed, m, "unknown delivery tag %d", tag)
			}
		}
		out := make([]unackedRef, 0, end-ch.uhead)
		for i := ch.uhead; i < end; i++ {
			if ch.unacked[i].q != nil {
				out = append(out, ch.unacked[i])
			}
		}
		ch.uhead = end
		ch.compact()
		if ack {
			ch.counts.ack += uint64(len(out))
		}
		return out, nil
	}
	i := ch.find(tag)
	if i < 0 {
		return nil, chanErr(wire.PreconditionFailed, m, "unknown delivery tag %d", tag)
	}
	r := ch.unacked[i]
	ch.unacked[i].q = nil
	for ch.uhead < len(ch.unacked) && ch.unacked[ch.uhead].q == nil {
		ch.uhead++
	}
	ch.compact()
	if ack {
		ch.counts.ack++
	}
	return []unackedRef{r}, nil
}

// compact drops the settled prefix of the unacked list. Called with dmu.
func (ch *channel) compact() {
	if ch.uhead == len(ch.unacked) {
		ch.unacked, ch.uhead = ch.unacked[:0], 0
		return
	}
	if ch.uhead > 1024 && ch.uhead*2 > len(ch.unacked) {
		n := copy(ch.unacked, ch.unacked[ch.uhead:])
		ch.unacked, ch.uhead = ch.unacked[:n], 0
	}
}

// recover requeues every unacked delivery of the channel.
func (ch *channel) recover() {
	ch.dmu.Lock()
	refs := append([]unackedRef(nil), ch.unacked[ch.uhead:]...)
	ch.unacked, ch.uhead = ch.unacked[:0], 0
	ch.dmu.Unlock()
	ch.requeue(refs, true)
}
