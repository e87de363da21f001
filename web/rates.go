package web

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// Message rates: a sampler reads the core's counters (atomics, see
// exchange.MsgStats) every interval and keeps a ring of samples per object.
// A rate is the change between the two newest samples over their time
// apart: a sliding window one interval wide. The node-wide and per-vhost
// rings keep historyLen samples for the charts (?msg_rates_age=,
// ?lengths_age=).

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

type rates struct {
	interval time.Duration

	mu        sync.Mutex
	global    *ring
	vhosts    map[string]*ring
	queues    map[*exchange.Queue]*ring
	exchanges map[*exchange.Exchange]*ring
	conns     map[string]*ring
	chans     map[string]*ring // by channel name, "<connection> (<n>)"
}

func newRates(interval time.Duration) *rates {
	return &rates{interval: interval, global: newRing(historyLen), vhosts: map[string]*ring{},
		queues: map[*exchange.Queue]*ring{}, exchanges: map[*exchange.Exchange]*ring{}, conns: map[string]*ring{},
		chans: map[string]*ring{}}
}

type qReading struct {
	q *exchange.Queue
	s sample
}

type xReading struct {
	x *exchange.Exchange
	s sample
}

// sample reads every counter of the core and pushes one sample per object.
// The core is read without holding rt.mu; rings of objects gone are
// dropped.
func (rt *rates) sample(s *Server) {
	now := time.Now().UnixMilli()
	var qs []qReading
	var xs []xReading
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
			qs = append(qs, qReading{q, sample{t: now, s: q.MsgStats(), ready: int64(st.Ready), unacked: int64(st.Unacked)}})
			vsm.ready += int64(st.Ready)
			vsm.unacked += int64(st.Unacked)
		}
		for _, x := range v.Exchanges() {
			xs = append(xs, xReading{x, sample{t: now, s: x.MsgStats()}})
		}
		vs[vn] = vsm
		addStats(&global.s, vsm.s)
		global.ready += vsm.ready
		global.unacked += vsm.unacked
	}
	var cs []ConnectionInfo
	if s.conns != nil {
		cs = s.conns.ListConnections()
	}

	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.global.push(global)
	nv := make(map[string]*ring, len(vs))
	for n, sm := range vs {
		r := rt.vhosts[n]
		if r == nil {
			r = newRing(historyLen)
		}
		r.push(sm)
		nv[n] = r
	}
	rt.vhosts = nv
	nq := make(map[*exchange.Queue]*ring, len(qs))
	for _, e := range qs {
		r := rt.queues[e.q]
		if r == nil {
			r = newRing(2)
		}
		r.push(e.s)
		nq[e.q] = r
	}
	rt.queues = nq
	nx := make(map[*exchange.Exchange]*ring, len(xs))
	for _, e := range xs {
		r := rt.exchanges[e.x]
		if r == nil {
			r = newRing(2)
		}
		r.push(e.s)
		nx[e.x] = r
	}
	rt.exchanges = nx
	nc := make(map[string]*ring, len(cs))
	nch := make(map[string]*ring, len(rt.chans))
	for _, c := range cs {
		r := rt.conns[c.Name]
		if r == nil {
			r = newRing(2)
		}
		r.push(sample{t: now, recv: c.RecvOct, send: c.SendOct,
			s: exchange.MsgStats{Publish: c.Published, Deliver: c.Delivered}})
		nc[c.Name] = r
		for _, ci := range c.ChannelList {
			name := channelName(c.Name, ci.Number)
			r := rt.chans[name]
			if r == nil {
				r = newRing(2)
			}
			st, confirmed := chanMsgStats(ci)
			r.push(sample{t: now, s: st, confirm: confirmed})
			nch[name] = r
		}
	}
	rt.conns = nc
	rt.chans = nch
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
	defer rt.mu.Unlock()
	return rt.queues[q].window(0)
}

func (rt *rates) exchange(x *exchange.Exchange) window {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.exchanges[x].window(0)
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
	defer rt.mu.Unlock()
	return rt.conns[name].window(0)
}

func (rt *rates) channel(name string) window {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.chans[name].window(0)
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
