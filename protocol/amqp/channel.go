package amqp

import (
	"sync"
	"sync/atomic"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/event"
	"github.com/trident-broker/trident/protocol/amqp/wire"
)

type chanState uint8

const (
	chOpen    chanState = iota
	chClosing           // we sent channel.close; waiting for close-ok
)

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
	pubMsg    *exchange.Message   // allocated with the content header
	permCache map[string]bool     // exchange name → write permitted
	permVer   uint64              // the user's CredentialVersion when permCache was filled
	route     exchange.RouteCache // the last publish's route (this channel's publishes: the reader)
	topics    auth.TopicCache     // topic permission decisions (topicperm.go)

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
