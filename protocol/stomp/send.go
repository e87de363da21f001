package stomp

import (
	"strconv"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// maxTxFrames bounds the frames buffered in a connection's open
// transactions (their bodies are bounded by the frame body limit).
const maxTxFrames = 100_000

// maxTransactions bounds a connection's open transactions.
const maxTransactions = 1000

// transaction buffers the SEND, ACK and NACK frames of a BEGIN until
// COMMIT runs them in order or ABORT drops them.
type transaction struct {
	frames []frame.Frame
}

func cloneFrame(f *frame.Frame) frame.Frame {
	return frame.Frame{Command: f.Command, Headers: append([]frame.Header(nil), f.Headers...), Body: f.Body}
}

// inTransaction buffers f if it names a transaction; it reports whether it did.
func (c *conn) inTransaction(f *frame.Frame) (bool, error) {
	name, ok := f.Get("transaction")
	if !ok {
		return false, nil
	}
	tx := c.txs[name]
	if tx == nil {
		return true, errorf("Bad transaction", "Invalid transaction identifier: %s\n", name)
	}
	if c.txFrames >= maxTxFrames || c.txBytes+len(f.Body) > c.s.lim.MaxBodySize {
		return true, errorf("Transaction too large", "open transactions may buffer at most %d frames and %d body bytes\n",
			maxTxFrames, c.s.lim.MaxBodySize)
	}
	c.txFrames++
	c.txBytes += len(f.Body)
	tx.frames = append(tx.frames, cloneFrame(f))
	if id, ok := f.Get("receipt"); ok {
		c.receipt(id)
	}
	return true, nil
}

func (c *conn) send(f *frame.Frame) error {
	if buffered, err := c.inTransaction(f); buffered || err != nil {
		return err
	}
	rid, _ := f.Get("receipt")
	return c.doSend(f, rid, false)
}

// doSend publishes f. With a receipt id (or barrier, for COMMIT) the
// RECEIPT waits for the store when the message is persistent.
func (c *conn) doSend(f *frame.Frame, rid string, barrier bool) error {
	if err := c.admitPublish(); err != nil {
		return err
	}
	dh, ok := f.Get("destination")
	if !ok {
		return errorf("Missing destination", "SEND must include a 'destination', and optional 'receipt' headers\n")
	}
	d, perr := c.sendDestination(dh)
	if perr != nil {
		return perr
	}
	switch d.kind {
	case destQueue:
		if !c.declared[d.name] {
			if _, err := c.declareQueue(d.name, f, queueParams{durable: true}); err != nil {
				return err
			}
			c.declared[d.name] = true
		}
	case destTempQueue:
		name, err := c.ensureReplyQueue(d.name)
		if err != nil {
			return err
		}
		d = destination{kind: destReplyQueue, name: name}
	}
	xname, key := d.route()
	if !c.canWrite[xname] {
		if err := c.check(auth.Write, "exchange", xname); err != nil {
			return err
		}
		c.canWrite[xname] = true
	}
	if err := c.checkTopic(auth.Write, xname, key); err != nil {
		return err
	}
	msg := &exchange.Message{Exchange: xname, RoutingKey: key, Body: f.Body}
	if err := c.properties(&msg.Props, f); err != nil {
		return err
	}
	if u := msg.Props.UserID; u != "" && u != c.user.Name() {
		return errorf("precondition_failed", "user_id property set to '%s' but authenticated user was '%s'", u, c.user.Name())
	}
	var o exchange.PublishOpts
	var seq uint64
	wait := rid != "" || barrier
	if wait {
		seq = c.addReceipt(rid, true)
		o = exchange.PublishOpts{Confirmer: c, Tag: seq, Protocol: exchange.ProtoSTOMP}
	}
	o.Batch = &c.batch
	sp := c.s.cfg.Tracer.Publish(msg, tracing.Protocol{Name: "stomp", Version: c.version.String()})
	res, err := c.vh.Publish(msg, o)
	sp.End(res.Routed, err)
	if err != nil {
		if wait {
			c.dropReceipt(seq)
		}
		return err
	}
	c.published.Add(1)
	if wait && !res.Pending {
		c.settleReceipt(seq, res.OK)
	}
	return nil
}

// sendDestination parses a SEND destination, remembering the last one:
// a publisher usually sends to one destination over and over.
func (c *conn) sendDestination(dh string) (destination, *Error) {
	if dh == c.lastDest && dh != "" {
		return c.lastParsed, nil
	}
	d, err := parseDestination(dh)
	if err == nil {
		c.lastDest, c.lastParsed = dh, d
	}
	return d, err
}

// dropReceipt turns a queued receipt into a satisfied barrier (its SEND failed).
func (c *conn) dropReceipt(seq uint64) {
	c.rmu.Lock()
	if seq >= c.rbase && seq-c.rbase < uint64(len(c.receipts)) {
		e := &c.receipts[seq-c.rbase]
		e.ready, e.barrier = true, true
		c.flushReceiptsLocked()
	}
	c.rmu.Unlock()
}

// audit records a queue's creation or deletion, and by whom, in the audit
// log (when one is configured).
func (c *conn) audit(event, kind, name string) {
	if c.s.users.Auditing() {
		c.s.users.AuditObject(event, c.user.Name(), c.t.remote(), "stomp", c.vh.Name(), kind, name)
	}
}

// actor is the connection's user as the identity of its topology commands.
func (c *conn) actor() auth.Actor { return auth.Actor{Users: c.s.users, User: c.user} }

func (c *conn) check(perm auth.Perm, kind, name string) error {
	return c.s.users.Check(c.user, c.vh.Name(), perm, kind, name)
}

// seenBefore reports whether key occurs in hs before index i (1.2: the
// first occurrence of a repeated header wins).
func seenBefore(hs []frame.Header, i int) bool {
	for j := 0; j < i; j++ {
		if hs[j].Key == hs[i].Key {
			return true
		}
	}
	return false
}

// properties maps SEND headers onto message properties as RabbitMQ does;
// headers that are not properties become AMQP headers (strings).
func (c *conn) properties(p *exchange.Properties, f *frame.Frame) error {
	for i := range f.Headers {
		h := &f.Headers[i]
		if seenBefore(f.Headers, i) {
			continue
		}
		switch h.Key {
		case "destination", "content-length", "receipt", "transaction":
		case "content-type":
			p.ContentType = h.Value
		case "content-encoding":
			p.ContentEncoding = h.Value
		case "persistent":
			if h.Value == "true" {
				p.DeliveryMode = 2
			}
		case "priority":
			if n, err := strconv.ParseUint(h.Value, 10, 8); err == nil {
				p.Priority = uint8(n)
			}
		case "correlation-id":
			p.CorrelationID = h.Value
		case "reply-to":
			p.ReplyTo = h.Value
			if d, err := parseDestination(h.Value); err == nil && d.kind == destTempQueue {
				name, err := c.ensureReplyQueue(d.name)
				if err != nil {
					return err
				}
				p.ReplyTo = name
			}
		case "expiration":
			p.Expiration = h.Value
		case "amqp-message-id":
			p.MessageID = h.Value
		case "timestamp":
			if n, err := strconv.ParseInt(h.Value, 10, 64); err == nil {
				p.Timestamp = time.Unix(n, 0)
			}
		case "type":
			p.Type = h.Value
		case "user-id":
			p.UserID = h.Value
		case "app-id":
			p.AppID = h.Value
		default:
			if p.Headers == nil {
				p.Headers = exchange.Table{}
			}
			p.Headers[h.Key] = h.Value
		}
	}
	return nil
}

// ensureReplyQueue returns the private queue behind /temp-queue/id,
// declaring it and subscribing to it on first use, as RabbitMQ does.
func (c *conn) ensureReplyQueue(id string) (string, error) {
	if name, ok := c.replyQs[id]; ok {
		return name, nil
	}
	name := randomID("stomp.gen-")
	if _, err := c.vh.Do(c.actor(), exchange.QueueDeclare{Name: name, Opts: exchange.QueueOpts{Exclusive: true, AutoDelete: true, Owner: c}}); err != nil {
		return "", err
	}
	subID := prefixTempQueue + "/" + id
	s := c.newSubscription(subID, name, ackAuto)
	cons, err := c.vh.Consume(name, exchange.ConsumeOpts{Tag: s.tag, NoAck: true, Sink: s, Owner: c, Protocol: exchange.ProtoSTOMP})
	if err != nil {
		return "", err
	}
	s.cons = cons
	c.subs[subID] = s
	c.replyQs[id] = name
	return name, nil
}

// --- transactions ---

func (c *conn) txName(f *frame.Frame) (string, error) {
	name, ok := f.Get("transaction")
	if !ok {
		return "", errorf("Missing transaction", "\"%s\" must include a 'transaction' header", f.Command)
	}
	return name, nil
}

func (c *conn) begin(f *frame.Frame) error {
	name, err := c.txName(f)
	if err != nil {
		return err
	}
	if old := c.txs[name]; old != nil {
		c.forget(old)
	} else if len(c.txs) >= maxTransactions {
		return errorf("Too many transactions", "at most %d transactions may be open at once\n", maxTransactions)
	}
	c.txs[name] = &transaction{}
	return nil
}

func (c *conn) commit(f *frame.Frame) error {
	name, err := c.txName(f)
	if err != nil {
		return err
	}
	tx := c.txs[name]
	if tx == nil {
		return errorf("Bad transaction", "Invalid transaction identifier: %s\n", name)
	}
	delete(c.txs, name)
	c.forget(tx)
	for i := range tx.frames {
		fr := &tx.frames[i]
		switch fr.Command {
		case frame.SEND:
			err = c.doSend(fr, "", true)
		case frame.ACK:
			err = c.doAck(fr, true)
		case frame.NACK:
			err = c.doAck(fr, false)
		}
		if err != nil {
			return err
		}
	}
	// The COMMIT's receipt follows the store confirms of its messages.
	if id, ok := f.Get("receipt"); ok {
		c.receipt(id)
	}
	return nil
}

func (c *conn) abort(f *frame.Frame) error {
	name, err := c.txName(f)
	if err != nil {
		return err
	}
	tx := c.txs[name]
	if tx == nil {
		return errorf("Bad transaction", "Invalid transaction identifier: %s\n", name)
	}
	delete(c.txs, name)
	c.forget(tx)
	return nil
}

// forget releases a transaction's share of the buffering limits.
func (c *conn) forget(tx *transaction) {
	c.txFrames -= len(tx.frames)
	for i := range tx.frames {
		c.txBytes -= len(tx.frames[i].Body)
	}
}

// disconnect sends the DISCONNECT's receipt after every earlier one.
func (c *conn) disconnect(f *frame.Frame) {
	if id, ok := f.Get("receipt"); ok {
		c.receipt(id)
		c.waitReceipts(10 * time.Second)
	}
}
