package mqtt

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// Kinds of outbound item.
const (
	itemAck      = iota + 1 // PUBACK, PUBREC, PUBREL, PUBCOMP
	itemPacket              // any other control packet
	itemDelivery            // a core delivery to turn into PUBLISH
	itemRetained            // a retained message for a new subscription
	itemPingresp            // PINGRESP (two bytes: no packets.Packet for each PINGREQ)
	itemSys                 // a $SYS value for an established subscription (sys.go)
	itemByte                // the zero byte that ends a PINGRESP the event loop half wrote (pingfast_linux.go)
)

// outItem is one entry of a connection's outbound list.
type outItem struct {
	kind       uint8
	typ        byte // itemAck: packet type
	code       byte // itemAck: reason code
	pid        uint16
	closeAfter bool
	pooled     bool              // pk is from controlPackets (sendPooled)
	pk         *packets.Packet   // itemPacket
	d          exchange.Delivery // itemDelivery; itemAck: a PUBREL's core message, acked after the flush
	ret        *retainedMsg      // itemRetained
	sub        *subscription     // itemRetained
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

func (c *conn) push(it outItem) {
	c.outMu.Lock()
	c.out = append(c.out, it)
	if len(c.out) >= maxQueuedOut {
		c.outFull.Store(true)
	}
	start := c.startWriterLocked()
	c.outMu.Unlock()
	if start {
		c.s.run.start(c, runWrite)
	}
}

// maxQueuedOut is how long the outbound list may grow while the writer
// cannot write (the client does not read what it is answered) before
// the reader stops reading the client (waitOutput): a client that sends
// PINGREQs or QoS 1 and 2 publishes without reading their answers would
// otherwise grow it without bound. The core's deliveries are bounded
// apart, by the Receive Maximum (exchange.Limit), and are not held back.
const maxQueuedOut = 16 << 10

// waitOutput holds the reader while the outbound list is at maxQueuedOut
// and a writer is at work on it: the client then meets TCP's
// back-pressure, as on AMQP (frontend.Output.WaitBelowHigh). A writer
// that takes the list, or stops, lets it go on.
func (c *conn) waitOutput() {
	c.outMu.Lock()
	for len(c.out) >= maxQueuedOut && c.writing && !c.wstopped && c.w != nil {
		w := c.w
		if w.drained == nil {
			w.drained = make(chan struct{})
		}
		ch := w.drained
		c.outMu.Unlock()
		select {
		case <-ch:
		case <-c.abort.C():
			return
		}
		c.outMu.Lock()
	}
	if len(c.out) < maxQueuedOut {
		c.outFull.Store(false)
	}
	c.outMu.Unlock()
}

// drainedLocked lets a reader waiting in waitOutput go on: the writer
// took the list, or stops (under outMu).
func (w *packetWriter) drainedLocked() {
	w.c.outFull.Store(false)
	if w.drained != nil {
		close(w.drained)
		w.drained = nil
	}
}

// startWriterLocked reports whether the caller, which has just added to
// the outbound list, must start a writer (c.s.run.start(c, runWrite)):
// none runs and the connection still writes. It runs under outMu.
func (c *conn) startWriterLocked() bool {
	if c.writing || c.wstopped {
		return false
	}
	c.writing = true
	return true
}

// stopWriter keeps any writer from starting again and waits for the one
// running, if any, to finish its round (it does not start another).
func (c *conn) stopWriter() {
	c.outMu.Lock()
	if !c.wstopped {
		c.wstopped = true
		if !c.writing {
			c.wdone.fire()
		}
	}
	c.outMu.Unlock()
	<-c.wdone.C()
}

// sendPacket queues a control packet; closeAfter closes the connection
// once it is written.
func (c *conn) sendPacket(pk *packets.Packet, closeAfter bool) {
	pk.ProtocolVersion = c.version
	if closeAfter {
		c.finalQueued.Store(true)
	}
	c.push(outItem{kind: itemPacket, pk: pk, closeAfter: closeAfter})
}

// controlPackets holds the packets of CONNACK, SUBACK and UNSUBACK from
// sendPooled to the writer, which encodes them: a packets.Packet is most
// of a kilobyte, and every connection sends a CONNACK and a SUBACK.
var controlPackets = sync.Pool{New: func() any { return new(packets.Packet) }}

// controlPacket returns a zero packet of type typ from controlPackets, for
// sendPooled.
func controlPacket(typ byte) *packets.Packet {
	pk := controlPackets.Get().(*packets.Packet)
	pk.FixedHeader.Type = typ
	return pk
}

// sendPooled is sendPacket for a packet from controlPacket: the writer
// puts it back once it is encoded, so the caller must not keep it.
func (c *conn) sendPooled(pk *packets.Packet) {
	pk.ProtocolVersion = c.version
	c.push(outItem{kind: itemPacket, pk: pk, pooled: true})
}

func (c *conn) sendAck(typ byte, pid uint16, code byte) {
	c.push(outItem{kind: itemAck, typ: typ, pid: pid, code: code})
}

// Deliver implements exchange.Sink. It runs under the queue's lock and
// only appends to the outbound list.
func (c *conn) Deliver(d exchange.Delivery) bool {
	c.outMu.Lock()
	c.out = append(c.out, outItem{kind: itemDelivery, d: d})
	start := c.startWriterLocked()
	c.outMu.Unlock()
	if start {
		c.s.run.start(c, runWrite)
	}
	return true
}

// SettlesWhenDone implements exchange.SettlingSink: a delivery is acked
// after the flush that wrote it (QoS 0, settleLater) or on the client's
// acknowledgement of a PUBLISH already written (QoS 1 and 2); what is
// queued but unwritten when the connection closes is rejected, after the
// writer stopped (conn.close). The writer copies every PUBLISH into its
// buffered writer.
func (c *conn) SettlesWhenDone() {}

// Cancelled implements exchange.Sink: a queue consumed from was deleted.
func (c *conn) Cancelled(k *exchange.Consumer) {
	go func() {
		c.consMu.Lock()
		if i := slices.Index(c.consumers, k); i >= 0 {
			c.dropConsumer(i)
		}
		c.consMu.Unlock()
	}()
}

// writeLoop is the connection's writer: it drains the outbound list into
// a pooled buffered writer, flushes when the list is empty, and returns
// when the list is still empty after the flush. It runs on a goroutine
// that exists only while there is output (push and Deliver start it), so
// that an idle connection keeps no writer stack. One writer runs at a
// time (conn.writing); the next one starts after it has cleared the flag
// under outMu, so their writes do not interleave and c.w passes from one
// to the next.
func (c *conn) writeLoop() {
	c.outMu.Lock()
	w := c.w
	if w == nil {
		w = writerStates.Get().(*packetWriter)
		w.c = c
		c.w = w
	}
	batch := c.spare
	c.spare = nil
	stop, yielded := false, false
	for !stop && !c.wstopped {
		if len(c.out) == 0 {
			// Before returning, let the goroutines that are ready run
			// once: a stream's next deliveries are often among what they
			// do, and this writer then goes on instead of another
			// starting (with a new stack, grown again).
			if yielded {
				break
			}
			yielded = true
			c.outMu.Unlock()
			runtime.Gosched()
			c.outMu.Lock()
			continue
		}
		yielded = false
		c.outMu.Unlock()
		bw := writerPool.Get().(*bufio.Writer)
		bw.Reset(c.nc)
		w.bw = bw
		closeAfter := false
		for !closeAfter {
			c.outMu.Lock()
			batch, c.out = c.out, batch[:0]
			w.drainedLocked()
			c.outMu.Unlock()
			if len(batch) == 0 {
				break
			}
			c.saveQoS2Before(batch)
			for i := range batch {
				w.write(&batch[i])
				closeAfter = closeAfter || batch[i].closeAfter
				batch[i] = outItem{}
			}
		}
		err := bw.Flush()
		if err == nil {
			err = w.err
		}
		bw.Reset(nil)
		writerPool.Put(bw)
		w.bw = nil
		w.settle()
		switch {
		case err != nil:
			c.nc.Close()
			c.wakeReader()
			stop = true
		case closeAfter:
			// The last packet (a refusing CONNACK, a DISCONNECT) is
			// out: close gently so that it reaches the client.
			c.lingering.Store(true)
			// The reader stops now (it may be waiting for a client
			// that has gone: a session takeover must not wait for it);
			// lingerClose drains after it.
			_ = c.nc.SetReadDeadline(time.Now())
			c.wakeReader()
			go lingerClose(c.nc, c.readDone.C())
			stop = true
		}
		c.outMu.Lock()
	}
	if stop {
		c.wstopped = true
	}
	c.writing = false
	w.drainedLocked()
	// Both lists keep their capacity for the next writer, as a writer
	// that waited kept them: a consumer that streams fills them again.
	// After a burst they are given back (an idle connection's are given
	// back when it parks, dropIdleOutput).
	// A list past maxKeptItems is kept while rounds still fill a quarter
	// of it (a consumer that streams), and given back once they do not
	// (the burst is over).
	c.spare = batch[:0]
	shrink := len(batch)*4 < cap(batch)
	if cap(batch) > maxKeptItems && shrink {
		c.spare = nil
	}
	if len(c.out) == 0 && cap(c.out) > maxKeptItems && shrink {
		c.out = nil
	}
	idle := false
	if c.parked.Load() && !c.writerStreamingLocked() {
		// The reader is idle too: the connection is, but for what the
		// core sends it, and keeps nothing for the next writer. A
		// subscriber that only receives stays parked, so while the core
		// streams to it (more than streamRounds rounds within
		// streamWindow) it keeps them, as a busy connection does, rather
		// than growing them again every round.
		c.dropIdleOutputLocked()
		idle = !c.wstopped
	}
	if c.wstopped {
		c.wdone.fire()
	}
	c.outMu.Unlock()
	if idle {
		// Nor do its queues keep the room the round's deliveries took:
		// a device that only receives (QoS 0 commands to a fleet) never
		// wakes its reader, and would keep it until it next does
		// (dropIdleState). Outside outMu: Deliver takes it under the
		// queue's lock.
		c.trimQueues()
	}
}

// writerStreamingLocked counts a writer round of a parked connection and
// reports whether the rounds come as a stream (under outMu).
func (c *conn) writerStreamingLocked() bool {
	now := time.Now().UnixNano()
	if now-c.wWindow >= int64(c.s.streamWindow) {
		// A stream in the last window is one still at the first round
		// of this one.
		if c.wRounds > streamRounds {
			c.wRounds = streamRounds
		} else {
			c.wRounds = 0
		}
		c.wWindow = now
	}
	if c.wRounds < 255 {
		c.wRounds++
	}
	return c.wRounds > streamRounds
}

// streamRounds is the number of writer rounds within streamWindow past
// which a parked connection's writer keeps its lists and state.
const streamRounds = 16

// maxKeptItems bounds the outbound lists a writer keeps after a burst.
const maxKeptItems = 64

// dropIdleOutput gives back what the writer keeps between rounds (lists,
// encoding scratch, settle runs) while none runs: the connection is idle
// (park.go), and the next writer grows them again.
func (c *conn) dropIdleOutput() {
	c.outMu.Lock()
	if !c.writing {
		c.dropIdleOutputLocked()
	}
	c.outMu.Unlock()
}

// dropIdleOutputLocked is dropIdleOutput under outMu, with no writer
// running or by the one returning.
func (c *conn) dropIdleOutputLocked() {
	if len(c.out) == 0 {
		c.out = nil
	}
	c.spare = nil
	if w := c.w; w != nil {
		c.w = nil
		w.reset()
		writerStates.Put(w)
	}
}

// writerStates holds the writer state of idle connections' writers, so
// that an idle connection keeps none and a busy one reuses another's
// buffers.
var writerStates = sync.Pool{New: func() any { return new(packetWriter) }}

// maxKeptScratch bounds the encoding buffers a pooled writer state keeps.
const maxKeptScratch = 4 << 10

// reset makes w ready for writerStates: it forgets its connection and
// caches, and buffers a burst grew.
func (w *packetWriter) reset() {
	scratch, hdr, settled := w.scratch, w.hdr, w.settled
	if scratch.Cap() > maxKeptScratch {
		scratch = bytes.Buffer{}
	}
	scratch.Reset()
	if cap(hdr) > maxKeptScratch {
		hdr = nil
	}
	for i := range settled {
		if cap(settled[i].seqs) > maxKeptSeqs/16 {
			settled[i].seqs = nil
		}
	}
	*w = packetWriter{scratch: scratch, hdr: hdr[:0], settled: settled[:0]}
}

// packetWriter encodes outbound items for one connection.
type packetWriter struct {
	c       *conn
	bw      *bufio.Writer
	scratch bytes.Buffer
	small   [8]byte
	err     error
	drained chan struct{} // a waiting reader's (waitOutput), under outMu
	settled []settleRun   // deliveries to ack after the flush
	hdr     []byte        // an MQTT 3 PUBLISH header (deliver.go)

	lastKey, lastTopic string // topicOf's cache
}

func (w *packetWriter) write(it *outItem) {
	c := w.c
	switch it.kind {
	case itemAck:
		b := wire.AppendAck(w.small[:0], it.typ, it.pid, it.code, c.version == 5)
		w.out(b)
		if it.d.Queue != nil {
			w.settleLater(it.d)
		}
	case itemPacket:
		w.scratch.Reset()
		err := wire.Encode(&w.scratch, it.pk)
		if it.pooled {
			*it.pk = packets.Packet{}
			controlPackets.Put(it.pk)
		}
		if err != nil {
			c.s.log.Warn("encode", "client_id", c.clientID, "err", err)
			return
		}
		w.out(w.scratch.Bytes())
	case itemDelivery:
		w.delivery(it.d)
	case itemRetained:
		w.retained(it.ret, it.sub, true)
	case itemSys:
		w.retained(it.ret, it.sub, false)
	case itemPingresp:
		w.out(append(w.small[:0], packets.Pingresp<<4, 0))
	case itemByte:
		w.out(append(w.small[:0], 0))
	}
}

func (w *packetWriter) out(b []byte) {
	if w.err != nil {
		return
	}
	_, w.err = w.bw.Write(b)
	w.c.sentBytes.Add(uint64(len(b)))
}

// settleRun is the deliveries of one queue to ack after a flush.
type settleRun struct {
	q    *exchange.Queue
	seqs []uint64
}

// settleLater acknowledges d to its queue after the flush (QoS 0, or a
// message that goes to no subscription of the session). The runs and their
// slices are kept from flush to flush (a session has one queue, or a few),
// so that settling allocates nothing in steady state.
func (w *packetWriter) settleLater(d exchange.Delivery) {
	for i := range w.settled {
		if r := &w.settled[i]; r.q == d.Queue {
			r.seqs = append(r.seqs, d.Seq)
			return
		}
	}
	if n := len(w.settled); n < cap(w.settled) {
		w.settled = w.settled[:n+1]
		r := &w.settled[n]
		r.q, r.seqs = d.Queue, append(r.seqs[:0], d.Seq)
		return
	}
	w.settled = append(w.settled, settleRun{q: d.Queue, seqs: []uint64{d.Seq}})
}

// maxKeptSeqs bounds the slice a run keeps after a burst.
const maxKeptSeqs = 16 << 10

// settle acks what settleLater collected (AckMany does not keep the
// slice), then forgets the queues but keeps the slices.
func (w *packetWriter) settle() {
	for i := range w.settled {
		r := &w.settled[i]
		r.q.AckMany(r.seqs)
		r.q, r.seqs = nil, r.seqs[:0]
		if cap(r.seqs) > maxKeptSeqs {
			r.seqs = nil
		}
	}
	w.settled = w.settled[:0]
}

// allocPID assigns a packet id to an outbound QoS >= 1 PUBLISH.
func (c *conn) allocPID(f inflight) (uint16, bool) {
	c.infMu.Lock()
	defer c.infMu.Unlock()
	return c.inflight.alloc(f)
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
