package mqtt

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Memory given back after a fleet comes or leaves. When thousands of
// connections end at once (devices moving to another node, a network
// cut), what they held is garbage that no collection frees while the
// broker stays idle: the runtime collects when allocation reaches the
// heap goal, and an idle broker allocates next to nothing, so its
// resident memory stays at the peak (measured: 446 MB with 18,000 devices
// gone, 78 MB 30 s after a collection). A wave of connections (a fleet
// coming up, a reconnect storm) leaves the like: what their CONNECT and
// SUBSCRIBE handling allocated and dropped, and free pages the heap grew
// by, which the runtime keeps (measured: ~10 MB of free pages and a few
// of garbage with 18,000 devices connected and idle, ~700 bytes a device).
// A burst that wakes a fleet (a command to every device, a keep-alive
// sweep) leaves its garbage and the stacks of the goroutines that served
// it, which only a collection frees (measured: ~100 MB of stacks for
// 18,000 devices, still there 30 s later when no collection came). So
// once giveBackAfter connections have come, gone or parked again after a
// wake, a collection that returns free memory to the system runs when
// none has for giveBackDelay: once for a wave, however large, and none
// while a steady churn goes on (the runtime's own collections keep up
// with that).
const (
	giveBackAfter = 1000
	giveBackDelay = 2 * time.Second
)

// giveBack is the collection; tests replace it. Two: the first moves
// what the pools hold (read buffers, readers, writer states: as many as
// the burst had connections busy at once) to their victim caches, which
// only the second frees; debug.FreeOSMemory's collection then returns
// the free memory to the system.
var giveBack = func() {
	runtime.GC()
	debug.FreeOSMemory()
}

// giveBackState counts connections that came or went towards the next
// collection.
type giveBackState struct {
	churn atomic.Int64
	last  atomic.Int64 // when the last one came or went, Unix nanoseconds
	armed atomic.Bool
	delay time.Duration // 0: giveBackDelay
}

// noteEnded counts a connection that ended.
func (g *giveBackState) noteEnded() { g.note() }

// noteConnected counts a connection that was accepted (CONNACK sent).
func (g *giveBackState) noteConnected() { g.note() }

// noteParked counts a connection that parked (its reader went back to
// the event loop after a wake).
func (g *giveBackState) noteParked() { g.note() }

// note counts a connection that came or went and arms the collection
// when enough have.
func (g *giveBackState) note() {
	g.last.Store(time.Now().UnixNano())
	if g.churn.Add(1) < giveBackAfter || !g.armed.CompareAndSwap(false, true) {
		return
	}
	d := g.delay
	if d == 0 {
		d = giveBackDelay
	}
	var fire func()
	fire = func() {
		if quiet := time.Duration(time.Now().UnixNano() - g.last.Load()); quiet < d {
			time.AfterFunc(d-quiet, fire) // the wave goes on
			return
		}
		g.churn.Store(0)
		giveBack()
		g.armed.Store(false)
	}
	time.AfterFunc(d, fire)
}

// dropIdleState gives back, when the connection parks (its reader is
// idle), the room a burst left in its state and its session's queues:
// the packet-id table once nothing is in flight, the reader's publish
// state (readerState: settled acknowledgements, the publish topic cache;
// kept while it holds MQTT 5 topic aliases), and each queue's unacked
// ring and ready buffers (exchange.Queue.Trim). Without it a fleet keeps
// what one burst of QoS 1 commands took (measured: ~5 KB per device,
// most of it the queue's unacked ring) for as long as it stays
// connected. Reader goroutine only, before it parks; the next burst
// grows them again.
func (c *conn) dropIdleState() {
	c.infMu.Lock()
	if c.inflight.len() == 0 {
		c.inflight = pidTable{next: c.inflight.next}
	}
	c.infMu.Unlock()
	if rd := c.rd; rd != nil && len(rd.ackSeqs) == 0 {
		if rd.aliasIn == nil {
			c.rd = nil
		} else {
			rd.ackSeqs, rd.ackQ = nil, nil
			rd.pubTopic, rd.pubKey = "", ""
		}
	}
	c.trimQueues()
}

// trimQueues gives back the room the session's queues keep for messages
// they no longer hold (exchange.Queue.Trim). It takes consMu and the
// queues' locks: the caller holds neither, nor ob.Mu.
func (c *conn) trimQueues() {
	c.consMu.Lock()
	for _, k := range c.consumers {
		k.Queue().Trim()
	}
	c.consMu.Unlock()
}
