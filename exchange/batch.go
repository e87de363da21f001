package exchange

import "github.com/trident-broker/trident/exchange/streamlog"

// Batch lets a front end that publishes many messages in a row (its reader
// working through what one read brought in) have the consumers' writers
// woken once at the end of the run instead of once per delivery: a sink
// that gets a Delivery with a Batch may, rather than wake its writer,
// register itself with Defer, and the publisher calls Flush before it
// next waits for input. A Batch belongs to one goroutine, the publisher's;
// Deliver calls that carry it run on that goroutine, inside its Publish.
//
// A Batch also lends its publishes one reading of the clock: the messages
// of one run were read from the network at once, so they take the time
// of the run's first publish (refreshed every clockUses publishes, so
// that a long run stays within tens of microseconds of the clock), until
// Tick, which the publisher calls before it next waits for input.
type Batch struct {
	fs   []Flusher
	now  int64
	uses int
}

// clockUses is how many publishes share one reading of the clock.
const clockUses = 64

// time is the run's time, for a publish.
func (b *Batch) time() int64 {
	if b.now == 0 || b.uses >= clockUses {
		b.now, b.uses = nowNano(), 0
	}
	b.uses++
	return b.now
}

// Tick ends the run's reading of the clock: the next publish takes it
// again.
func (b *Batch) Tick() { b.now = 0 }

// Active reports whether Flush or Tick has something to do: a writer
// waits for Flush, or a publish read the clock.
func (b *Batch) Active() bool { return len(b.fs) > 0 || b.now != 0 }

// Flusher is what a sink (or a stream's log) registers: Flush wakes its
// writer. One definition with the log's, so that a *Batch is the log's
// streamlog.Batch as it is.
type Flusher = streamlog.Flusher

// maxDeferred bounds what one batch holds back: past it, sinks wake their
// writers themselves.
const maxDeferred = 256

// Defer registers f to be flushed with the batch. It returns false if the
// batch is full: the caller then wakes its writer now.
func (b *Batch) Defer(f Flusher) bool {
	if len(b.fs) >= maxDeferred {
		return false
	}
	b.fs = append(b.fs, f)
	return true
}

// Flush wakes every registered writer, in registration order.
func (b *Batch) Flush() {
	for i, f := range b.fs {
		f.Flush()
		b.fs[i] = nil
	}
	b.fs = b.fs[:0]
}
