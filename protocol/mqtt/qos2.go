package mqtt

import (
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/exchange"
)

// QoS 2 state of a persistent session survives a restart, kill -9
// included: the inbound packet ids awaiting PUBREL and the outbound ones
// awaiting PUBCOMP are part of the session's store record.
//
// The record is written by the connection's writer, once per outbound
// batch, and only when the batch holds a PUBREC, PUBREL or PUBCOMP and
// the QoS 2 state changed since the last write (session.qos2Dirty), so
// QoS 0 and 1 traffic never writes it. Before those packets leave:
//
//   - PUBREC: the packet id is stored, so a PUBLISH the client resends
//     after a restart (it did not see the PUBREC) is known as a duplicate
//     and not routed again.
//   - PUBCOMP: the packet id is gone from the store, so a new PUBLISH
//     that reuses it after a restart is not taken for a duplicate.
//   - PUBREL: the outbound packet id is stored and only then is the core
//     message acknowledged (after the flush), so after a restart the
//     session resends PUBREL instead of losing track of a packet id the
//     client holds.
//
// A PUBCOMP received only marks the state changed: it is written with the
// next record or when the connection ends. A crash before that makes the
// session resend a PUBREL the client answers with PUBCOMP again, which is
// harmless.
//
// What is left: a crash between the store's confirm of an inbound QoS 2
// message and the record write (the PUBREC has not left) lets the client's
// resend route the message again, and a crash between the record write
// and a PUBREL's core acknowledgement reaching the disk delivers the
// message again under a new packet id.

// releasedPIDs appends the outbound QoS 2 packet ids awaiting PUBCOMP to l.
func (c *conn) releasedPIDs(l []uint16) []uint16 {
	c.infMu.Lock()
	defer c.infMu.Unlock()
	c.inflight.each(func(pid uint16, f inflight) {
		if f.released {
			l = append(l, pid)
		}
	})
	return l
}

// saveQoS2Before writes a persistent session's record before batch goes
// out, when batch holds a QoS 2 acknowledgement and the state changed.
func (c *conn) saveQoS2Before(batch []outItem) {
	se := c.se
	if se == nil || !se.qos2Dirty.Load() {
		return
	}
	need := false
	for i := range batch {
		if it := &batch[i]; it.kind == itemAck && it.typ != packets.Puback {
			need = true
			break
		}
	}
	if !need {
		return
	}
	se.mu.Lock()
	p := se.persistent
	se.mu.Unlock()
	if !p {
		se.qos2Dirty.Store(false)
		return
	}
	if err := c.s.saveSession(se); err != nil {
		c.s.log.Error("store session QoS 2 state", "client_id", c.clientID, "err", err)
	}
}

// settleReleased runs at cleanup: it writes a persistent session's record
// if its QoS 2 state changed (so PUBCOMPs received since the last write
// are not resent as PUBREL after a restart), then acknowledges the core
// messages of PUBRELs that were queued but not written: the client has
// them (it sent PUBREC), and the session resends PUBREL when it resumes.
func (c *conn) settleReleased(acks map[*exchange.Queue][]uint64) {
	if se := c.se; se != nil && se.qos2Dirty.Load() {
		se.mu.Lock()
		p := se.persistent && !se.ended
		se.mu.Unlock()
		if p {
			if err := c.s.saveSession(se); err != nil {
				c.s.log.Error("store session QoS 2 state", "client_id", c.clientID, "err", err)
			}
		}
	}
	for q, seqs := range acks {
		q.AckMany(seqs)
	}
}
