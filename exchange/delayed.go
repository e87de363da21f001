package exchange

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange/headers"
)

// KindDelayed is the exchange type of RabbitMQ's delayed message plugin
// (rabbitmq_delayed_message_exchange): it routes as the type named by its
// x-delayed-type argument, but holds back a message whose x-delay header
// asks for a delay until that many milliseconds have passed.
//
// Held messages live in the store, in a message keyspace of their own (the
// exchange's delay id, allocated like a queue id), keyed by due time: the
// seq of a held message is its due time in unix milliseconds shifted left
// by delaySeqBits, with a counter in the low bits (restored at a restart
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

const (
	delaySeqBits = 22
	delaySeqMask = 1<<delaySeqBits - 1
	// maxDelay is the plugin's bound (Erlang's largest timer).
	maxDelay = 4294967295

	// The in-memory window of a delayer: at most this many messages and
	// bytes (whichever comes first); refilled from the store when it
	// holds fewer than delayLowWater.
	delayWindowMsgs  = 4096
	delayWindowBytes = 16 << 20
	delayLowWater    = delayWindowMsgs / 4

	delayRegistryPrefix = "delayed/"
)

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
	return ms, ms > 0 && ms <= maxDelay, nil
}

func isText(v any) bool {
	switch v.(type) {
	case string, []byte:
		return true
	}
	return false
}

func truncFloat(f float64) int64 {
	if math.IsNaN(f) || f < -maxDelay-1 || f > maxDelay+1 {
		return 0
	}
	return int64(f)
}

type delayedEntry struct {
	seq   uint64
	m     *Message
	queue string // a retry's queue (retry.go); "" routes through the exchange
	size  int64
}

func dueOf(seq uint64) int64 { return int64(seq >> delaySeqBits) }

// delayer holds one delayed exchange's messages until they fall due.
//
// Invariant (under mu): every held message whose seq is at most horizon is
// in win, which is sorted by seq; the rest are only in the store. A message
// is appended to the store before it is put in win, and deleted from the
// store only after it was taken out of win and routed, so a crash between
// the two routes it again (at least once), never loses it.
type delayer struct {
	v       *VHost
	xname   string
	id      uint64 // message keyspace in the store
	durable bool
	// retry: a vhost's retries (retry.go), each record led by the name of
	// the queue it goes back to.
	retry bool

	ctr  atomic.Uint64
	held atomic.Int64 // messages held, in window and store

	mu        sync.Mutex
	win       []delayedEntry
	winBytes  int64
	horizon   uint64
	refilling bool
	during    []delayedEntry // scheduled above horizon while refilling

	refills sync.WaitGroup // the refill in flight, waited for before done
	wake    chan struct{}
	stopc   chan struct{}
	done    chan struct{}
	started bool
	stopped bool
	drop    bool // on stop, drop the stored messages (the exchange was deleted)
}

func newDelayer(v *VHost, name string, id uint64, durable bool) *delayer {
	return &delayer{v: v, xname: name, id: id, durable: durable, horizon: math.MaxUint64,
		wake: make(chan struct{}, 1), stopc: make(chan struct{}), done: make(chan struct{})}
}

// MessagesDelayed is how many messages a delayed exchange holds back (0
// for any other exchange): the plugin's messages_delayed.
func (x *Exchange) MessagesDelayed() int64 {
	if x.delay == nil {
		return 0
	}
	return x.delay.held.Load()
}

func (d *delayer) registryKey() string {
	return delayRegistryPrefix + strconv.FormatUint(d.id, 10)
}

// start runs the delayer's clock. Called with the vhost's lock held, once
// the exchange is installed.
func (d *delayer) start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.stopped {
		return
	}
	d.started = true
	go d.run()
}

// stop ends the delayer without waiting for it (a caller may hold the
// vhost's lock, which routing takes); drop removes its stored messages.
func (d *delayer) stop(drop bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.stopped, d.drop = true, drop
	close(d.stopc)
	if !d.started {
		close(d.done)
		if drop {
			go d.dropStored()
		}
	}
}

func (d *delayer) dropStored() {
	st := d.v.b.store
	if err := st.DropMessages(d.id); err != nil {
		d.v.b.log.Warn("delayed messages of a deleted exchange not dropped", "exchange", d.xname, "err", err)
		return
	}
	_ = st.DeleteMeta(d.registryKey())
}

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
	// Rounded up to the millisecond: never routed early.
	due := uint64((now+int64(time.Millisecond)-1)/int64(time.Millisecond) + ms)
	seq := due<<delaySeqBits | (d.ctr.Add(1) & delaySeqMask)
	var data []byte
	if d.retry {
		e := headers.Encoder{Format: headers.Stored}
		e.Str(queue)
		data = encodeMessage(nm, now, e.B)
	} else {
		data = encodeMessage(nm, now, nil)
	}
	d.v.b.store.AppendMessage(d.id, seq, data, done)
	d.held.Add(1)

	e := delayedEntry{seq: seq, m: nm, queue: queue, size: int64(len(data))}
	d.mu.Lock()
	head := len(d.win) == 0 || seq < d.win[0].seq
	switch {
	case seq <= d.horizon:
		d.insertLocked(e)
		if !d.refilling {
			d.evictLocked()
		}
	case d.refilling:
		d.during = append(d.during, e)
	}
	d.mu.Unlock()
	if head {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// decode reads a stored record.
func (d *delayer) decode(seq uint64, data []byte) (delayedEntry, error) {
	e := delayedEntry{seq: seq, size: int64(len(data))}
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

// insertLocked puts e in the window unless it is there already (a refill
// may have read it from the store first).
func (d *delayer) insertLocked(e delayedEntry) {
	i := sort.Search(len(d.win), func(i int) bool { return d.win[i].seq >= e.seq })
	if i < len(d.win) && d.win[i].seq == e.seq {
		return
	}
	d.win = append(d.win, delayedEntry{})
	copy(d.win[i+1:], d.win[i:])
	d.win[i] = e
	d.winBytes += e.size
}

// evictLocked drops the latest-due messages from memory (they stay in the
// store) while the window is over its bounds.
func (d *delayer) evictLocked() {
	for len(d.win) > 1 && (len(d.win) > delayWindowMsgs || d.winBytes > delayWindowBytes) {
		last := len(d.win) - 1
		d.winBytes -= d.win[last].size
		d.win[last] = delayedEntry{}
		d.win = d.win[:last]
		d.horizon = d.win[last-1].seq
	}
}

// run routes messages as they fall due and refills the window.
func (d *delayer) run() {
	defer close(d.done)
	defer d.refills.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch []delayedEntry
	for {
		d.mu.Lock()
		nowMs := time.Now().UnixMilli()
		n := 0
		for n < len(d.win) && dueOf(d.win[n].seq) <= nowMs {
			n++
		}
		batch = append(batch[:0], d.win[:n]...)
		for i := range n {
			d.winBytes -= d.win[i].size
		}
		rest := copy(d.win, d.win[n:])
		clear(d.win[rest:])
		d.win = d.win[:rest]
		// The refill reads the store on its own goroutine, so that
		// messages falling due meanwhile are routed on time: it adds only
		// messages past horizon, and routing takes them from the head.
		if len(d.win) < delayLowWater && d.horizon != math.MaxUint64 && !d.refilling {
			d.refilling = true
			d.refills.Add(1)
			go d.refill()
		}
		wait := time.Hour
		if len(d.win) > 0 {
			wait = time.Duration(dueOf(d.win[0].seq)-nowMs) * time.Millisecond
		}
		d.mu.Unlock()

		for i := range batch {
			d.route(batch[i])
			batch[i] = delayedEntry{}
		}
		if n > 0 {
			continue // more may have fallen due while routing
		}
		timer.Reset(wait)
		select {
		case <-d.stopc:
			if d.drop {
				d.dropStored()
			}
			return
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// route publishes a due message through its exchange and then deletes it
// from the store.
func (d *delayer) route(e delayedEntry) {
	m := e.m
	now := nowNano()
	m.ts = now
	if ms, ok := parseExpiration(m.Props.Expiration); ok {
		m.expiresAt = now + ms*int64(time.Millisecond)
		d.v.anyExpiring.Store(true)
	}
	select {
	case <-d.stopc:
		// Stopping: a deleted exchange drops the message; at a broker
		// stop it stays stored and routes after the restart.
		return
	default:
	}
	d.held.Add(-1)
	if _, err := d.v.publish(m, PublishOpts{Queue: e.queue}, now, nil); err != nil {
		d.v.b.log.Debug("due delayed message not routed", "exchange", d.xname, "err", err)
	}
	d.v.b.store.DeleteMessage(d.id, e.seq)
}

// refill reads the next-due messages past the window from the store.
// refilling is set (under mu) by the caller, which starts it.
func (d *delayer) refill() {
	defer d.refills.Done()
	d.mu.Lock()
	from := d.horizon + 1
	want := max(delayWindowMsgs-len(d.win), delayLowWater)
	d.mu.Unlock()

	var read []delayedEntry
	var bytes int64
	err := d.v.b.store.ReadMessages(d.id, from, func(seq uint64, data []byte) bool {
		e, err := d.decode(seq, data)
		if err != nil {
			d.v.b.log.Error("corrupt delayed message dropped", "exchange", d.xname, "seq", seq, "err", err)
			d.v.b.store.DeleteMessage(d.id, seq)
			d.held.Add(-1)
			return true
		}
		read = append(read, e)
		bytes += int64(len(data))
		return len(read) < want && bytes < delayWindowBytes
	})
	d.mu.Lock()
	defer func() {
		d.mu.Unlock()
		select { // the head may be new
		case d.wake <- struct{}{}:
		default:
		}
	}()
	d.refilling = false
	if err != nil {
		d.v.b.log.Error("delayed messages not read", "exchange", d.xname, "err", err)
		d.during = nil
		return
	}
	full := len(read) >= want || bytes >= delayWindowBytes
	if full {
		d.horizon = read[len(read)-1].seq
	} else {
		d.horizon = math.MaxUint64
	}
	for _, e := range read {
		d.insertLocked(e)
	}
	for _, e := range d.during {
		if e.seq <= d.horizon {
			d.insertLocked(e)
		}
	}
	clear(d.during)
	d.during = d.during[:0]
	d.evictLocked()
}
