package mqtt

import (
	"slices"
	"strings"
	"unique"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

func filterKey(filter string) string { return shareable(filter, wire.FilterToKey(filter)) }

// shareable returns s, filter or its binding key in bytes of its own, as
// a canonical copy (package unique) if filter has a wildcard. Many
// devices of a fleet subscribe to the same broadcast filter, each keeping
// a copy of it and of its key (~64 bytes a device); the runtime's table
// of canonical copies costs ~80 bytes an entry, more than it saves for
// the filter of one device's own topic, which is mostly exact. A
// canonical copy lasts as long as a subscription uses it; one made after
// the runtime dropped the first from its table is shared from then on.
func shareable(filter, s string) string {
	if strings.ContainsAny(filter, "+#") {
		return unique.Make(s).Value()
	}
	return s
}

// handleSubscribe binds the session's queue (or a shared group's queue)
// for each filter, stores a persistent session's subscriptions, answers
// SUBACK and then sends matching retained messages.
func (c *conn) handleSubscribe(pk *packets.Packet) error {
	if c.version == 5 {
		if code := pk.SubscribeValidate(); code != packets.CodeSuccess {
			return code
		}
	} else if len(pk.Filters) == 0 {
		return errProto(codeProtocolError, "SUBSCRIBE without filters")
	}
	se := c.se
	codes := make([]byte, len(pk.Filters))
	type newSub struct {
		sub    *subscription
		isNew  bool
		shared bool
	}
	var added []newSub
	// The session's filters, to tell new ones (which count against
	// mqtt.max_subscriptions_per_client) from re-subscriptions: one map
	// per SUBSCRIBE keeps a packet of many filters linear.
	limit := c.s.cfg.MaxSubscriptions
	have := subSet(se.subList(), len(pk.Filters))
	for i, f := range pk.Filters {
		group, filter, shared, valid := wire.SharedFilter(f.Filter)
		if !valid || !wire.ValidFilter(filter) {
			codes[i] = c.subFailure(codeTopicFilterInvalid)
			continue
		}
		if shared && f.NoLocal && c.version == 5 {
			return errProto(codeProtocolError, "no local on a shared subscription") // [MQTT-3.8.3-4]
		}
		k := subKey{filter, group}
		_, exists := have[k]
		if !exists && limit > 0 && len(have) >= limit {
			codes[i] = c.subFailure(codeQuotaExceeded)
			continue
		}
		// The filter and group are copied (shareable): substrings of the
		// packet, they would keep its whole buffer for the subscription's
		// life.
		sub := &subscription{Filter: shareable(filter, strings.Clone(filter)), Share: strings.Clone(group), QoS: f.Qos, NoLocal: f.NoLocal, RAP: f.RetainAsPublished,
			Handling: f.RetainHandling, ID: f.Identifier}
		if c.version != 5 {
			sub.NoLocal, sub.RAP, sub.Handling, sub.ID = false, false, 0, 0
		}
		c.s.prepareSub(se, sub)
		if c.s.denied(filter) {
			c.s.log.Warn("authorization denied", append(c.who(), "op", "subscribe", "topic", f.Filter, "err", "within mqtt.deny_subscribe")...)
			codes[i] = c.subFailure(codeNotAuthorized)
			continue
		}
		if err := c.checkSubscribe(sub); err != nil {
			c.logDenied("subscribe", f.Filter, err)
			codes[i] = c.subFailure(codeNotAuthorized)
			continue
		}
		if err := c.bindAndConsume(sub); err != nil {
			c.s.log.Warn("subscribe", "client_id", c.clientID, "filter", f.Filter, "err", err)
			code := codeUnspecified
			if exchange.KindOf(err) == exchange.KindAccessRefused {
				code = codeNotAuthorized
			}
			codes[i] = c.subFailure(code)
			continue
		}
		isNew := c.replaceSub(sub, exists)
		have[k] = struct{}{}
		if sub.NoLocal {
			c.noLocal.Store(true)
		}
		codes[i] = sub.QoS
		added = append(added, newSub{sub: sub, isNew: isNew, shared: shared})
	}
	if err := c.persistSubs(); err != nil {
		c.s.log.Error("store session", "client_id", c.clientID, "err", err)
		for i := range codes {
			if codes[i] < 0x80 {
				codes[i] = c.subFailure(codeUnspecified)
			}
		}
		added = nil
	}
	ack := controlPacket(packets.Suback)
	ack.PacketID, ack.ReasonCodes = pk.PacketID, codes
	c.sendPooled(ack)
	for _, a := range added {
		// Retain handling: 0 send, 1 send if new, 2 never; shared
		// subscriptions get no retained messages [MQTT-3.8.4-4].
		if a.shared || a.sub.Handling == 2 || (a.sub.Handling == 1 && !a.isNew) {
			continue
		}
		c.s.retained.matchEach(c.vh.Name(), a.sub.Filter, func(r *retainedMsg) {
			c.push(outItem{kind: itemRetained, ret: r, sub: a.sub})
		})
		for _, r := range c.s.sysMatch(a.sub.Filter) {
			c.push(outItem{kind: itemRetained, ret: r, sub: a.sub})
		}
	}
	return nil
}

func (c *conn) subFailure(code byte) byte {
	if c.version == 5 {
		return code
	}
	return 0x80
}

// checkSubscribe checks the permissions RabbitMQ checks for a
// subscription: configure on the queue, write on the queue and read on the
// exchange for the binding, read on the queue for consuming.
func (c *conn) checkSubscribe(sub *subscription) error {
	us, vh := c.s.users, c.vh.Name()
	if err := us.Check(c.user, vh, auth.Configure, "queue", sub.queue); err != nil {
		return err
	}
	if err := us.Check(c.user, vh, auth.Write, "queue", sub.queue); err != nil {
		return err
	}
	if err := us.Check(c.user, vh, auth.Read, "queue", sub.queue); err != nil {
		return err
	}
	if err := us.Check(c.user, vh, auth.Read, "exchange", c.s.cfg.Exchange); err != nil {
		return err
	}
	return c.checkTopic(auth.Read, sub.Filter, true)
}

// subKey identifies a session's subscription (subscription.same).
type subKey struct{ filter, share string }

// subSet is the set of subs' keys, with room for more.
func subSet(subs []*subscription, more int) map[subKey]struct{} {
	m := make(map[subKey]struct{}, len(subs)+min(more, 64))
	for _, s := range subs {
		m[subKey{s.Filter, s.Share}] = struct{}{}
	}
	return m
}

// replaceSub adds sub to the session, replacing one with the same filter
// if exists, and reports whether it is new. A new one is appended in
// place: readers of the list (the writer, a record being saved) see only
// the elements within their slice's length, which are never written
// again, so appending costs no copy of the list.
func (c *conn) replaceSub(sub *subscription, exists bool) bool {
	se := c.se
	se.mu.Lock()
	defer se.mu.Unlock()
	old := se.subList()
	if !exists {
		se.setSubs(append(old, sub))
		return true
	}
	l := make([]*subscription, 0, len(old)+1)
	isNew := true
	for _, o := range old {
		if o.same(sub) {
			isNew = false
			continue
		}
		l = append(l, o)
	}
	se.setSubs(append(l, sub))
	return isNew
}

func (c *conn) persistSubs() error {
	se := c.se
	se.mu.Lock()
	p := se.persistent
	se.mu.Unlock()
	if !p {
		return nil
	}
	return c.s.saveSession(se)
}

// bindAndConsume makes sure the subscription's queue exists, is bound and
// is consumed by this connection.
func (c *conn) bindAndConsume(sub *subscription) error {
	if sub.Share == "" && isSysTopic(sub.Filter) {
		return nil // served by sys.go, never through the core
	}
	se := c.se
	se.mu.Lock()
	durable := se.persistent
	se.mu.Unlock()
	opts := exchange.QueueOpts{Durable: durable}
	if durable && c.s.cfg.DurableQueueType == "quorum" {
		// A new persistent session's queue replicated, so that its QoS 1
		// messages outlive the node. No type is asked for otherwise, so
		// that an existing queue of either type is taken as it is
		// (exchange: an absent x-queue-type matches any).
		opts.Args = exchange.Table{"x-queue-type": "quorum"}
	}
	if sub.Share != "" {
		opts = exchange.QueueOpts{AutoDelete: true}
	}
	// Declared and bound in one step, so that the subscription routes at
	// once rather than after the declaration's fsync.
	binds := []exchange.Binding{{Exchange: c.s.cfg.Exchange, Key: sub.key()}}
	info, err := c.vh.DeclareQueueBound(sub.queue, opts, binds)
	if err == nil && info.Created && c.s.users.Auditing() {
		c.s.users.AuditObject(auth.AuditObjectCreated, c.user.Name(), c.nc.RemoteAddr().String(), "mqtt", c.vh.Name(), "queue", info.Name)
	}
	if err != nil {
		if exchange.KindOf(err) != exchange.KindPreconditionFailed || sub.Share != "" {
			return err
		}
		if !durable {
			// A persistent session resumed with a Session Expiry of 0
			// (MQTT 5 reads an absent interval as 0): the session is the
			// same, so its durable queue and the messages queued while it
			// was offline are delivered [MQTT-3.1.2-4]; the session, and
			// the queue with it, ends when this connection does.
			if err := c.vh.BindQueue(sub.queue, c.s.cfg.Exchange, sub.key(), nil, nil); err != nil {
				return err
			}
		} else {
			// A session that was not persistent and is now: its
			// non-durable queue would not survive a restart, so it is
			// replaced by a durable one.
			if _, err := c.vh.DeleteQueue(sub.queue, false, false, nil); err != nil {
				return err
			}
			if _, err := c.vh.DeclareQueueBound(sub.queue, opts, binds); err != nil {
				return err
			}
		}
	}
	c.consMu.Lock()
	have := c.consumerOf(sub.queue) >= 0
	c.consMu.Unlock()
	if have {
		return nil
	}
	o := exchange.ConsumeOpts{Tag: "mqtt-" + c.clientID, Limit: &c.limit, Sink: c, Protocol: exchange.ProtoMQTT}
	if !durable && sub.Share == "" {
		// A clean session: its QoS 0 deliveries (transient messages) are
		// at most once, and a subscriber that far behind loses new ones.
		o.DropTransientAbove = c.s.cfg.MaxQueuedQoS0
	}
	k, err := c.vh.Consume(sub.queue, o)
	if err != nil {
		return err
	}
	c.consMu.Lock()
	if c.consClosed { // closed meanwhile
		c.consMu.Unlock()
		k.Cancel()
		return nil
	}
	c.consumers = append(c.consumers, k)
	c.consMu.Unlock()
	return nil
}

// consumerOf is the index in c.consumers of queue's consumer, -1 if none.
// It runs under consMu.
func (c *conn) consumerOf(queue string) int {
	for i, k := range c.consumers {
		if k.Queue().Name() == queue {
			return i
		}
	}
	return -1
}

// dropConsumer removes c.consumers[i]; it runs under consMu.
func (c *conn) dropConsumer(i int) {
	c.consumers = slices.Delete(c.consumers, i, i+1)
}

// handleUnsubscribe removes subscriptions and their bindings.
func (c *conn) handleUnsubscribe(pk *packets.Packet) error {
	if len(pk.Filters) == 0 {
		return errProto(codeProtocolError, "UNSUBSCRIBE without filters")
	}
	se := c.se
	codes := make([]byte, len(pk.Filters))
	for i, f := range pk.Filters {
		group, filter, _, _ := wire.SharedFilter(f.Filter)
		probe := &subscription{Filter: filter, Share: group}
		se.mu.Lock()
		old := se.subList()
		var gone *subscription
		l := make([]*subscription, 0, len(old))
		for _, o := range old {
			if o.same(probe) {
				gone = o
				continue
			}
			l = append(l, o)
		}
		se.setSubs(l)
		se.mu.Unlock()
		if gone == nil {
			codes[i] = codeNoSubscriptionExisted
			continue
		}
		// Another filter of the same queue may map to the same key
		// ("a/+" and a literal "a/*").
		keep, key := false, gone.key()
		for _, o := range l {
			if o.queue == gone.queue && o.key() == key {
				keep = true
			}
		}
		// A shared group's queue keeps its binding for the other members;
		// it goes with its last consumer (auto-delete).
		if !keep && gone.Share == "" {
			_ = c.vh.UnbindQueue(gone.queue, c.s.cfg.Exchange, key, nil, nil)
		}
		if gone.Share != "" {
			c.consMu.Lock()
			var k *exchange.Consumer
			if i := c.consumerOf(gone.queue); i >= 0 {
				k = c.consumers[i]
				c.dropConsumer(i)
			}
			c.consMu.Unlock()
			if k != nil {
				k.Cancel()
			}
		}
	}
	if err := c.persistSubs(); err != nil {
		c.s.log.Error("store session", "client_id", c.clientID, "err", err)
	}
	ack := controlPacket(packets.Unsuback)
	ack.PacketID = pk.PacketID
	if c.version == 5 {
		ack.ReasonCodes = codes
	}
	c.sendPooled(ack)
	return nil
}

// denied reports whether filter lies within one of mqtt.deny_subscribe.
func (s *Server) denied(filter string) bool {
	for _, d := range s.cfg.DenySubscribe {
		if wire.Within(filter, d) {
			return true
		}
	}
	return false
}
