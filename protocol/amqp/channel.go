package amqp

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"sync/atomic"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/event"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/protocol/frontend/tracing"
)

type chanState uint8

const (
	chOpen    chanState = iota
	chClosing           // we sent channel.close; waiting for close-ok
)

// unackedRef maps a delivery tag to the queue's handle.
type unackedRef struct {
	tag uint64
	q   *exchange.Queue
	seq uint64
	at  int64 // delivered no earlier than this (conn.now, unix ns): consumer timeout
}

// channel is one AMQP channel. Its methods run on the connection's reader
// goroutine, except Deliver, Cancelled and Confirm, which the core calls.
type channel struct {
	c     *conn
	id    uint16
	state chanState

	// Publishing (reader goroutine only).
	pub       wire.BasicPublish
	pubIn     wire.BasicPublish // decode target of basic.publish frames
	pubActive bool
	pubHeader bool
	pubProps  wire.Properties
	pubSize   uint64
	pubBody   []byte
	pubMsg    *exchange.Message // allocated with the content header
	permCache map[string]bool   // exchange name → write permitted
	permVer   uint64            // the user's CredentialVersion when permCache was filled
	topics    auth.TopicCache   // topic permission decisions (topicperm.go)

	// Confirms.
	confirm bool
	pubSeq  uint64
	cf      confirmState // under c.w.Mu (confirms.go)

	// Transactions (reader goroutine only).
	tx      bool
	txPubs  []txPublish
	txAcks  []txAck
	txError *wire.Error

	// Consumers (reader goroutine; read by sinks only through their own fields).
	consumers map[string]*sink
	prefetch  int // basic.qos global=false: for new consumers
	limit     exchange.Limit
	replyTo   string // direct reply-to name, once consuming it

	// stats are what management reads from other goroutines; the reader
	// keeps them up to date where its own fields change.
	stats chanStats

	// Deliveries: tag counter, unacked list and the delivery counters
	// management samples (deliverCounts), under dmu.
	dmu     sync.Mutex
	nextTag uint64
	counts  deliverCounts
	unacked []unackedRef
	uhead   int
	scratch []uint64 // reader goroutine: seqs to ack per queue

	// Consumer timeout (timeout.go): timedOut (under dmu) is set when the
	// watchdog took the unacked deliveries back and sent channel.close;
	// expired is the same for the reader, which then treats the channel
	// as closing. Deliveries that arrive after it wait in orphans (under
	// dmu) to be requeued by cleanup.
	timedOut bool
	expired  atomic.Bool
	orphans  []unackedRef
}

type chanStats struct {
	published   atomic.Uint64
	getEmpty    atomic.Uint64
	consumers   atomic.Int32
	prefetch    atomic.Int32
	globalPref  atomic.Int32
	unconfirmed atomic.Int64
	txMsgs      atomic.Int32
	txAcks      atomic.Int32
	confirm     atomic.Bool
	tx          atomic.Bool
}

// deliverCounts are a channel's delivery counters for management's
// message_stats, kept under dmu where the delivery tag is assigned (plain
// increments under a lock already held, no atomic per message): deliveries
// to consumers with and without acknowledgement, basic.get with and
// without, deliveries flagged redelivered, and acknowledged deliveries.
type deliverCounts struct {
	deliver, deliverNoAck, get, getNoAck, redeliver, ack uint64
}

// syncStats copies the reader's own fields into stats (after each
// method but basic.publish, whose counters are kept where they change).
func (ch *channel) syncStats() {
	st := &ch.stats
	st.consumers.Store(int32(len(ch.consumers)))
	st.prefetch.Store(int32(ch.prefetch))
	st.txMsgs.Store(int32(len(ch.txPubs)))
	st.txAcks.Store(int32(len(ch.txAcks)))
	st.confirm.Store(ch.confirm)
	st.tx.Store(ch.tx)
}

// info is the channel as management sees it; safe from any goroutine.
func (ch *channel) info() ChanInfo {
	ch.dmu.Lock()
	unacked := 0
	for _, r := range ch.unacked[ch.uhead:] {
		if r.q != nil {
			unacked++
		}
	}
	n := ch.counts
	ch.dmu.Unlock()
	ch.c.w.Mu.Lock() // not nested in dmu: dmu comes before w.Mu
	confirmed := ch.cf.confirmed
	ch.c.w.Mu.Unlock()
	st := &ch.stats
	return ChanInfo{Number: int(ch.id), Consumers: int(st.consumers.Load()), Prefetch: int(st.prefetch.Load()),
		GlobalPrefetch: int(st.globalPref.Load()), Unacked: unacked, Unconfirmed: int(max(st.unconfirmed.Load(), 0)),
		UncommittedMessages: int(st.txMsgs.Load()), UncommittedAcks: int(st.txAcks.Load()),
		Confirm: st.confirm.Load(), Transactional: st.tx.Load(),
		Published: st.published.Load(), Confirmed: confirmed, Delivered: n.deliver, DeliveredNoAck: n.deliverNoAck,
		Got: n.get, GotNoAck: n.getNoAck, GetEmpty: st.getEmpty.Load(), Redelivered: n.redeliver, Acked: n.ack}
}

type txPublish struct {
	msg       *exchange.Message
	mandatory bool
}

type txAck struct {
	tag               uint64
	multiple, requeue bool
	ack               bool
}

func newChannel(c *conn, id uint16) *channel {
	ch := &channel{c: c, id: id, consumers: map[string]*sink{}}
	return ch
}

// method runs one method received on the channel.
func (ch *channel) method(m wire.Method) error {
	if ch.state == chOpen && ch.expired.Load() {
		// The consumer timeout closed the channel (timeout.go).
		ch.cleanup()
		ch.state = chClosing
	}
	if ch.state == chClosing {
		// We sent channel.close: only the end of the close matters.
		switch m.(type) {
		case *wire.ChannelCloseOK:
			ch.c.removeChannel(ch.id)
		case *wire.ChannelClose:
			// Both sides closed at once: each answers close-ok and the
			// channel is closed (the client may not send close-ok for
			// ours after its own close was answered).
			ch.c.removeChannel(ch.id)
			ch.c.send(ch.id, &wire.ChannelCloseOK{})
		case *wire.ChannelOpen:
			// The client considers the channel closed and reuses its
			// number: open it afresh rather than leave it waiting.
			ch.c.removeChannel(ch.id)
			return ch.c.channelMethod(ch.id, m)
		}
		return nil
	}
	if ch.pubActive {
		return connErr(wire.UnexpectedFrame, m, "expected content header for class 60, got non content header frame instead")
	}
	err := ch.dispatch(m)
	switch m.(type) {
	case *wire.BasicPublish, *wire.BasicAck, *wire.BasicNack, *wire.BasicReject:
		// The per-message methods change none of the synced fields,
		// except the uncommitted acks of a transaction.
		if ch.tx {
			ch.stats.txAcks.Store(int32(len(ch.txAcks)))
		}
	default:
		ch.syncStats()
	}
	if err == nil {
		return nil
	}
	we := protoError(err, m)
	if we.ConnectionScope {
		return we
	}
	ch.close(we)
	return nil
}

// close closes the channel from our side with a channel error.
func (ch *channel) close(we *wire.Error) {
	ch.c.logChannelError(ch.id, we)
	ch.cleanup()
	ch.state = chClosing
	ch.c.send(ch.id, &wire.ChannelClose{ReplyCode: we.Code, ReplyText: we.Text, ReplyClassID: we.ClassID, ReplyMethodID: we.MethodID})
}

// cleanup cancels the channel's consumers and requeues its unacked messages.
func (ch *channel) cleanup() {
	for tag, s := range ch.consumers {
		s.cons.Cancel()
		delete(ch.consumers, tag)
	}
	ch.dmu.Lock()
	refs := ch.unacked[ch.uhead:]
	ch.unacked, ch.uhead = nil, 0
	refs = append(refs, ch.orphans...)
	ch.orphans = nil
	ch.dmu.Unlock()
	abandonRefs(refs) // requeued, or retried (x-retry-delays)
	ch.txPubs, ch.txAcks = nil, nil
	ch.pubActive = false
	if ch.state != chClosing { // once: a channel the broker closed is cleaned up again with its connection
		ch.c.channelEvent(event.ChannelClosed, ch.id)
	}
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

func (ch *channel) vh() *exchange.VHost { return ch.c.vh }

// audit records an object's creation or deletion, and by whom, in the audit
// log (when one is configured).
func (ch *channel) audit(event, kind, name string) {
	if ch.c.s.users.Auditing() {
		ch.c.s.users.AuditObject(event, ch.c.user.Name(), ch.c.nc.RemoteAddr().String(), "amqp", ch.vh().Name(), kind, name)
	}
}

// actor is the connection's user as the identity of its topology commands.
func (ch *channel) actor() auth.Actor { return auth.Actor{Users: ch.c.s.users, User: ch.c.user} }

func (ch *channel) check(perm auth.Perm, kind, name string) error {
	if kind == "exchange" && name == "" {
		name = auth.DefaultExchangeName
	}
	return ch.c.s.users.Check(ch.c.user, ch.c.vh.Name(), perm, kind, name)
}

func randomTag(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func (ch *channel) dispatch(m wire.Method) error {
	vh := ch.vh()
	switch m := m.(type) {
	case *wire.ChannelOpen:
		return connErr(wire.ChannelError, m, "second 'channel.open' seen")
	case *wire.ChannelClose:
		ch.cleanup()
		ch.c.removeChannel(ch.id)
		ch.c.send(ch.id, &wire.ChannelCloseOK{})
		return nil
	case *wire.ChannelCloseOK:
		return nil
	case *wire.ChannelFlow:
		// As RabbitMQ: a client may not ask the server to stop deliveries
		// with channel.flow (basic.qos is the way to limit them).
		if !m.Active {
			return connErr(wire.NotImplemented, m, "active=false")
		}
		ch.c.send(ch.id, &wire.ChannelFlowOK{Active: true})
		return nil
	case *wire.ChannelFlowOK:
		return nil

	case *wire.ExchangeDeclare:
		if !m.Passive && m.Type == "" {
			if err := ch.check(auth.Configure, "exchange", m.Exchange); err != nil {
				return err
			}
			return connErr(wire.CommandInvalid, m, "invalid exchange type ''")
		}
		_, existed := vh.Exchange(m.Exchange)
		_, err := vh.Do(ch.actor(), exchange.ExchangeDeclare{Name: m.Exchange, Type: m.Type, Opts: exchange.ExchangeOpts{Durable: m.Durable, AutoDelete: m.AutoDelete,
			Internal: m.Internal, Args: m.Arguments, Passive: m.Passive}})
		if err != nil {
			return err
		}
		if !existed && !m.Passive {
			ch.audit(auth.AuditObjectCreated, "exchange", m.Exchange)
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.ExchangeDeclareOK{})
		}
		return nil
	case *wire.ExchangeDelete:
		_, existed := vh.Exchange(m.Exchange)
		if _, err := vh.Do(ch.actor(), exchange.ExchangeDelete{Name: m.Exchange, IfUnused: m.IfUnused}); err != nil {
			return err
		}
		if existed {
			ch.audit(auth.AuditObjectDeleted, "exchange", m.Exchange)
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.ExchangeDeleteOK{})
		}
		return nil
	case *wire.ExchangeBind:
		if err := ch.checkTopic(auth.Read, m.Source, m.RoutingKey); err != nil {
			return err
		}
		if _, err := vh.Do(ch.actor(), exchange.ExchangeBind{Destination: m.Destination, Source: m.Source, Key: m.RoutingKey, Args: m.Arguments}); err != nil {
			return err
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.ExchangeBindOK{})
		}
		return nil
	case *wire.ExchangeUnbind:
		if err := ch.checkTopic(auth.Read, m.Source, m.RoutingKey); err != nil {
			return err
		}
		if _, err := vh.Do(ch.actor(), exchange.ExchangeUnbind{Destination: m.Destination, Source: m.Source, Key: m.RoutingKey, Args: m.Arguments}); err != nil {
			return err
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.ExchangeUnbindOK{})
		}
		return nil

	case *wire.QueueDeclare:
		return ch.queueDeclare(m)
	case *wire.QueueBind:
		if err := ch.checkTopic(auth.Read, m.Exchange, m.RoutingKey); err != nil {
			return err
		}
		if _, err := vh.Do(ch.actor(), exchange.QueueBind{Queue: m.Queue, Exchange: m.Exchange, Key: m.RoutingKey, Args: m.Arguments, Owner: ch.c}); err != nil {
			return err
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.QueueBindOK{})
		}
		return nil
	case *wire.QueueUnbind:
		if err := ch.checkTopic(auth.Read, m.Exchange, m.RoutingKey); err != nil {
			return err
		}
		if _, err := vh.Do(ch.actor(), exchange.QueueUnbind{Queue: m.Queue, Exchange: m.Exchange, Key: m.RoutingKey, Args: m.Arguments, Owner: ch.c}); err != nil {
			return err
		}
		ch.c.send(ch.id, &wire.QueueUnbindOK{})
		return nil
	case *wire.QueuePurge:
		r, err := vh.Do(ch.actor(), exchange.QueuePurge{Name: m.Queue, Owner: ch.c})
		n := r.Count
		if err != nil {
			return err
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.QueuePurgeOK{MessageCount: uint32(n)})
		}
		return nil
	case *wire.QueueDelete:
		_, qerr := vh.Queue(m.Queue, ch.c)
		r, err := vh.Do(ch.actor(), exchange.QueueDelete{Name: m.Queue, IfUnused: m.IfUnused, IfEmpty: m.IfEmpty, Owner: ch.c})
		n := r.Count
		if err != nil {
			return err
		}
		if qerr == nil {
			ch.audit(auth.AuditObjectDeleted, "queue", m.Queue)
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.QueueDeleteOK{MessageCount: uint32(n)})
		}
		return nil

	case *wire.BasicQos:
		if m.PrefetchSize != 0 {
			return connErr(wire.NotImplemented, m, "prefetch_size!=0 (%d)", m.PrefetchSize)
		}
		if m.Global {
			ch.limit.SetMax(int(m.PrefetchCount))
			ch.stats.globalPref.Store(int32(m.PrefetchCount))
		} else {
			ch.prefetch = int(m.PrefetchCount)
		}
		ch.c.send(ch.id, &wire.BasicQosOK{})
		return nil
	case *wire.BasicConsume:
		return ch.consume(m)
	case *wire.BasicCancel:
		if s, ok := ch.consumers[m.ConsumerTag]; ok {
			delete(ch.consumers, m.ConsumerTag)
			s.cons.Cancel()
		}
		if !m.NoWait {
			ch.c.send(ch.id, &wire.BasicCancelOK{ConsumerTag: m.ConsumerTag})
		}
		return nil
	case *wire.BasicPublish:
		if m.Immediate {
			return connErr(wire.NotImplemented, m, "immediate=true")
		}
		ch.pub = *m
		ch.pubActive = true
		ch.pubHeader = false
		return nil
	case *wire.BasicGet:
		return ch.get(m)
	case *wire.BasicAck:
		return ch.settle(m, m.DeliveryTag, m.Multiple, true, false)
	case *wire.BasicNack:
		return ch.settle(m, m.DeliveryTag, m.Multiple, false, m.Requeue)
	case *wire.BasicReject:
		return ch.settle(m, m.DeliveryTag, false, false, m.Requeue)
	case *wire.BasicRecover:
		if !m.Requeue {
			// As RabbitMQ: redelivery to the same consumer is not supported.
			return connErr(wire.NotImplemented, m, "requeue=false")
		}
		ch.recover()
		ch.c.send(ch.id, &wire.BasicRecoverOK{})
		return nil
	case *wire.BasicRecoverAsync:
		if !m.Requeue {
			return connErr(wire.NotImplemented, m, "requeue=false")
		}
		ch.recover()
		return nil

	case *wire.ConfirmSelect:
		if ch.tx {
			return chanErr(wire.PreconditionFailed, m, "cannot switch from tx to confirm mode")
		}
		ch.confirm = true
		if !m.NoWait {
			ch.c.send(ch.id, &wire.ConfirmSelectOK{})
		}
		return nil
	case *wire.TxSelect:
		if ch.confirm {
			return chanErr(wire.PreconditionFailed, m, "cannot switch from confirm to tx mode")
		}
		ch.tx = true
		ch.c.send(ch.id, &wire.TxSelectOK{})
		return nil
	case *wire.TxCommit:
		if !ch.tx {
			return chanErr(wire.PreconditionFailed, m, "channel is not transactional")
		}
		if err := ch.commit(); err != nil {
			return err
		}
		ch.c.send(ch.id, &wire.TxCommitOK{})
		return nil
	case *wire.TxRollback:
		if !ch.tx {
			return chanErr(wire.PreconditionFailed, m, "channel is not transactional")
		}
		ch.txPubs, ch.txAcks = nil, nil
		ch.c.send(ch.id, &wire.TxRollbackOK{})
		return nil
	}
	return connErr(wire.CommandInvalid, m, "unexpected method %s from client", m.Name())
}

func (ch *channel) queueDeclare(m *wire.QueueDeclare) error {
	name := m.Queue
	if m.Passive && name == "" {
		return chanErr(wire.NotFound, m, "no queue '' in vhost '%s'", ch.vh().Name())
	}
	if name == exchange.ReplyToQueue || (len(name) > len(exchange.ReplyToQueue) && name[:len(exchange.ReplyToQueue)+1] == exchange.ReplyToQueue+".") {
		if !m.Passive {
			return chanErr(wire.AccessRefused, m, "queue name '%s' contains reserved prefix 'amq.*'", name)
		}
	}
	r, err := ch.vh().Do(ch.actor(), exchange.QueueDeclare{Name: name, Opts: exchange.QueueOpts{Durable: m.Durable, Exclusive: m.Exclusive,
		AutoDelete: m.AutoDelete, Args: m.Arguments, Passive: m.Passive, Owner: ch.c}})
	if err != nil {
		return err
	}
	info := r.Queue
	if info.Created {
		ch.audit(auth.AuditObjectCreated, "queue", info.Name)
	}
	if !m.NoWait {
		ch.c.send(ch.id, &wire.QueueDeclareOK{Queue: info.Name, MessageCount: uint32(info.Messages), ConsumerCount: uint32(info.Consumers)})
	}
	return nil
}

func (ch *channel) consume(m *wire.BasicConsume) error {
	tag := m.ConsumerTag
	if tag == "" {
		tag = randomTag("amq.ctag-")
	}
	if old, dup := ch.consumers[tag]; dup {
		if !old.gone.Load() {
			return connErr(wire.NotAllowed, m, "attempt to reuse consumer tag '%s'", tag)
		}
		delete(ch.consumers, tag)
	}
	s := &sink{ch: ch, tag: tag, noAck: m.NoAck}
	o := exchange.ConsumeOpts{Tag: tag, NoAck: m.NoAck, Exclusive: m.Exclusive, Sink: s, Owner: ch.c,
		Prefetch: ch.prefetch, Limit: &ch.limit, Args: m.Arguments, Protocol: exchange.ProtoAMQP}
	if p, ok := m.Arguments["x-priority"]; ok {
		n, ok := toInt(p)
		if !ok {
			return chanErr(wire.PreconditionFailed, m, "invalid arg 'x-priority' for consumer")
		}
		o.Priority = n
	}
	if m.Queue == exchange.ReplyToQueue {
		if ch.replyTo != "" {
			return chanErr(wire.PreconditionFailed, m, "reply consumer already set")
		}
		cons, name, err := ch.vh().ConsumeReplyTo(o)
		if err != nil {
			return err
		}
		ch.replyTo = name
		s.cons = cons
		ch.consumers[tag] = s
		if !m.NoWait {
			ch.c.send(ch.id, &wire.BasicConsumeOK{ConsumerTag: tag})
		}
		return nil
	}
	if err := ch.check(auth.Read, "queue", m.Queue); err != nil {
		return err
	}
	// The consume-ok must precede the first delivery: hold the delivery
	// lock so that dispatch inside Consume waits for it.
	ch.dmu.Lock()
	s.pending = true
	ch.dmu.Unlock()
	cons, err := ch.vh().Consume(m.Queue, o)
	if err != nil {
		return err
	}
	s.cons = cons
	ch.consumers[tag] = s
	if !m.NoWait {
		ch.c.send(ch.id, &wire.BasicConsumeOK{ConsumerTag: tag})
	}
	s.release()
	return nil
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int8:
		return int(n), true
	case uint8:
		return int(n), true
	case int16:
		return int(n), true
	case uint16:
		return int(n), true
	case int32:
		return int(n), true
	case uint32:
		return int(n), true
	case int64:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
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

func (ch *channel) commit() error {
	pubs, acks := ch.txPubs, ch.txAcks
	ch.txPubs, ch.txAcks = nil, nil
	var wg sync.WaitGroup
	tc := &txConfirm{wg: &wg}
	for _, p := range pubs {
		wg.Add(1)
		res, err := ch.vh().Publish(p.msg, exchange.PublishOpts{Confirmer: tc, Mandatory: p.mandatory})
		if err != nil {
			wg.Done()
			return err
		}
		ch.stats.published.Add(1) // at the commit, as RabbitMQ counts them
		if !res.Pending {
			wg.Done()
		}
		if res.Routed == 0 && p.mandatory {
			ch.sendReturn(p.msg)
		}
	}
	for _, a := range acks {
		refs, err := ch.take(nil, a.tag, a.multiple, a.ack)
		if err != nil {
			return err
		}
		ch.apply(refs, a.ack, a.requeue)
	}
	wg.Wait()
	return nil
}

type txConfirm struct{ wg *sync.WaitGroup }

func (t *txConfirm) Confirm(uint64, bool) { t.wg.Done() }

func (ch *channel) sendReturn(msg *exchange.Message) {
	ch.c.w.Mu.Lock()
	r := wire.BasicReturn{ReplyCode: wire.NoRoute, ReplyText: "NO_ROUTE", Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}
	ch.c.appendContentLocked(ch.id, &r, msg, nil)
	ch.c.w.Mu.Unlock()
}

// --- the consumer sink ---

// sink delivers a consumer's messages onto its channel.
type sink struct {
	ch      *channel
	tag     string
	noAck   bool
	cons    *exchange.Consumer
	pending bool                // consume-ok not yet sent; under ch.dmu
	gone    atomic.Bool         // cancelled by the core
	held    []exchange.Delivery // deliveries before consume-ok; under ch.dmu
}

// release sends deliveries held back until consume-ok was queued.
func (s *sink) release() {
	ch := s.ch
	ch.dmu.Lock()
	s.pending = false
	held := s.held
	s.held = nil
	for _, d := range held {
		s.write(d)
	}
	ch.dmu.Unlock()
}

// Deliver implements exchange.Sink.
func (s *sink) Deliver(d exchange.Delivery) bool {
	ok, _ := s.DeliverCopy(d)
	return ok
}

// DeliverCopy implements exchange.CopyingSink: a delivery written at once
// is copied into the connection's output buffer; one held until the
// consume-ok is written keeps its message.
func (s *sink) DeliverCopy(d exchange.Delivery) (ok, done bool) {
	ch := s.ch
	ch.dmu.Lock()
	if s.pending {
		d.Batch = nil // written later, by another goroutine
		s.held = append(s.held, d)
		ch.dmu.Unlock()
		return true, false
	}
	ok = s.write(d)
	ch.dmu.Unlock()
	return ok, true
}

// write assigns the delivery tag and encodes the delivery. Called with dmu.
func (s *sink) write(d exchange.Delivery) bool {
	ch := s.ch
	c := ch.c
	if ch.timedOut {
		// The channel is closing: keep the delivery for cleanup to
		// requeue, and stop this consumer.
		if !s.noAck {
			ch.orphans = append(ch.orphans, unackedRef{q: d.Queue, seq: d.Seq})
		}
		return false
	}
	ch.nextTag++
	if d.Redelivered {
		ch.counts.redeliver++
	}
	tag := ch.nextTag
	if s.noAck {
		ch.counts.deliverNoAck++
	} else {
		ch.counts.deliver++
		c.watchTimeouts()
		ch.unacked = append(ch.unacked, unackedRef{tag: tag, q: d.Queue, seq: d.Seq, at: c.wd.Now()})
	}
	c.s.cfg.Tracer.Deliver(d, tracing.AMQP091)
	c.w.Mu.Lock()
	c.deliver = wire.BasicDeliver{ConsumerTag: s.tag, DeliveryTag: tag, Redelivered: d.Redelivered,
		Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey}
	ok := c.appendContentLocked(ch.id, &c.deliver, d.Msg, d.Batch)
	if !ok && d.Consumer != nil {
		c.w.Paused = append(c.w.Paused, d.Consumer)
	}
	c.w.Mu.Unlock()
	return ok
}

// Cancelled implements exchange.Sink: the queue went away.
func (s *sink) Cancelled(*exchange.Consumer) {
	s.gone.Store(true)
	c := s.ch.c
	if !c.capCancel {
		return
	}
	c.w.Mu.Lock()
	if !c.w.Closed {
		var err error
		var b []byte
		if b, err = wire.AppendMethodFrame(c.w.Buf, s.ch.id, &wire.BasicCancel{ConsumerTag: s.tag, NoWait: true}); err == nil {
			c.w.Buf = b
		}
		c.queued()
	}
	c.w.Mu.Unlock()
}

// recheckConsumers cancels the consumers whose queue the connection's user
// may no longer read, after its credentials changed (update-secret), as
// RabbitMQ does; clients with consumer_cancel_notify get basic.cancel.
// Reader goroutine only.
func (ch *channel) recheckConsumers() {
	for tag, s := range ch.consumers {
		if s.cons == nil {
			continue
		}
		q := s.cons.Queue().Name()
		if q == ch.replyTo {
			continue // direct reply-to: no permission applies
		}
		if ch.check(auth.Read, "queue", q) != nil {
			delete(ch.consumers, tag)
			s.cons.Cancel()
			s.Cancelled(s.cons)
		}
	}
}
