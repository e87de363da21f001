package frontend

import (
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/exchange"
)

// WatchTick is how often a consumer-timeout watchdog wakes.
const WatchTick = time.Second

// Watchdog is a connection's consumer-timeout clock and the goroutine that
// advances it, as RabbitMQ's consumer_timeout: a delivery that stays
// unacknowledged past its queue's timeout ends its channel (AMQP) or its
// connection (STOMP); what ending means is the protocol's (its check).
//
// The clock (Now) stamps deliveries without a clock read each. It starts
// with the connection's first delivery that needs an acknowledgement
// (Start) and the goroutine advances it every tick; a stamp is therefore
// at most a tick older than its delivery, and Expired adds that tick, so a
// delivery is taken for timed out between its timeout and its timeout plus
// two ticks after it was made, never before. The zero value is ready to
// use.
type Watchdog struct {
	now     atomic.Int64
	running atomic.Bool
	tick    time.Duration // 0: WatchTick (tests shorten it)
}

func (w *Watchdog) period() time.Duration {
	if w.tick > 0 {
		return w.tick
	}
	return WatchTick
}

// Now is the watchdog's clock (unix ns) to stamp a delivery with; 0 until
// Start.
func (w *Watchdog) Now() int64 { return w.now.Load() }

// A Checker is the protocol's look at a connection's unacknowledged
// deliveries, each tick: it ends what timed out and returns false to stop
// the watchdog (the connection is ending).
type Checker interface {
	CheckTimeouts(now int64) bool
}

// Start starts the watchdog once; later calls do nothing (a load, with no
// allocation, so a delivery may call it each time). Every tick the
// watchdog advances the clock and calls check with the time; it ends when
// check returns false or when done or stop (nil: none) is closed. check
// runs on the watchdog's goroutine, never on the caller's.
func (w *Watchdog) Start(done, stop <-chan struct{}, check Checker) {
	if w.running.Load() || !w.running.CompareAndSwap(false, true) {
		return
	}
	w.now.Store(time.Now().UnixNano())
	go w.run(done, stop, check)
}

func (w *Watchdog) run(done, stop <-chan struct{}, check Checker) {
	t := time.NewTicker(w.period())
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-stop:
			return
		case now := <-t.C:
			n := now.UnixNano()
			w.now.Store(n)
			if !check.CheckTimeouts(n) {
				return
			}
		}
	}
}

// Expired reports whether a delivery stamped at (Now when it was made)
// whose consumer timeout is to (0: none) has timed out at now.
func (w *Watchdog) Expired(now, at int64, to time.Duration) bool {
	return to > 0 && time.Duration(now-at) >= to+w.period()
}

// ConsumerTimeout is the consumer timeout of deliveries from q: the
// queue's own (x-consumer-timeout, or a policy's consumer-timeout), else
// def, the server's (0: none).
func ConsumerTimeout(q *exchange.Queue, def time.Duration) time.Duration {
	if d, ok := q.ConsumerTimeout(); ok {
		return d
	}
	return def
}
