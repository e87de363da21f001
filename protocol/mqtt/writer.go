package mqtt

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// Kinds of outbound item.
const (
	itemAck      = iota + 1 // PUBACK, PUBREC, PUBREL, PUBCOMP
	itemPacket              // any other control packet
	itemRetained            // a retained message for a new subscription
	itemPingresp            // PINGRESP (two bytes: no packets.Packet for each PINGREQ)
	itemSys                 // a $SYS value for an established subscription (sys.go)
)

// outItem is one packet to encode onto the connection's output.
type outItem struct {
	kind   uint8
	typ    byte // itemAck: packet type
	code   byte // itemAck: reason code
	pid    uint16
	pooled bool              // pk is from controlPackets (sendPooled)
	pk     *packets.Packet   // itemPacket
	d      exchange.Delivery // itemAck: a PUBREL's core message, acked after the write
	ret    *retainedMsg      // itemRetained
	sub    *subscription     // itemRetained
}

// The connection's output is a frontend.Output with writers on demand
// (c.ob): every packet is encoded into its buffer as it is queued (push,
// Deliver), under c.ob.Mu, by the connection's packetWriter (c.w); a
// writer goroutine runs only while there is output (writeLoop), a
// publisher's batch may write its deliveries itself at its end (Flush,
// DirectWrite), and an idle connection gives the output's state and the
// packetWriter back (dropIdleOutput). A delivery that leaves the buffer
// over frontend.High pauses its consumer (Deliver returns false) until the
// writer has it under frontend.Low.

// writeOut queues it (encoded now); closeAfter: nothing is queued after it,
// and the connection closes once it is written.
func (c *conn) writeOut(it outItem, closeAfter bool) {
	o := &c.ob
	o.Mu.Lock()
	o.Acquire(c)
	if o.Closed {
		o.Mu.Unlock()
		if it.kind == itemAck && it.d.Queue != nil {
			// A PUBREL's message: the client has it, and the session
			// resends the PUBREL when it resumes.
			it.d.Queue.AckMany([]uint64{it.d.Seq})
		}
		return
	}
	c.writerLocked().write(&it)
	if closeAfter {
		o.StopLocked()
	} else {
		o.Signal()
	}
	o.Mu.Unlock()
}

func (c *conn) push(it outItem) { c.writeOut(it, false) }

// writerLocked returns the connection's packetWriter, from writerStates
// if it has none (c.ob.Mu held).
func (c *conn) writerLocked() *packetWriter {
	w := c.w
	if w == nil {
		w = writerStates.Get().(*packetWriter)
		w.c = c
		c.w = w
	}
	return w
}

// stopWriter lets the writer write what is queued (on a transport already
// closed, at once) and waits until it has returned; none starts after it.
func (c *conn) stopWriter() {
	o := &c.ob
	o.Mu.Lock()
	o.Acquire(c)
	o.StopLocked()
	o.Mu.Unlock()
	<-c.wdone.C()
}

// sendPacket queues a control packet; closeAfter closes the connection
// once it is written.
func (c *conn) sendPacket(pk *packets.Packet, closeAfter bool) {
	pk.ProtocolVersion = c.version
	if closeAfter {
		c.finalQueued.Store(true)
	}
	c.writeOut(outItem{kind: itemPacket, pk: pk}, closeAfter)
}

// controlPackets holds the packets of CONNACK, SUBACK and UNSUBACK from
// sendPooled to the encoder: a packets.Packet is most of a kilobyte, and
// every connection sends a CONNACK and a SUBACK.
var controlPackets = sync.Pool{New: func() any { return new(packets.Packet) }}

// controlPacket returns a zero packet of type typ from controlPackets, for
// sendPooled.
func controlPacket(typ byte) *packets.Packet {
	pk := controlPackets.Get().(*packets.Packet)
	pk.FixedHeader.Type = typ
	return pk
}

// sendPooled is sendPacket for a packet from controlPacket: it is put back
// once it is encoded, so the caller must not keep it.
func (c *conn) sendPooled(pk *packets.Packet) {
	pk.ProtocolVersion = c.version
	c.push(outItem{kind: itemPacket, pk: pk, pooled: true})
}

func (c *conn) sendAck(typ byte, pid uint16, code byte) {
	c.push(outItem{kind: itemAck, typ: typ, pid: pid, code: code})
}

// Deliver implements exchange.Sink. It runs under the queue's lock: it
// encodes d onto the output and returns false, pausing the consumer, when
// the output is over frontend.High. Within a publisher's batch the write
// waits for the batch's end (frontend.Output.SignalIn).
func (c *conn) Deliver(d exchange.Delivery) bool {
	o := &c.ob
	o.Mu.Lock()
	o.Acquire(c)
	if o.Closed {
		o.Mu.Unlock()
		// Not written: back to its queue, off the queue's lock.
		go d.Queue.Reject([]uint64{d.Seq}, true)
		return true
	}
	c.writerLocked().delivery(d)
	o.SignalIn(d.Batch)
	more := !o.PauseLocked(d.Consumer)
	o.Mu.Unlock()
	return more
}

// SettlesWhenDone implements exchange.SettlingSink: a delivery is acked
// after the write that took it (QoS 0, settleLater) or on the client's
// acknowledgement of a PUBLISH (QoS 1 and 2); what is queued but unwritten
// when the connection closes is rejected, after the writer stopped
// (conn.close). A PUBLISH is copied into the output's buffer.
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

// StartWriter implements frontend.OnDemand: a writer goroutine for what
// was queued.
func (c *conn) StartWriter() { go c.runWriter() }

// PendingOutput implements frontend.OnDemand: settlements wait for a
// write (a delivery that wrote nothing: no matching subscription, expired).
func (c *conn) PendingOutput() bool {
	w := c.w
	return w != nil && (len(w.settled) > 0 || len(w.settling) > 0)
}

// PrepareOutput implements frontend.OnDemand: before a take, what was
// settled with the bytes queued so far goes with the write (c.wr), and so
// does the need to store the QoS 2 state before them (qos2.go).
func (c *conn) PrepareOutput() {
	w := c.w
	c.wr = w
	if w == nil {
		return
	}
	if len(w.settling) == 0 {
		// The runs and their slices trade places, kept for reuse.
		w.settling, w.settled = w.settled, w.settling
	} else {
		// A take before wrote nothing yet (WriteNow that left it to
		// the writer): these join its runs, in slices of their own.
		for i := range w.settled {
			r := &w.settled[i]
			w.settling = append(w.settling, settleRun{q: r.q, op: r.op, seqs: slices.Clone(r.seqs)})
			r.q, r.seqs = nil, r.seqs[:0]
		}
		w.settled = w.settled[:0]
	}
	w.saveNext = w.saveNext || w.qos2Acks
	w.qos2Acks = false
}

// DirectWrite implements frontend.OnDemand: a publisher's batch writes
// what it queued without waiting for the socket (a TLS or WebSocket
// connection leaves it to the writer).
func (c *conn) DirectWrite(p []byte) (int, error) {
	w := c.wr
	if w == nil {
		return 0, nil
	}
	w.beforeWrite()
	n, err := w.directWrite(p)
	w.afterWrite(err != nil)
	return n, err
}

// Idle implements frontend.OnDemand: the writer has nothing more. A
// parked connection (the reader is idle too) that is not being streamed
// to gives its output back; one that is keeps it for the next round, as
// a busy connection does, rather than growing it again every round.
func (c *conn) Idle() {
	if c.parked.Load() && !c.writerStreamingLocked() {
		c.dropIdleOutputLocked()
	}
}

// writeLoop is the connection's writer goroutine (StartWriter): it writes
// what is queued until nothing is (frontend.Output.Drain). The last one
// closes the connection after a write error, or lets it linger after a
// final packet (a refusing CONNACK, a DISCONNECT), and fires wdone.
func (c *conn) writeLoop() {
	err, last := c.ob.Drain(c.writeBuf)
	if !last {
		return
	}
	switch {
	case err != nil:
		c.nc.Close()
		c.wakeReader()
	case c.finalQueued.Load():
		// The last packet is out: close gently so that it reaches the
		// client.
		c.lingering.Store(true)
		// The reader stops now (it may be waiting for a client that has
		// gone: a session takeover must not wait for it); lingerClose
		// drains after it.
		_ = c.nc.SetReadDeadline(time.Now())
		c.wakeReader()
		go lingerClose(c.nc, c.readDone.C())
	}
	c.wdone.fire()
}

// writeBuf is the writer's write (Drain).
func (c *conn) writeBuf(buf []byte, _ []int) error {
	w := c.wr
	if w != nil {
		w.beforeWrite()
	}
	var err error
	if len(buf) > 0 {
		_, err = c.nc.Write(buf)
	}
	if w != nil {
		w.afterWrite(err != nil)
	}
	return err
}

// beforeWrite stores a persistent session's QoS 2 state before the write
// that takes its acknowledgements (qos2.go).
func (w *packetWriter) beforeWrite() {
	if w.saveNext {
		w.saveNext = false
		w.c.saveQoS2()
	}
}

// afterWrite settles what the write took (failed: the QoS 0 deliveries go
// back to their queues).
func (w *packetWriter) afterWrite(failed bool) {
	settleRuns(w.settling, failed) // which keeps the runs' slices
	w.settling = w.settling[:0]
}

// directWrite writes p to the socket without waiting.
func (w *packetWriter) directWrite(p []byte) (int, error) {
	if w.rc == nil {
		tc, ok := w.c.nc.(*net.TCPConn)
		if !ok {
			return 0, nil
		}
		rc, err := tc.SyscallConn()
		if err != nil {
			return 0, nil
		}
		w.rc = rc
		w.writeFn = w.writeFd
	}
	w.wp, w.wn, w.werr = p, 0, nil
	if err := w.rc.Write(w.writeFn); err != nil && w.werr == nil {
		w.werr = err
	}
	n, err := w.wn, w.werr
	w.wp = nil
	return n, err
}

// writeFd is directWrite's RawConn callback.
func (w *packetWriter) writeFd(fd uintptr) bool {
	for w.wn < len(w.wp) {
		m, e := syscall.Write(int(fd), w.wp[w.wn:])
		if m > 0 {
			w.wn += m
		}
		switch {
		case e == syscall.EINTR:
		case e == syscall.EAGAIN:
			return true // full: the rest is the writer's
		case e != nil:
			w.werr = e
			return true
		case m <= 0:
			return true
		}
	}
	return true
}

// writerStreamingLocked counts a writer round of a parked connection and
// reports whether the rounds come as a stream (under c.ob.Mu).
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
// which a parked connection's writer keeps its output.
const streamRounds = 16

// dropIdleOutput gives back the output's state (buffers) and the
// packetWriter (encoding scratch, settle runs) while nothing is queued or
// being written: the connection is idle (park.go), and the next packet
// takes them again.
func (c *conn) dropIdleOutput() {
	c.ob.Mu.Lock()
	c.dropIdleOutputLocked()
	c.ob.Mu.Unlock()
}

// dropIdleOutputLocked is dropIdleOutput under c.ob.Mu.
func (c *conn) dropIdleOutputLocked() {
	if !c.ob.Idle() && !c.ob.Release() {
		return
	}
	if w := c.w; w != nil {
		c.w, c.wr = nil, nil
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
	scratch, hdr, settled, settling := w.scratch, w.hdr, w.settled, w.settling
	if scratch.Cap() > maxKeptScratch {
		scratch = bytes.Buffer{}
	}
	scratch.Reset()
	if cap(hdr) > maxKeptScratch {
		hdr = nil
	}
	*w = packetWriter{scratch: scratch, hdr: hdr[:0], settled: keepRuns(settled), settling: keepRuns(settling)}
}

// keepRuns empties a pooled writer's settle runs, keeping small slices.
func keepRuns(runs []settleRun) []settleRun {
	runs = runs[:cap(runs)]
	for i := range runs {
		if cap(runs[i].seqs) > maxKeptSeqs/16 {
			runs[i].seqs = nil
		}
		runs[i].q, runs[i].seqs = nil, runs[i].seqs[:0]
	}
	return runs[:0]
}

// packetWriter encodes outbound items onto one connection's output
// (c.ob.Mu held), and keeps what goes with the bytes.
type packetWriter struct {
	c        *conn
	scratch  bytes.Buffer
	small    [8]byte
	err      error
	settled  []settleRun // deliveries to settle after the write of what is queued
	settling []settleRun // ... after the write under way (PrepareOutput)
	hdr      []byte      // an MQTT 3 PUBLISH header (deliver.go)
	// qos2Acks: a QoS 2 acknowledgement is queued; saveNext: the write
	// under way takes one (qos2.go).
	qos2Acks, saveNext bool

	// directWrite's socket and callback state.
	rc      syscall.RawConn
	writeFn func(fd uintptr) bool
	wp      []byte
	wn      int
	werr    error

	lastKey, lastTopic string // topicOf's cache
}

func (w *packetWriter) write(it *outItem) {
	c := w.c
	switch it.kind {
	case itemAck:
		b := wire.AppendAck(w.small[:0], it.typ, it.pid, it.code, c.version == 5)
		w.out(b)
		if it.typ != packets.Puback {
			w.qos2Acks = true
		}
		if it.d.Queue != nil {
			w.settleRun(it.d, settleRel)
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
	case itemRetained:
		w.retained(it.ret, it.sub, true)
	case itemSys:
		w.retained(it.ret, it.sub, false)
	case itemPingresp:
		w.out(append(w.small[:0], packets.Pingresp<<4, 0))
	}
}

// out appends b to the output.
func (w *packetWriter) out(b []byte) {
	if w.err != nil {
		return
	}
	w.c.ob.Buf = append(w.c.ob.Buf, b...)
	w.c.sentBytes.Add(uint64(len(b)))
}

// How a run is settled after the write that took its bytes.
const (
	settleAck    = iota // QoS 0, or nothing to send: acked (if never written: back to the queue)
	settleRel           // a PUBREL's message: acked, written or not (qos2.go)
	settleReject        // not sent (no packet id free): back to the queue
)

// settleRun is the deliveries of one queue to settle one way after a
// write.
type settleRun struct {
	q    *exchange.Queue
	op   uint8
	seqs []uint64
}

// settleLater acknowledges d to its queue after the write of what is
// queued now (QoS 0, or a message that goes to no subscription of the
// session): the core's lock is held (Deliver), and the message is the
// queue's until the client may have it.
func (w *packetWriter) settleLater(d exchange.Delivery) { w.settleRun(d, settleAck) }

// settleRun adds d to the run of its queue and op. The runs and their
// slices are kept from write to write (a session has one queue, or a
// few), so that settling allocates nothing in steady state.
func (w *packetWriter) settleRun(d exchange.Delivery, op uint8) {
	for i := range w.settled {
		if r := &w.settled[i]; r.q == d.Queue && r.op == op {
			r.seqs = append(r.seqs, d.Seq)
			return
		}
	}
	if n := len(w.settled); n < cap(w.settled) {
		w.settled = w.settled[:n+1]
		r := &w.settled[n]
		r.q, r.op, r.seqs = d.Queue, op, append(r.seqs[:0], d.Seq)
		return
	}
	w.settled = append(w.settled, settleRun{q: d.Queue, op: op, seqs: []uint64{d.Seq}})
}

// maxKeptSeqs bounds the slice a run keeps after a burst.
const maxKeptSeqs = 16 << 10

// settleRuns settles runs (AckMany and Reject do not keep the slices),
// then forgets the queues but keeps the slices; unsent: the bytes did not
// go out, and the QoS 0 deliveries go back to their queues.
func settleRuns(runs []settleRun, unsent bool) {
	for i := range runs {
		r := &runs[i]
		switch {
		case r.op == settleReject || r.op == settleAck && unsent:
			r.q.Reject(r.seqs, true)
		default:
			r.q.AckMany(r.seqs)
		}
		r.q, r.seqs = nil, r.seqs[:0]
		if cap(r.seqs) > maxKeptSeqs {
			r.seqs = nil
		}
	}
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
