package exchange

import (
	"sync"
	"sync/atomic"
)

// The routing table (DESIGN.md, the hot path): publishers read a vhost's
// topology through an immutable copy of what routing needs, reached by an
// atomic pointer, so a publish takes no lock. Every topology change holds
// v.mu for writing, and its Unlock drops the copy; the next publishes route
// under the read lock as before, and after enough of them (a number that
// grows with the topology, so that a vhost whose topology keeps changing,
// say one RPC reply queue per request, does not copy its tables on every
// publish) one of them builds a new copy under that read lock.
//
// A publish that loaded the old copy before a change is concurrent with the
// change, as one that took the read lock just before it was: the queue
// itself refuses a message once it is deleted (see Queue.enqueue).

// topoMu is a vhost's topology lock with its routing table.
type topoMu struct {
	sync.RWMutex
	table  atomic.Pointer[routeTable]
	misses atomic.Int64 // publishes routed under the lock since the copy was dropped
	after  atomic.Int64 // build a copy after this many
	build  sync.Mutex   // one builder at a time (TryLock)
}

// Unlock ends a topology change: it drops the routing table first.
func (m *topoMu) Unlock() {
	m.table.Store(nil)
	m.misses.Store(0)
	m.RWMutex.Unlock()
}

// routeTable is the immutable copy.
type routeTable struct {
	xs      map[string]*xRoute
	queues  map[string]*Queue
	replyTo map[string]*Queue
}

// xRoute is what routing reads of an exchange: in a routeTable a copy of
// its bindings; for the live topology its own fields (under v.mu).
type xRoute struct {
	x         *Exchange
	r         router
	alternate string
	hasAE     bool
}

// routeView is the topology one publish routes against: a routeTable, or
// the live one under the read lock (t == nil), which release drops.
type routeView struct {
	v      *VHost
	t      *routeTable
	locked bool
}

// cloner is a router that can copy itself for a routeTable. An exchange
// whose router is not one keeps its vhost on the locked path.
type cloner interface {
	clone() router
}

// routes returns the view for one publish; call release when done with it.
func (v *VHost) routes() routeView {
	if t := v.mu.table.Load(); t != nil {
		return routeView{v: v, t: t}
	}
	v.mu.RLock()
	if v.mu.misses.Add(1) >= v.mu.after.Load() && v.mu.build.TryLock() {
		t, size := v.buildRouteTableLocked()
		if t != nil {
			v.mu.table.Store(t)
		}
		v.mu.after.Store(16 + int64(size)/8)
		v.mu.build.Unlock()
		if t != nil {
			return routeView{v: v, t: t, locked: true}
		}
	}
	return routeView{v: v, locked: true}
}

func (rv routeView) release() {
	if rv.locked {
		rv.v.mu.RUnlock()
	}
}

// buildRouteTableLocked copies the topology, v.mu held (for reading); nil
// if some exchange's router cannot be copied. size is what it copied.
func (v *VHost) buildRouteTableLocked() (*routeTable, int) {
	t := &routeTable{xs: make(map[string]*xRoute, len(v.exchanges)), queues: make(map[string]*Queue, len(v.queues)),
		replyTo: make(map[string]*Queue, len(v.replyTo))}
	size := len(v.queues) + len(v.replyTo)
	ok := true
	for name, x := range v.exchanges {
		c, can := x.router.(cloner)
		if !can {
			ok = false
			continue
		}
		t.xs[name] = &xRoute{x: x, r: c.clone(), alternate: x.alternate, hasAE: x.hasAE}
		size += 1 + len(x.bindings)
	}
	for name, q := range v.queues {
		t.queues[name] = q
	}
	for name, q := range v.replyTo {
		t.replyTo[name] = q
	}
	if !ok {
		return nil, size
	}
	return t, size
}

func (rv routeView) exchange(name string) (xRoute, bool) {
	if rv.t != nil {
		if xr := rv.t.xs[name]; xr != nil {
			return *xr, true
		}
		return xRoute{}, false
	}
	x := rv.v.exchanges[name]
	if x == nil {
		return xRoute{}, false
	}
	return xRoute{x: x, r: x.router, alternate: x.alternate, hasAE: x.hasAE}, true
}

// to is the route of x, the destination of a binding.
func (rv routeView) to(x *Exchange) (xRoute, bool) {
	if rv.t != nil {
		if xr := rv.t.xs[x.name]; xr != nil && xr.x == x {
			return *xr, true
		}
		return xRoute{}, false
	}
	return xRoute{x: x, r: x.router, alternate: x.alternate, hasAE: x.hasAE}, true
}

func (rv routeView) queue(name string) *Queue {
	if rv.t != nil {
		return rv.t.queues[name]
	}
	return rv.v.queues[name]
}

func (rv routeView) replyQueue(name string) *Queue {
	if rv.t != nil {
		return rv.t.replyTo[name]
	}
	return rv.v.replyTo[name]
}

// --- router copies ---

func (r *directRouter) clone() router {
	m := make(map[string][]*binding, len(r.m))
	for k, l := range r.m {
		m[k] = append([]*binding(nil), l...)
	}
	return &directRouter{m: m}
}

func (r *fanoutRouter) clone() router {
	return &fanoutRouter{all: append([]*binding(nil), r.all...)}
}

func (r *headersRouter) clone() router {
	return &headersRouter{all: append([]*binding(nil), r.all...)}
}

func (r *topicRouter) clone() router { return &topicRouter{root: r.root.clone()} }

func (n *topicNode) clone() *topicNode {
	c := &topicNode{bindings: append([]*binding(nil), n.bindings...)}
	if n.star != nil {
		c.star = n.star.clone()
	}
	if n.hash != nil {
		c.hash = n.hash.clone()
	}
	if n.children != nil {
		c.children = make(map[string]*topicNode, len(n.children))
		for w, ch := range n.children {
			c.children[w] = ch.clone()
		}
	}
	return c
}
