package exchange

import (
	"time"

	"github.com/trident-broker/trident/exchange/event"
)

// EventExchange is the topic exchange events are published to (RabbitMQ's
// rabbitmq_event_exchange plugin): internal, so that no client publishes
// to it, predeclared in one vhost (WithEventVHost, "/" by default, as
// RabbitMQ's rabbitmq_event_exchange.vhost), and carrying the events of
// every vhost. A message's routing key is the event's name, its headers
// the event's properties plus timestamp_in_ms, its timestamp property the
// event's time in seconds, delivery mode 2, body empty.
//
// Events are built only while a queue or exchange is bound to it
// (event.Bus.On), so that nobody listening costs one atomic load.
const EventExchange = "amq.rabbitmq.event"

// Option configures a Broker (New).
type Option func(*Broker)

// WithEventVHost predeclares EventExchange in vhost name ("" or "none":
// nowhere, events are off).
func WithEventVHost(name string) Option {
	return func(b *Broker) {
		if name == "none" {
			name = ""
		}
		b.eventVHost = name
	}
}

// Events is the bus front ends report connection, channel and
// authentication events to; it is never nil.
func (b *Broker) Events() *event.Bus { return b.events }

// initEvents sets the defaults before recovery creates vhosts.
func (b *Broker) initEvents(opts []Option) {
	b.eventVHost = "/"
	for _, o := range opts {
		o(b)
	}
	b.events = event.NewBus(b.publishEvent)
	b.alarms.events = b.events
}

// eventExchange returns the event exchange if v is the event vhost.
func (v *VHost) newEventExchange() *Exchange {
	return &Exchange{vh: v, name: EventExchange, kind: KindTopic, durable: true, internal: true,
		router: newRouter(KindTopic), event: true}
}

// noteEventBindings turns the bus on or off as x, the event exchange,
// gains its first binding or loses its last (under the vhost's lock).
func (v *VHost) noteEventBindings(x *Exchange) {
	v.b.events.SetListening(len(x.bindings) > 0)
}

// publishEvent publishes e to the event exchange (the bus's goroutine).
func (b *Broker) publishEvent(e event.Event) {
	v, ok := b.VHost(b.eventVHost)
	if !ok {
		b.events.SetListening(false)
		return
	}
	h := make(Table, len(e.Props)+1)
	for _, p := range e.Props {
		h[p.Key] = p.Value
	}
	h["timestamp_in_ms"] = e.At.UnixMilli()
	m := &Message{Exchange: EventExchange, RoutingKey: e.Name, Body: []byte{},
		Props: Properties{Headers: h, DeliveryMode: 2, Timestamp: e.At.Truncate(time.Second)}}
	if _, err := v.Publish(m, PublishOpts{system: true}); err != nil {
		b.log.Debug("event not published", "event", e.Name, "err", err)
	}
}

// actorName names who a command acts for, "" if the Authorizer does not say.
func actorName(a Authorizer) string {
	if n, ok := a.(interface{ Name() string }); ok {
		return n.Name()
	}
	return ""
}

// commandExisted reports, before c runs, whether what c creates or removes
// exists (only asked while events are on): an event reports a change, not
// a declaration of what was there.
func (v *VHost) commandExisted(c Command) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	switch c := c.(type) {
	case ExchangeDeclare:
		return v.exchanges[c.Name] != nil
	case ExchangeDelete:
		return v.exchanges[c.Name] != nil
	case QueueDelete:
		return v.queues[c.Name] != nil
	case QueueBind:
		return v.bindingExists(c.Queue, true, c.Exchange, c.Key, c.Args)
	case QueueUnbind:
		return v.bindingExists(c.Queue, true, c.Exchange, c.Key, c.Args)
	case ExchangeBind:
		return v.bindingExists(c.Destination, false, c.Source, c.Key, c.Args)
	case ExchangeUnbind:
		return v.bindingExists(c.Destination, false, c.Source, c.Key, c.Args)
	}
	return false
}

func (v *VHost) bindingExists(dst string, toQueue bool, src, key string, args Table) bool {
	sx, q, dx, err := v.lookupBind(dst, toQueue, src, anyOwner)
	return err == nil && sx.findBinding(q, dx, key, args) != nil
}

// reportCommand emits the event of a command that succeeded; existed is
// commandExisted's answer from before it ran.
func (v *VHost) reportCommand(a Authorizer, c Command, r Result, existed bool) {
	bus := v.b.events
	vh, who := event.Prop{Key: "vhost", Value: v.name}, event.Prop{Key: "user_who_performed_action", Value: actorName(a)}
	switch c := c.(type) {
	case QueueDeclare:
		if r.Queue.Created {
			bus.Emit(event.QueueCreated, event.Prop{Key: "name", Value: r.Queue.Name}, vh,
				event.Prop{Key: "durable", Value: c.Opts.Durable}, event.Prop{Key: "auto_delete", Value: c.Opts.AutoDelete},
				event.Prop{Key: "exclusive", Value: c.Opts.Exclusive}, event.Prop{Key: "arguments", Value: tableOrEmpty(c.Opts.Args)}, who)
		}
	case QueueDelete:
		if existed {
			bus.Emit(event.QueueDeleted, event.Prop{Key: "name", Value: c.Name}, vh, who)
		}
	case ExchangeDeclare:
		if !existed {
			bus.Emit(event.ExchangeCreated, event.Prop{Key: "name", Value: c.Name}, vh, event.Prop{Key: "type", Value: c.Type},
				event.Prop{Key: "durable", Value: c.Opts.Durable}, event.Prop{Key: "auto_delete", Value: c.Opts.AutoDelete},
				event.Prop{Key: "internal", Value: c.Opts.Internal}, event.Prop{Key: "arguments", Value: tableOrEmpty(c.Opts.Args)}, who)
		}
	case ExchangeDelete:
		if existed {
			bus.Emit(event.ExchangeDeleted, event.Prop{Key: "name", Value: c.Name}, vh, who)
		}
	case QueueBind:
		if !existed {
			bus.Emit(event.BindingCreated, bindingProps(c.Exchange, c.Queue, "queue", c.Key, c.Args, vh, who)...)
		}
	case QueueUnbind:
		if existed {
			bus.Emit(event.BindingDeleted, bindingProps(c.Exchange, c.Queue, "queue", c.Key, c.Args, vh, who)...)
		}
	case ExchangeBind:
		if !existed {
			bus.Emit(event.BindingCreated, bindingProps(c.Source, c.Destination, "exchange", c.Key, c.Args, vh, who)...)
		}
	case ExchangeUnbind:
		if existed {
			bus.Emit(event.BindingDeleted, bindingProps(c.Source, c.Destination, "exchange", c.Key, c.Args, vh, who)...)
		}
	}
}

func bindingProps(src, dst, dstKind, key string, args Table, vh, who event.Prop) []event.Prop {
	return []event.Prop{{Key: "source_name", Value: src}, {Key: "source_kind", Value: "exchange"},
		{Key: "destination_name", Value: dst}, {Key: "destination_kind", Value: dstKind},
		{Key: "routing_key", Value: key}, {Key: "arguments", Value: tableOrEmpty(args)}, vh, who}
}

func tableOrEmpty(t Table) Table {
	if t == nil {
		return Table{}
	}
	return t
}

// reportConsumer emits consumer.created or consumer.deleted for c.
func (q *Queue) reportConsumer(name string, c *Consumer) {
	bus := q.vh.b.events
	if !bus.On() {
		return
	}
	props := []event.Prop{{Key: "consumer_tag", Value: c.tag}, {Key: "queue", Value: q.name}, {Key: "vhost", Value: q.vh.name}}
	if name == event.ConsumerCreated {
		props = append(props, event.Prop{Key: "exclusive", Value: c.excl}, event.Prop{Key: "ack_required", Value: !c.noAck},
			event.Prop{Key: "prefetch_count", Value: int64(c.prefetch)})
	}
	bus.Emit(name, props...)
}

// deleteQueueBySelf deletes a queue the broker deletes by itself:
// exclusive (its connection closed), auto-delete (its last consumer went)
// or expired (x-expires), and reports it as RabbitMQ does, performed by
// "rmq-internal". In a cluster the delete of a replicated queue is a
// command, applied on every node after commit (proposeSelfDelete); alone,
// the queue goes as any delete (deleteQueue); a clustered delete that
// does not commit removes it from this node's memory only (deleteQueue
// writes no replicated record in a cluster): it must go whatever the
// cluster.
func (v *VHost) deleteQueueBySelf(q *Queue) {
	v.mu.RLock()
	present := v.queues[q.name] == q
	v.mu.RUnlock()
	if !v.proposeSelfDelete(q) {
		v.deleteQueue(q)
	}
	if present && v.b.events.On() {
		v.b.events.Emit(event.QueueDeleted, event.Prop{Key: "name", Value: q.name}, event.Prop{Key: "vhost", Value: v.name},
			event.Prop{Key: "user_who_performed_action", Value: "rmq-internal"})
	}
}
