package exchange

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/exchange/headers"
	"github.com/trident-broker/trident/exchange/sched"
)

// KindDelayed is the exchange type of RabbitMQ's delayed message plugin
// (rabbitmq_delayed_message_exchange): it routes as the type named by its
// x-delayed-type argument, but holds back a message whose x-delay header
// asks for a delay until that many milliseconds have passed.
//
// Held messages live in the store, in a message keyspace of their own (the
// exchange's delay id, allocated like a queue id), keyed by due time: the
// seq of a held message is its due time in unix milliseconds shifted left
// by sched.SeqBits, with a counter in the low bits (restored at a restart
// from the highest stored; two held messages share a key only if they are
// due in the same millisecond and 2^22 others were scheduled between
// them). A key scan of that
// keyspace is a scan in due order, so the delayer keeps in memory only a
// window of the earliest-due messages and reads the next ones ahead from
// the store as the window drains: a million held messages cost the window,
// not a million timers or bodies.
//
// Where Trident differs from the plugin:
//   - a held message counts as routed (the plugin routes it to nothing at
//     publish time, so a mandatory publish comes back as unroutable);
//   - a publish confirm of a persistent message to a durable delayed
//     exchange waits for the store, as a queue's does;
//   - a non-numeric string x-delay is refused with PRECONDITION_FAILED
//     (the plugin's string-to-integer conversion crashes the channel);
//   - only the exchange a message is published to delays it: one reached
//     by an exchange-to-exchange binding routes at once;
//   - an x-delay given as text (STOMP headers and MQTT 5 user properties
//     are text) comes back as text, "-500", not as a signed integer.
//
// As the plugin: a delay of 0, a negative one, one past 2^32-1 ms, or one of
// a type that is not a number routes at once; a float is truncated; a
// message routed after its delay carries x-delay set to minus its delay.
const KindDelayed = "x-delayed-message"

// delayRegistryPrefix names the store keyspaces of delayed exchanges
// (their ids), so that a start drops those of exchanges that are gone.
const delayRegistryPrefix = "delayed/"

// delayedTypeOf returns the x-delayed-type of a delayed exchange's
// arguments, checked as the plugin does.
func delayedTypeOf(args Table) (string, error) {
	t, _ := args["x-delayed-type"].(string)
	if t == "" || t == KindDelayed || !validKind(t) {
		return "", errorf(KindPreconditionFailed, "Invalid argument, 'x-delayed-type' must be an existing exchange type")
	}
	return t, nil
}

// routerFor is the router of an exchange of kind with args: a delayed
// exchange routes as its x-delayed-type. nil if neither is known.
func routerFor(kind string, args Table) router {
	if kind == KindDelayed {
		t, err := delayedTypeOf(args)
		if err != nil {
			return nil
		}
		return routerFor(t, args)
	}
	if r := newHashRouter(kind, args); r != nil {
		return r
	}
	return newRouter(kind)
}

// messageDelay reads the x-delay header: the delay in milliseconds and
// whether the message is to be held. A string that is not an integer is
// an error (PRECONDITION_FAILED naming the header).
func messageDelay(h Table) (int64, bool, error) {
	raw, ok := h["x-delay"]
	if !ok {
		return 0, false, nil
	}
	var ms int64
	switch d := raw.(type) {
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64)
		if err != nil {
			return 0, false, errorf(KindPreconditionFailed, "invalid 'x-delay' header: '%s' is not an integer number of milliseconds", d)
		}
		ms = n
	case []byte:
		n, err := strconv.ParseInt(strings.TrimSpace(string(d)), 10, 64)
		if err != nil {
			return 0, false, errorf(KindPreconditionFailed, "invalid 'x-delay' header: '%s' is not an integer number of milliseconds", d)
		}
		ms = n
	case float32:
		ms = truncFloat(float64(d))
	case float64:
		ms = truncFloat(d)
	default:
		n, ok := asInt64(raw)
		if !ok {
			return 0, false, nil
		}
		ms = n
	}
	return ms, ms > 0 && ms <= sched.MaxDelay, nil
}

func isText(v any) bool {
	switch v.(type) {
	case string, []byte:
		return true
	}
	return false
}

func truncFloat(f float64) int64 {
	if math.IsNaN(f) || f < -sched.MaxDelay-1 || f > sched.MaxDelay+1 {
		return 0
	}
	return int64(f)
}

// delayedEntry is a held message: a delayed exchange's, or a retry's,
// which goes back to queue.
type delayedEntry struct {
	m     *Message
	queue string // a retry's queue (retry.go); "" routes through the exchange
}

// delayer holds one delayed exchange's messages (or a vhost's retries)
// until they fall due (sched.Delayer), then routes them.
type delayer struct {
	v       *VHost
	xname   string
	id      uint64 // message keyspace in the store
	durable bool
	// retry: a vhost's retries (retry.go), each record led by the name of
	// the queue it goes back to.
	retry bool
	s     *sched.Delayer[delayedEntry]
}

func newDelayer(v *VHost, name string, id uint64, durable bool) *delayer {
	return newDelayerOf(v, name, id, durable, false)
}

func newDelayerOf(v *VHost, name string, id uint64, durable, retry bool) *delayer {
	d := &delayer{v: v, xname: name, id: id, durable: durable, retry: retry}
	d.s = sched.New(sched.Config[delayedEntry]{Store: v.b.store, ID: id, Decode: d.decode,
		Keep:  func(e delayedEntry) bool { return e.m.Props.Persistent() },
		Route: d.route, Dropped: func() { _ = v.b.store.DeleteMeta(d.registryKey()) },
		Log: v.b.log.With("exchange", name)})
	return d
}

// MessagesDelayed is how many messages a delayed exchange holds back (0
// for any other exchange): the plugin's messages_delayed.
func (x *Exchange) MessagesDelayed() int64 {
	if x.delay == nil {
		return 0
	}
	return x.delay.s.Held()
}

func (d *delayer) registryKey() string {
	return delayRegistryPrefix + strconv.FormatUint(d.id, 10)
}

// start runs the delayer's clock. Called with the vhost's lock held, once
// the exchange is installed.
func (d *delayer) start() { d.s.Start() }

// stop ends the delayer without waiting for it (a caller may hold the
// vhost's lock, which routing takes); drop removes its stored messages.
func (d *delayer) stop(drop bool) { d.s.Stop(drop) }

// holdBack holds m, published at now to a delayed exchange, for ms
// milliseconds; the message routed later carries x-delay -ms.
func (d *delayer) holdBack(m *Message, ms int64, o PublishOpts, now int64) PublishResult {
	// A new message, not a copy of *m: its encodings (encoding.go) are
	// m's, with m's headers.
	nm := &Message{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body,
		Hops: m.Hops, ts: m.ts, expiresAt: m.expiresAt}
	h := make(Table, len(m.Props.Headers))
	for k, val := range m.Props.Headers {
		h[k] = val
	}
	switch {
	case isText(m.Props.Headers["x-delay"]):
		// Published as text (every STOMP header, an MQTT 5 user
		// property): it stays text, so that those front ends pass it on.
		h["x-delay"] = strconv.FormatInt(-ms, 10)
	case ms <= math.MaxInt32:
		h["x-delay"] = int32(-ms)
	default:
		h["x-delay"] = -ms
	}
	nm.Props.Headers = h
	res := PublishResult{Routed: 1, OK: true}
	var done func(error)
	if o.Confirmer != nil && d.durable && m.Props.Persistent() {
		res.Pending = true
		c, tag := o.Confirmer, o.Tag
		done = func(err error) { c.Confirm(tag, err == nil) }
	}
	d.schedule(nm, "", ms, now, done)
	return res
}

// schedule holds nm for ms milliseconds from now, then routes it through
// the exchange, or to queue when one is named. done (may be nil) is told
// when the store has it.
func (d *delayer) schedule(nm *Message, queue string, ms int64, now int64, done func(error)) {
	nm.expiresAt = 0
	var data []byte
	if d.retry {
		e := headers.Encoder{Format: headers.Stored}
		e.Str(queue)
		data = encodeMessage(nm, now, e.B)
	} else {
		data = encodeMessage(nm, now, nil)
	}
	d.s.Schedule(delayedEntry{m: nm, queue: queue}, data, ms, now, done)
}

// decode reads a stored record.
func (d *delayer) decode(data []byte) (delayedEntry, error) {
	var e delayedEntry
	if d.retry {
		dc := headers.Decoder{B: data, Format: headers.Stored}
		e.queue = dc.Str()
		if err := corrupt(&dc); err != nil {
			return e, err
		}
		data = dc.B
	}
	m, _, err := decodeMessage(data)
	e.m = m
	return e, err
}

// route publishes a due message through its exchange (or to its queue);
// the sched.Delayer then deletes it from the store.
func (d *delayer) route(e delayedEntry) {
	m := e.m
	now := nowNano()
	m.ts = now
	if ms, ok := parseExpiration(m.Props.Expiration); ok {
		m.expiresAt = now + ms*int64(time.Millisecond)
		d.v.anyExpiring.Store(true)
	}
	if _, err := d.v.publish(m, PublishOpts{Queue: e.queue}, now, nil); err != nil {
		d.v.b.log.Debug("due delayed message not routed", "exchange", d.xname, "err", err)
	}
}
