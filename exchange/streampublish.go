package exchange

import (
	"sync"
	"sync/atomic"
	"time"
)

// A run of publishes to one stream taken whole: the stream protocol's
// publish frame (100 to thousands of messages from one producer). Publish
// one by one costs each message a route lookup, a confirm wait from a
// pool, an encode buffer from a pool, a tag in the front end's pending
// table, a Confirmer call and two locks to answer it; a run costs each
// message its encoding and its place in the log, and the run one lookup,
// one lock of the log and one answer.

// PublishRun appends ms, in order, to the stream queue as Publish would
// one by one with PublishOpts{Queue: queue, Batch: b}, and calls done
// once: with nil when every message is durable (a named producer's
// resend, appended before, once what it waits for is: as Publish), or
// with the first error that lost one. The messages are encoded before
// PublishRun returns and not kept: the caller may reuse them and what
// their bodies point into.
//
// ok is false, with nothing done and done not called, when the run cannot
// be taken whole: queue is not a stream of this vhost, or its log is a
// follower's (a clustered stream's non-leader forwards each message to
// its leader); the caller publishes one by one then, which answers each
// message as Publish does. n is how many messages the stream appended or
// found duplicates of (a failed append ends the run; done reports it).
//
// amqp10, if not nil, holds each message's AMQP 1.0 encoding, which the
// stream stores as it is (streamamqp10.go), ms[i] giving only its
// producer, exchange and routing key; only while StreamAMQP10Enabled.
func (v *VHost) PublishRun(queue string, ms []*Message, amqp10 [][]byte, b *Batch, done func(error)) (n int, ok bool) {
	if len(ms) == 0 || (amqp10 != nil && (len(amqp10) != len(ms) || !v.StreamAMQP10Enabled())) {
		return 0, false
	}
	rv := v.routes()
	xr, _ := rv.exchange("")
	q := rv.queue(queue)
	rv.release()
	if q == nil || q.st == nil || xr.x == nil {
		return 0, false
	}
	st := q.st
	if st.closed.Load() || st.log.Following() {
		return 0, false
	}
	var now int64
	if b != nil {
		now = b.time()
	} else {
		now = nowNano()
	}
	// Encoded before the log's lock is taken: one buffer for the run,
	// each record's end kept.
	rb := runBufPool.Get().(*runBuf)
	defer rb.put()
	named := false
	for i, m := range ms {
		m.ts = now
		if amqp10 != nil {
			rb.data = appendAMQP10Record(rb.data, m, now, amqp10[i])
			rb.ends = append(rb.ends, len(rb.data))
			named = named || m.writer.Named()
			continue
		}
		if exp, ok := parseExpiration(m.Props.Expiration); ok {
			m.expiresAt = now + exp*int64(time.Millisecond)
		}
		rb.data = encodeMessage(m, now, rb.data)
		rb.ends = append(rb.ends, len(rb.data))
		named = named || m.writer.Named()
	}
	if named {
		st.log.PreloadWriters() // once after a start, with no lock held
	}
	w := &runWait{done: done}
	w.left.Store(int32(len(ms)) + 1) // this call's hold until the end
	one := w.one
	dups := 0
	st.log.Lock()
	segs := st.log.SegmentsLocked()
	start := 0
	var err error
	for i, m := range ms {
		data := rb.data[start:rb.ends[i]]
		start = rb.ends[i]
		var dup bool
		if dup, err = st.appendLocked(data, m.writer, one, now, b); err != nil {
			break
		}
		if dup {
			dups++
		}
		n++
	}
	rolled := st.log.SegmentsLocked() != segs
	st.log.Unlock()
	if dups > 0 {
		st.log.FireWaiters(nil)
	}
	if err != nil {
		q.vh.b.log.Error("stream append failed", "queue", q.name, "err", err)
		w.err.CompareAndSwap(nil, &err)
	}
	// The messages never appended will not call back: their holds go
	// with this call's.
	w.release(int32(len(ms)-n) + 1)
	q.counters.publish.Add(uint64(n - dups))
	v.counters.publish.Add(uint64(len(ms)))
	xr.x.counters.publishIn.Add(uint64(len(ms)))
	xr.x.counters.publishOut.Add(uint64(n))
	if n > 0 {
		st.appended(rolled, segs)
	}
	return n, true
}

// runWait answers a run once each of its messages called back.
type runWait struct {
	left atomic.Int32
	err  atomic.Pointer[error]
	done func(error)
}

// one is a message's done callback.
func (w *runWait) one(err error) {
	if err != nil {
		w.err.CompareAndSwap(nil, &err)
	}
	w.release(1)
}

func (w *runWait) release(k int32) {
	if w.left.Add(-k) != 0 {
		return
	}
	var err error
	if p := w.err.Load(); p != nil {
		err = *p
	}
	w.done(err)
}

// runBuf is a run's encoded records: data, and the end of each in it.
type runBuf struct {
	data []byte
	ends []int
}

var runBufPool = sync.Pool{New: func() any { return new(runBuf) }}

func (rb *runBuf) put() {
	if cap(rb.data) > 4<<20 {
		return // a run of big messages: not kept
	}
	rb.data, rb.ends = rb.data[:0], rb.ends[:0]
	runBufPool.Put(rb)
}
