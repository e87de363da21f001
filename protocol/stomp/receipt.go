package stomp

import (
	"time"

	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// receiptEntry is a RECEIPT to send, or (with an empty id) a barrier that
// later receipts wait for. Receipts go out in the order of the frames that
// asked for them; one for a persistent SEND waits for the store.
type receiptEntry struct {
	id      string
	ready   bool
	failed  bool
	barrier bool
}

// addReceipt queues a receipt (id "" for a barrier) and returns its
// sequence number, the tag to settle it with when wait is true.
func (c *conn) addReceipt(id string, wait bool) uint64 {
	c.rmu.Lock()
	seq := c.rbase + uint64(len(c.receipts))
	c.receipts = append(c.receipts, receiptEntry{id: id, ready: !wait, barrier: id == ""})
	if !wait {
		c.flushReceiptsLocked()
	}
	c.rmu.Unlock()
	return seq
}

// receipt sends a RECEIPT for id once every earlier pending one is out.
func (c *conn) receipt(id string) { c.addReceipt(id, false) }

// Confirm implements exchange.Confirmer: the store has (or has not) made
// the SEND with this receipt sequence number durable.
func (c *conn) Confirm(tag uint64, ok bool) { c.settleReceipt(tag, ok) }

func (c *conn) settleReceipt(seq uint64, ok bool) {
	c.rmu.Lock()
	if seq >= c.rbase && seq-c.rbase < uint64(len(c.receipts)) {
		e := &c.receipts[seq-c.rbase]
		e.ready = true
		e.failed = !ok
		c.flushReceiptsLocked()
	}
	c.rmu.Unlock()
}

// flushReceiptsLocked writes the ready prefix of the receipt queue.
func (c *conn) flushReceiptsLocked() {
	n := 0
	for n < len(c.receipts) && c.receipts[n].ready {
		e := c.receipts[n]
		n++
		if e.failed {
			c.rbase += uint64(n)
			c.receipts = c.receipts[n:]
			c.rcond.Broadcast()
			c.rmu.Unlock()
			c.kill(&Error{Message: "Message rejected", Detail: "The broker could not store or route a persistent message.\n"}, e.id)
			c.rmu.Lock()
			n = 0
			continue
		}
		if !e.barrier {
			c.writeFrame(&frame.Frame{Command: frame.RECEIPT, Headers: []frame.Header{{Key: "receipt-id", Value: e.id}}})
		}
	}
	if n > 0 {
		c.rbase += uint64(n)
		c.receipts = c.receipts[n:]
		if len(c.receipts) == 0 {
			c.receipts = nil
		}
		c.rcond.Broadcast()
	}
}

// waitReceipts waits until every queued receipt is out, or timeout.
func (c *conn) waitReceipts(timeout time.Duration) {
	t := time.AfterFunc(timeout, func() {
		c.rmu.Lock()
		c.rcond.Broadcast()
		c.rmu.Unlock()
	})
	defer t.Stop()
	deadline := time.Now().Add(timeout)
	c.rmu.Lock()
	for len(c.receipts) > 0 && time.Now().Before(deadline) {
		c.rcond.Wait()
	}
	c.rmu.Unlock()
}
