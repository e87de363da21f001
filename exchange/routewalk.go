package exchange

import (
	"strings"
	"sync"
)

// routeScratch holds a publish's routing results; pooled so that routing
// allocates nothing per message.
type routeScratch struct {
	qs    []*Queue
	bs    []*binding          // a stack of matched bindings, one region per exchange level
	seenQ map[*Queue]struct{} // the queues in qs, once there are many (addQueue)
}

var routePool = sync.Pool{New: func() any {
	return &routeScratch{qs: make([]*Queue, 0, 8), bs: make([]*binding, 0, 16)}
}}

// route collects the queues m reaches from x, following
// exchange-to-exchange bindings and alternate exchanges, each queue once.
func (rv routeView) route(x xRoute, m *Message, sc *routeScratch) []*Queue {
	out := sc.qs
	if x.x.name == "" {
		if q := rv.queue(m.RoutingKey); q != nil {
			return append(out, q)
		}
		if strings.HasPrefix(m.RoutingKey, ReplyToQueue+".") {
			if q := rv.replyQueue(m.RoutingKey); q != nil {
				return append(out, q)
			}
		}
		return out
	}
	var seen [8]*Exchange
	out = rv.routeExchange(x, m, out, seen[:0], sc)
	clear(sc.bs)
	sc.bs = sc.bs[:0]
	if len(sc.seenQ) > 0 {
		clear(sc.seenQ)
	}
	return out
}

// addQueue appends q to out unless it is there: by a scan while out is
// short, by a set (kept in the pooled scratch) once it is long, so that a
// fan-out to many queues costs n rather than n².
func (sc *routeScratch) addQueue(out []*Queue, q *Queue) []*Queue {
	const scan = 16
	if len(out) < scan {
		for _, o := range out {
			if o == q {
				return out
			}
		}
		return append(out, q)
	}
	if len(sc.seenQ) == 0 {
		if sc.seenQ == nil {
			sc.seenQ = make(map[*Queue]struct{}, 2*scan)
		}
		for _, o := range out {
			sc.seenQ[o] = struct{}{}
		}
	}
	if _, dup := sc.seenQ[q]; dup {
		return out
	}
	sc.seenQ[q] = struct{}{}
	return append(out, q)
}

func (rv routeView) routeExchange(x xRoute, m *Message, out []*Queue, seen []*Exchange, sc *routeScratch) []*Queue {
	for _, s := range seen {
		if s == x.x {
			return out
		}
	}
	seen = append(seen, x.x)
	start := len(sc.bs)
	if mr, ok := x.r.(messageRouter); ok {
		sc.bs = mr.routeMessage(m, sc.bs)
	} else {
		sc.bs = x.r.route(m.RoutingKey, m.Props.Headers, sc.bs)
	}
	end := len(sc.bs)
	for i := start; i < end; i++ {
		b := sc.bs[i] // sc.bs may grow (and move) in the recursion below
		if b.q != nil {
			out = sc.addQueue(out, b.q)
		} else if bx, ok := rv.to(b.x); ok {
			out = rv.routeExchange(bx, m, out, seen, sc)
		}
	}
	sc.bs = sc.bs[:start]
	// As RabbitMQ does, the AE is used only if none of x's own bindings
	// matched, whatever its destinations then route to.
	if end == start && x.hasAE {
		if ae, ok := rv.exchange(x.alternate); ok {
			out = rv.routeExchange(ae, m, out, seen, sc)
		}
	}
	return out
}
