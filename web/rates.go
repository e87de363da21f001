package web

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// Message rates: a sampler reads the core's counters (atomics, see
// exchange.MsgStats) and the connections' (CounterSource) every interval.
// A rate is the change between the two newest readings over their time
// apart: a sliding window one interval wide. Queues, exchanges,
// connections and channels keep only those two readings (pair, table);
// the node-wide and per-vhost rings keep historyLen samples for the
// charts (?msg_rates_age=, ?lengths_age=).

const historyLen = 121 // 10 minutes at the default 5 s

// sample is one reading of an object's counters and lengths.
type sample struct {
	t       int64 // unix milliseconds
	s       exchange.MsgStats
	ready   int64
	unacked int64
	recv    uint64 // connection octets
	send    uint64
	confirm uint64 // a channel's confirms
}

type ring struct {
	buf  []sample
	next int
	n    int
}

func newRing(size int) *ring { return &ring{buf: make([]sample, size)} }

func (r *ring) push(s sample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.n < len(r.buf) {
		r.n++
	}
}

// at returns the k-th newest sample (0 is the newest).
func (r *ring) at(k int) (sample, bool) {
	if k >= r.n {
		return sample{}, false
	}
	return r.buf[(r.next-1-k+2*len(r.buf))%len(r.buf)], true
}

// window is the two newest samples of an object, copied out of its ring.
type window struct {
	a, b sample // a newer
	ok   bool
	hist []sample // newest first, only when asked for
}

func (r *ring) window(histAge time.Duration) window {
	if r == nil {
		return window{}
	}
	a, ok1 := r.at(0)
	b, ok2 := r.at(1)
	w := window{a: a, b: b, ok: ok1 && ok2}
	if histAge > 0 && ok1 {
		for k := 0; k < r.n; k++ {
			s, _ := r.at(k)
			if time.Duration(a.t-s.t)*time.Millisecond > histAge {
				break
			}
			w.hist = append(w.hist, s)
		}
	}
	return w
}

func (w window) rate(get func(*sample) float64) float64 {
	if !w.ok || w.a.t <= w.b.t {
		return 0
	}
	return (get(&w.a) - get(&w.b)) / (float64(w.a.t-w.b.t) / 1000)
}

// The per-object state of queues, exchanges, connections and channels is
// only the last two readings, in a map kept from tick to tick: a tick
// overwrites each object's older reading in place, so an idle object costs
// a fixed number of bytes and no allocation per tick. An object not seen
// in a tick (deleted, closed) is dropped at the end of it.

// pair is an object's two newest readings; n counts them up to 2. A
// reading carries no time: every tick pushes every object it sees and
// drops the others, so a is of tick seen and b of tick seen-1 (rates.at).
type pair[R any] struct {
	a, b R // a newer
	n    uint8
	seen uint8 // the generation of a's tick
}

// table is the readings of one kind of object.
type table[K comparable, R any] struct {
	m      map[K]pair[R]
	pushed int // objects pushed in the current tick
}

func newTable[K comparable, R any]() table[K, R] { return table[K, R]{m: map[K]pair[R]{}} }

func (t *table[K, R]) push(k K, r R, gen uint8) {
	p := t.m[k]
	p.b, p.a, p.seen = p.a, r, gen
	if p.n < 2 {
		p.n++
	}
	t.m[k] = p
	t.pushed++
}

// sweep drops the objects not pushed in the tick of generation gen; a
// tick where nothing went away costs no scan.
func (t *table[K, R]) sweep(gen uint8) {
	if len(t.m) > t.pushed {
		for k, p := range t.m {
			if p.seen != gen {
				delete(t.m, k)
			}
		}
	}
	t.pushed = 0
}

func (t *table[K, R]) get(k K) (pair[R], bool) {
	p, ok := t.m[k]
	return p, ok
}

// queueReading, exchangeReading, connReading and chanReading are what a
// tick keeps of each kind of object (a sample without the fields the kind
// has not).
type queueReading struct {
	// The counters a queue's message_stats shows (messageStats).
	publish, deliver, deliverNoAck, get, getNoAck, getEmpty, ack, redeliver, dropBehind uint64
	ready, unacked                                                                      int64
}

func newQueueReading(m exchange.MsgStats, st exchange.QueueStatus) queueReading {
	return queueReading{publish: m.Publish, deliver: m.Deliver, deliverNoAck: m.DeliverNoAck, get: m.Get,
		getNoAck: m.GetNoAck, getEmpty: m.GetEmpty, ack: m.Ack, redeliver: m.Redeliver, dropBehind: m.DropBehind,
		ready: int64(st.Ready), unacked: int64(st.Unacked)}
}

func (r queueReading) sample() sample {
	return sample{s: exchange.MsgStats{Publish: r.publish, Deliver: r.deliver, DeliverNoAck: r.deliverNoAck, Get: r.get,
		GetNoAck: r.getNoAck, GetEmpty: r.getEmpty, Ack: r.ack, Redeliver: r.redeliver, DropBehind: r.dropBehind},
		ready: r.ready, unacked: r.unacked}
}

type exchangeReading struct {
	publishIn, publishOut uint64
}

type connReading struct {
	recv, send, publish, deliv uint64
}

type chanReading struct {
	s       exchange.MsgStats
	confirm uint64
}

// chanKey names a channel without building RabbitMQ's name for it.
type chanKey struct {
	conn string
	n    int
}

type rates struct {
	interval time.Duration

	mu        sync.Mutex
	gen       uint8
	at        [256]int64 // unix milliseconds of the ticks, by generation
	global    *ring
	vhosts    map[string]*ring
	queues    table[*exchange.Queue, queueReading]
	exchanges table[*exchange.Exchange, exchangeReading]
	conns     table[string, connReading]
	chans     table[chanKey, chanReading]
}

func newRates(interval time.Duration) *rates {
	return &rates{interval: interval, global: newRing(historyLen), vhosts: map[string]*ring{},
		queues: newTable[*exchange.Queue, queueReading](), exchanges: newTable[*exchange.Exchange, exchangeReading](),
		conns: newTable[string, connReading](), chans: newTable[chanKey, chanReading]()}
}

// sample reads every counter of the core and the connections and pushes
// one reading per object; objects gone are dropped. The core and the
// front ends are read object by object, rt.mu held only to store each
// reading: the sampler keeps no copy of the object lists, and API readers
// wait for one object at most.
func (rt *rates) sample(s *Server) {
	now := time.Now().UnixMilli()
	rt.mu.Lock()
	rt.gen++
	gen := rt.gen
	rt.at[gen] = now
	rt.mu.Unlock()

	vs := map[string]sample{}
	var global sample
	global.t = now
	for _, vn := range s.core.VHosts() {
		v, ok := s.core.VHost(vn)
		if !ok {
			continue
		}
		vsm := sample{t: now, s: v.MsgStats()}
		for _, q := range v.Queues() {
			st := q.Status()
			r := newQueueReading(q.MsgStats(), st)
			rt.mu.Lock()
			rt.queues.push(q, r, gen)
			rt.mu.Unlock()
			vsm.ready += int64(st.Ready)
			vsm.unacked += int64(st.Unacked)
		}
		for _, x := range v.Exchanges() {
			ms := x.MsgStats()
			rt.mu.Lock()
			rt.exchanges.push(x, exchangeReading{publishIn: ms.PublishIn, publishOut: ms.PublishOut}, gen)
			rt.mu.Unlock()
		}
		vs[vn] = vsm
		addStats(&global.s, vsm.s)
		global.ready += vsm.ready
		global.unacked += vsm.unacked
	}

	rt.mu.Lock()
	rt.global.push(global)
	if len(rt.vhosts) != len(vs) {
		for n := range rt.vhosts {
			if _, ok := vs[n]; !ok {
				delete(rt.vhosts, n)
			}
		}
	}
	for n, sm := range vs {
		r := rt.vhosts[n]
		if r == nil {
			r = newRing(historyLen)
			rt.vhosts[n] = r
		}
		r.push(sm)
	}
	rt.queues.sweep(gen)
	rt.exchanges.sweep(gen)
	rt.mu.Unlock()

	if s.conns != nil {
		eachCounters(s.conns, func(c *ConnCounters) {
			rt.mu.Lock()
			rt.conns.push(c.Name, connReading{recv: c.RecvOct, send: c.SendOct,
				publish: c.Published, deliv: c.Delivered}, gen)
			for i := range c.ChannelList {
				ci := &c.ChannelList[i]
				st, confirmed := chanMsgStats(*ci)
				rt.chans.push(chanKey{c.Name, ci.Number}, chanReading{s: st, confirm: confirmed}, gen)
			}
			rt.mu.Unlock()
		})
	}
	rt.mu.Lock()
	rt.conns.sweep(gen)
	rt.chans.sweep(gen)
	rt.mu.Unlock()
}

func addStats(dst *exchange.MsgStats, s exchange.MsgStats) {
	dst.Publish += s.Publish
	dst.PublishIn += s.PublishIn
	dst.PublishOut += s.PublishOut
	dst.DropUnroutable += s.DropUnroutable
	dst.DropBehind += s.DropBehind
	dst.ReturnUnroutable += s.ReturnUnroutable
	dst.Deliver += s.Deliver
	dst.DeliverNoAck += s.DeliverNoAck
	dst.Get += s.Get
	dst.GetNoAck += s.GetNoAck
	dst.GetEmpty += s.GetEmpty
	dst.Ack += s.Ack
	dst.Redeliver += s.Redeliver
}

func (rt *rates) queue(q *exchange.Queue) window {
	rt.mu.Lock()
	p, ok := rt.queues.get(q)
	rt.mu.Unlock()
	if !ok {
		return window{}
	}
	return rt.window(p.seen, p.a.sample(), p.b.sample(), p.n)
}

func (rt *rates) exchange(x *exchange.Exchange) window {
	rt.mu.Lock()
	p, ok := rt.exchanges.get(x)
	rt.mu.Unlock()
	if !ok {
		return window{}
	}
	f := func(r exchangeReading) sample {
		return sample{s: exchange.MsgStats{PublishIn: r.publishIn, PublishOut: r.publishOut}}
	}
	return rt.window(p.seen, f(p.a), f(p.b), p.n)
}

// window is an object's rate window from its pair's readings a and b
// (converted to samples), timed by the tick they were read in.
func (rt *rates) window(seen uint8, a, b sample, n uint8) window {
	rt.mu.Lock()
	a.t, b.t = rt.at[seen], rt.at[seen-1]
	rt.mu.Unlock()
	return window{a: a, b: b, ok: n == 2}
}

func (rt *rates) vhost(name string, age time.Duration) window {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.vhosts[name].window(age)
}

func (rt *rates) node(age time.Duration) window {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.global.window(age)
}

func (rt *rates) conn(name string) window {
	rt.mu.Lock()
	p, ok := rt.conns.get(name)
	rt.mu.Unlock()
	if !ok {
		return window{}
	}
	f := func(r connReading) sample {
		return sample{recv: r.recv, send: r.send, s: exchange.MsgStats{Publish: r.publish, Deliver: r.deliv}}
	}
	return rt.window(p.seen, f(p.a), f(p.b), p.n)
}

// channel is channel n of connection conn.
func (rt *rates) channel(conn string, n int) window {
	rt.mu.Lock()
	p, ok := rt.chans.get(chanKey{conn, n})
	rt.mu.Unlock()
	if !ok {
		return window{}
	}
	f := func(r chanReading) sample { return sample{s: r.s, confirm: r.confirm} }
	return rt.window(p.seen, f(p.a), f(p.b), p.n)
}

// historyAge reads ?msg_rates_age= or ?lengths_age= (seconds).
func historyAge(r *http.Request) time.Duration {
	a := r.URL.Query().Get("msg_rates_age")
	if a == "" {
		a = r.URL.Query().Get("lengths_age")
	}
	n, err := strconv.Atoi(a)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// --- JSON ---

type point struct {
	Sample    float64 `json:"sample"`
	Timestamp int64   `json:"timestamp"`
}

// details is RabbitMQ's "<field>_details" object.
type details struct {
	Rate    float64  `json:"rate"`
	Samples []point  `json:"samples,omitempty"`
	AvgRate *float64 `json:"avg_rate,omitempty"`
	Avg     *float64 `json:"avg,omitempty"`
}

func (w window) details(get func(*sample) float64) details {
	d := details{Rate: w.rate(get)}
	if len(w.hist) > 0 {
		d.Samples = make([]point, len(w.hist))
		var sum float64
		for i := range w.hist {
			d.Samples[i] = point{Sample: get(&w.hist[i]), Timestamp: w.hist[i].t}
			sum += d.Samples[i].Sample
		}
		avg := sum / float64(len(w.hist))
		d.Avg = &avg
		var ar float64
		if n := len(w.hist); n > 1 && w.hist[0].t > w.hist[n-1].t {
			ar = (get(&w.hist[0]) - get(&w.hist[n-1])) / (float64(w.hist[0].t-w.hist[n-1].t) / 1000)
		}
		d.AvgRate = &ar
	}
	return d
}

// msgStatsJSON is RabbitMQ's message_stats object; which fields are set
// depends on the object (exchanges have publish_in/out only).
type msgStatsJSON struct {
	Publish               *uint64  `json:"publish,omitempty"`
	PublishDetails        *details `json:"publish_details,omitempty"`
	PublishIn             *uint64  `json:"publish_in,omitempty"`
	PublishInDetails      *details `json:"publish_in_details,omitempty"`
	PublishOut            *uint64  `json:"publish_out,omitempty"`
	PublishOutDetails     *details `json:"publish_out_details,omitempty"`
	Deliver               *uint64  `json:"deliver,omitempty"`
	DeliverDetails        *details `json:"deliver_details,omitempty"`
	DeliverNoAck          *uint64  `json:"deliver_no_ack,omitempty"`
	DeliverNoAckDetails   *details `json:"deliver_no_ack_details,omitempty"`
	Get                   *uint64  `json:"get,omitempty"`
	GetDetails            *details `json:"get_details,omitempty"`
	GetNoAck              *uint64  `json:"get_no_ack,omitempty"`
	GetNoAckDetails       *details `json:"get_no_ack_details,omitempty"`
	GetEmpty              *uint64  `json:"get_empty,omitempty"`
	GetEmptyDetails       *details `json:"get_empty_details,omitempty"`
	Confirm               *uint64  `json:"confirm,omitempty"`
	ConfirmDetails        *details `json:"confirm_details,omitempty"`
	DeliverGet            *uint64  `json:"deliver_get,omitempty"`
	DeliverGetDetails     *details `json:"deliver_get_details,omitempty"`
	Ack                   *uint64  `json:"ack,omitempty"`
	AckDetails            *details `json:"ack_details,omitempty"`
	Redeliver             *uint64  `json:"redeliver,omitempty"`
	RedeliverDetails      *details `json:"redeliver_details,omitempty"`
	DropUnroutable        *uint64  `json:"drop_unroutable,omitempty"`
	DropUnroutableDetails *details `json:"drop_unroutable_details,omitempty"`
	// Trident's: transient messages dropped for at-most-once consumers
	// too far behind (MQTT QoS 0 to a slow clean session).
	DropBehind        *uint64  `json:"drop_behind,omitempty"`
	DropBehindDetails *details `json:"drop_behind_details,omitempty"`
}

type statKind int

const (
	kindQueue statKind = iota
	kindExchange
	kindVHost
	kindChannel
)

func counter(cur uint64, w window, get func(*sample) uint64) (*uint64, *details) {
	d := w.details(func(s *sample) float64 { return float64(get(s)) })
	return &cur, &d
}

// messageStats renders counters cur (read now) with rates from w.
func messageStats(kind statKind, cur exchange.MsgStats, w window) msgStatsJSON {
	var m msgStatsJSON
	if kind == kindExchange {
		m.PublishIn, m.PublishInDetails = counter(cur.PublishIn, w, func(s *sample) uint64 { return s.s.PublishIn })
		m.PublishOut, m.PublishOutDetails = counter(cur.PublishOut, w, func(s *sample) uint64 { return s.s.PublishOut })
		return m
	}
	m.Publish, m.PublishDetails = counter(cur.Publish, w, func(s *sample) uint64 { return s.s.Publish })
	m.Deliver, m.DeliverDetails = counter(cur.Deliver, w, func(s *sample) uint64 { return s.s.Deliver })
	m.DeliverNoAck, m.DeliverNoAckDetails = counter(cur.DeliverNoAck, w, func(s *sample) uint64 { return s.s.DeliverNoAck })
	m.Get, m.GetDetails = counter(cur.Get, w, func(s *sample) uint64 { return s.s.Get })
	m.GetNoAck, m.GetNoAckDetails = counter(cur.GetNoAck, w, func(s *sample) uint64 { return s.s.GetNoAck })
	m.GetEmpty, m.GetEmptyDetails = counter(cur.GetEmpty, w, func(s *sample) uint64 { return s.s.GetEmpty })
	m.DeliverGet, m.DeliverGetDetails = counter(cur.DeliverGet(), w, func(s *sample) uint64 { return s.s.DeliverGet() })
	m.Ack, m.AckDetails = counter(cur.Ack, w, func(s *sample) uint64 { return s.s.Ack })
	m.Redeliver, m.RedeliverDetails = counter(cur.Redeliver, w, func(s *sample) uint64 { return s.s.Redeliver })
	if cur.DropBehind > 0 {
		m.DropBehind, m.DropBehindDetails = counter(cur.DropBehind, w, func(s *sample) uint64 { return s.s.DropBehind })
	}
	if kind == kindVHost {
		m.DropUnroutable, m.DropUnroutableDetails = counter(cur.DropUnroutable, w, func(s *sample) uint64 { return s.s.DropUnroutable })
	}
	return m
}

// lengths renders messages, messages_ready and messages_unacknowledged
// with their details into the given fields.
type lengthsJSON struct {
	Messages                      int64   `json:"messages"`
	MessagesDetails               details `json:"messages_details"`
	MessagesReady                 int64   `json:"messages_ready"`
	MessagesReadyDetails          details `json:"messages_ready_details"`
	MessagesUnacknowledged        int64   `json:"messages_unacknowledged"`
	MessagesUnacknowledgedDetails details `json:"messages_unacknowledged_details"`
}

func lengths(ready, unacked int64, w window) lengthsJSON {
	return lengthsJSON{
		Messages:                      ready + unacked,
		MessagesDetails:               w.details(func(s *sample) float64 { return float64(s.ready + s.unacked) }),
		MessagesReady:                 ready,
		MessagesReadyDetails:          w.details(func(s *sample) float64 { return float64(s.ready) }),
		MessagesUnacknowledged:        unacked,
		MessagesUnacknowledgedDetails: w.details(func(s *sample) float64 { return float64(s.unacked) }),
	}
}
