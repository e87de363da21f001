package exchange

import (
	"strings"
	"sync"
	"time"
)

// PublishOpts are per-publish options.
type PublishOpts struct {
	// Confirmer, if set, is told the outcome of a publish that returned
	// Pending, exactly once, from another goroutine.
	Confirmer Confirmer
	Tag       uint64
	// Queue, if set, is the one queue the message goes to, whatever its
	// Exchange and RoutingKey say: a message another node routed and
	// forwarded here (cluster/forward) keeps its original exchange and
	// routing key for its consumers.
	Queue string
	// Batch, if set, is handed to the sinks of the deliveries this
	// publish makes on its way (see Batch).
	Batch *Batch
	// Protocol is the publisher's, the label of its publish-to-confirm
	// latency (latency.go): a publish with a Confirmer is measured only
	// when it names its protocol (a client's confirm, not a transaction's
	// or a shovel's wait).
	Protocol Protocol
	// Mandatory: an unroutable message goes back to the publisher (AMQP's
	// mandatory flag); it counts as returned, not dropped (MsgStats).
	Mandatory bool

	system bool // the broker's own publish (events.go): internal exchanges take it

	// Route, if not nil, is the publisher's memory of its last route
	// (its goroutine's alone): a run of publishes with one exchange and
	// routing key looks them up once per route table.
	Route *RouteCache
}

// RouteCache remembers a publisher's last route while the topology stays
// as it was (the same route table): an exchange whose routing depends on
// the routing key alone (direct, topic, fanout, the default exchange)
// that reached one queue. Zero value ready; one goroutine's.
type RouteCache struct {
	t             *routeTable
	exchange, key string
	x             *Exchange
	q             *Queue
}

// lookup returns the cached route of (exchange, key) in t.
func (c *RouteCache) lookup(t *routeTable, exchange, key string) (*Exchange, *Queue, bool) {
	if c == nil || t == nil || c.t != t || c.exchange != exchange || c.key != key {
		return nil, nil, false
	}
	return c.x, c.q, true
}

// keep remembers that (exchange, key) routed to q alone in t, if x's
// routing depends on the key alone.
func (c *RouteCache) keep(t *routeTable, exchange, key string, x *Exchange, qs []*Queue) {
	if c == nil || t == nil || len(qs) != 1 {
		return
	}
	switch x.kind {
	case KindDirect, KindTopic, KindFanout:
		c.t, c.exchange, c.key, c.x, c.q = t, exchange, key, x, qs[0]
	}
}

// PublishResult is the outcome of a publish.
type PublishResult struct {
	// Routed is the number of queues (and reply-to consumers) the message
	// reached.
	Routed int
	// Pending is true if the outcome waits for the store: the Confirmer
	// will be called. Otherwise OK is final.
	Pending bool
	// OK is false if a queue refused the message (x-overflow reject-publish).
	OK bool
	// NotAppended is true, with OK false and Pending false, when the
	// one queue the message reached already answered that its log never
	// appended it (see NotAppendedConfirmer): it may go to the queue's
	// next owner.
	NotAppended bool
	// Solo is true if the message was marked reusable (Message.Reuse) and
	// every queue it reached holds it in memory, counting its hold
	// (reuse.go): the publisher may then Release it. Otherwise it must not.
	Solo bool
}

var encodePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Publish routes m from m.Exchange by m.RoutingKey and enqueues it. The
// message must not be modified afterwards.
func (v *VHost) Publish(m *Message, o PublishOpts) (PublishResult, error) {
	var now int64
	if o.Batch != nil {
		now = o.Batch.time()
	} else {
		now = nowNano()
	}
	m.ts = now
	if ms, ok := parseExpiration(m.Props.Expiration); ok {
		m.expiresAt = now + ms*int64(time.Millisecond)
		v.anyExpiring.Store(true)
	}
	res, err := v.publish(m, o, now, nil)
	if o.Confirmer != nil && o.Protocol != ProtoOther && err == nil && !res.Pending {
		// Confirmed at once (nothing to store): the front end sends it
		// now. A batch's publishes share one clock reading, so their
		// latency is 0 (the zero bucket: under 7.6 µs) rather than a
		// second clock read per message.
		end := now
		if o.Batch == nil {
			end = nowNano()
		}
		v.observe(o.Protocol, LatPublishConfirm, end-now)
	}
	return res, err
}

func (v *VHost) publish(m *Message, o PublishOpts, now int64, skip func(*Queue) bool) (PublishResult, error) {
	sc := routePool.Get().(*routeScratch)
	defer func() {
		clear(sc.qs)
		sc.qs = sc.qs[:0]
		routePool.Put(sc)
	}()
	qs := &sc.qs
	rv := v.routes() // no lock but for a while after a topology change
	var x *Exchange
	if o.Queue != "" {
		xr, _ := rv.exchange("")
		x = xr.x
		if q := rv.queue(o.Queue); q != nil {
			*qs = append(*qs, q)
		}
	} else if cx, cq, ok := o.Route.lookup(rv.t, m.Exchange, m.RoutingKey); ok {
		x = cx // (not internal, not delayed: checked when it was kept)
		*qs = append(*qs, cq)
	} else {
		xr, ok := rv.exchange(m.Exchange)
		x = xr.x
		if !ok {
			rv.release()
			return PublishResult{}, v.errNoExchange(m.Exchange)
		}
		if x.internal && !o.system {
			rv.release()
			return PublishResult{}, errorf(KindAccessRefused, "cannot publish to internal exchange '%s' in vhost '%s'", x.name, v.name)
		}
		if x.delay != nil && skip == nil {
			ms, hold, err := messageDelay(m.Props.Headers)
			if err != nil || hold {
				rv.release()
				if err != nil {
					return PublishResult{}, err
				}
				v.counters.publish.Add(1)
				x.counters.publishIn.Add(1)
				return x.delay.holdBack(m, ms, o, now), nil
			}
		}
		*qs = rv.route(xr, m, sc)
		if x.delay == nil && !x.internal && skip == nil {
			o.Route.keep(rv.t, m.Exchange, m.RoutingKey, x, *qs)
		}
	}
	rv.release()
	if len(*qs) == 0 && x.name == "" && v.b.cluster != nil && strings.HasPrefix(m.RoutingKey, ReplyToQueue+".") {
		if q := v.remoteReplyTo(m.RoutingKey); q != nil {
			*qs = append(*qs, q)
		}
	}

	res := PublishResult{OK: true}
	var data []byte
	var wait *confirmWait
	// A confirm waits for the queues that store the message and for the
	// nodes that own proxied queues.
	needWait := false
	for _, q := range *qs {
		if q.storesMessage(m) {
			needWait = true
			break
		}
	}
	if needWait {
		// The store copies what it is given, so the record is encoded
		// into a pooled buffer.
		buf := encodePool.Get().(*[]byte)
		data = encodeMessage(m, now, (*buf)[:0])
		defer func() {
			if cap(data) <= 64<<10 {
				*buf = data[:0]
				encodePool.Put(buf)
			}
		}()
	}
	if needWait && o.Confirmer != nil {
		wait = newConfirmWait(o.Confirmer, o.Tag, o.Protocol)
		if o.Protocol != ProtoOther { // a client's confirm, not the broker's own wait
			wait.v, wait.start = v, now
		}
		wait.left.Store(1) // held by this call until the end
	}
	var done func(error)
	if wait != nil {
		done = wait.fn
	}
	if m.rec != nil && len(*qs) > 1 {
		// The queues' holds on a reusable message in one atomic add,
		// not one each: those that take theirs use them up (enqueue),
		// the rest are given back after the loop. The publisher's own
		// hold keeps the count above zero meanwhile.
		k := min(len(*qs), maxHeld-int(m.held))
		m.holds.Add(int32(k))
		m.prepaid = uint8(k)
	}
	for _, q := range *qs {
		if skip != nil && skip(q) {
			continue
		}
		if wait != nil {
			wait.left.Add(1)
			wait.stores.Add(1)
		}
		accepted, stored, refused := q.enqueue(m, data, done, now, o.Batch)
		if wait != nil && !stored {
			wait.left.Add(-1)
			wait.stores.Add(-1)
		}
		if accepted {
			res.Routed++
		} else if refused {
			res.OK = false
		}
	}
	if wait != nil {
		if !res.OK {
			wait.failed.Store(true)
		}
		if wait.left.Load() > 1 {
			res.Pending = true
			wait.done(nil) // drop this call's hold; wait is not touched after
		} else {
			if wait.failed.Load() || wait.notAppended.Load() > 0 {
				// The store already answered, with an error: the
				// outcome is final here and the Confirmer is not called.
				res.OK = false
				res.NotAppended = res.Routed == 1 && wait.resendable()
			}
			wait.release() // every queue has called back: this call holds the last
		}
	}
	if m.prepaid > 0 {
		m.holds.Add(-int32(m.prepaid))
		m.prepaid = 0
	}
	// Every queue reached holds m in memory alone (none stored it, none
	// forwarded it): only they, and the publisher, hold it.
	res.Solo = m.held > 0 && int(m.held) == len(*qs) && skip == nil
	if skip == nil { // not a dead-lettered republish
		v.counters.publish.Add(1)
		x.counters.publishIn.Add(1)
		switch {
		case res.Routed > 0:
			x.counters.publishOut.Add(1)
		case o.Mandatory:
			v.counters.returnUnroutable.Add(1)
		default:
			v.counters.dropUnroutable.Add(1)
		}
	}
	return res, nil
}
