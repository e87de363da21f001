package mqtt

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
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
)

// outItem is one entry of a connection's outbound list: what the writer
// encodes, on its own goroutine, when it takes the list.
type outItem struct {
	kind       uint8
	typ        byte // itemAck: packet type
	code       byte // itemAck: reason code
	pid        uint16
	closeAfter bool
	pooled     bool              // pk is from controlPackets (sendPooled)
	pk         *packets.Packet   // itemPacket
	d          exchange.Delivery // itemDelivery; itemAck: a PUBREL's core message, acked after the write
	ret        *retainedMsg      // itemRetained
	sub        *subscription     // itemRetained
}

// The connection's output is a frontend.Output with writers on demand
// (c.ob): the outbound list (packetWriter.out) is the work its writer
// encodes (conn.WriteOutput), and the list's size counts against the
// output's watermarks (Output.Queued): an item counts itemCost bytes, a
// delivery its body and topic too. A delivery that leaves the output
// over frontend.High pauses its consumer (Deliver returns false; the
// queue keeps the messages) until the writer has it under frontend.Low;
// a reader that meets it stops reading the client (waitOutput,
// Output.WaitBelowHigh), so that a client that sends PINGREQs or QoS 1
// and 2 publishes without reading what it is answered cannot grow it
// without bound. An item counts the memory it takes on the list.
const itemCost = int(unsafe.Sizeof(outItem{}))

// deliveryCost is what a delivery counts against the watermarks.
func deliveryCost(d *exchange.Delivery) int {
	if d.Msg == nil {
		return itemCost
	}
	return itemCost + len(d.Msg.Body) + len(d.Msg.RoutingKey)
}

// outLocked returns the connection's writer state, attaching one (from
// writerStates) to its output if it is idle (ob.Mu held).
func (c *conn) outLocked() *packetWriter {
	if c.w == nil {
		w := writerStates.Get().(*packetWriter)
		w.c = c
		c.w = w
		c.ob.Attach(&w.st, c)
	}
	return c.w
}

// queueLocked adds it (counting cost) to the outbound list and reports
// whether the caller must start a writer once ob.Mu is released
// (c.s.run.start(c, runWrite)): none runs and the connection still
// writes. ob.Mu held.
func (c *conn) queueLocked(it outItem, cost int) bool {
	w := c.outLocked()
	w.out = append(w.out, it)
	c.ob.Queued += cost
	if c.ob.Level() >= frontend.High {
		c.outFull.Store(true)
	}
	return c.ob.StartLocked()
}

func (c *conn) push(it outItem) {
	c.ob.Mu.Lock()
	start := c.queueLocked(it, itemCost)
	c.ob.Mu.Unlock()
	if start {
		c.s.run.start(c, runWrite)
	}
}

// waitOutput holds the reader while the output is over frontend.High
// (outFull): the client then meets TCP's back-pressure, as on AMQP. The
// writer's writes, or its end, let it go on.
func (c *conn) waitOutput() {
	c.ob.WaitBelowHigh()
	c.ob.Mu.Lock()
	if c.ob.OutputState == nil || c.ob.Level() < frontend.High || c.ob.Halted() {
		c.outFull.Store(false)
	}
	c.ob.Mu.Unlock()
}

// stopWriter keeps any writer from starting again and waits for the one
// running, if any, to finish its write (it does not start another), or
// for the event loop's write in its place.
func (c *conn) stopWriter() {
	c.ob.Mu.Lock()
	c.outLocked()
	c.ob.Halt()
	c.ob.Mu.Unlock()
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
// only appends to the outbound list (the writer encodes it) and wakes
// or starts the writer; over frontend.High it pauses the consumer.
func (c *conn) Deliver(d exchange.Delivery) bool {
	c.ob.Mu.Lock()
	start := c.queueLocked(outItem{kind: itemDelivery, d: d}, deliveryCost(&d))
	paused := c.ob.PauseLocked(d.Consumer)
	c.ob.Mu.Unlock()
	if start {
		c.s.run.start(c, runWrite)
	}
	return !paused
}

// SettlesWhenDone implements exchange.SettlingSink: a delivery is acked
// after the write that wrote it (QoS 0, settleLater) or on the client's
// acknowledgement of a PUBLISH already written (QoS 1 and 2); what is
// queued but unwritten when the connection closes is rejected, after the
// writer stopped (conn.close). The writer copies every PUBLISH into its
// buffer.
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

// StartWriter implements frontend.OnDemand: a writer on a runner.
func (c *conn) StartWriter() { c.s.run.start(c, runWrite) }

// PendingOutput implements frontend.OnDemand (ob.Mu held).
func (c *conn) PendingOutput() bool { return c.w != nil && len(c.w.out) > 0 }

// TakeOutput implements frontend.OnDemand: the writer takes the whole
// outbound list (ob.Mu held).
func (c *conn) TakeOutput() {
	w := c.w
	w.batch, w.out = w.out, w.batch[:0]
	w.took = max(w.took, len(w.batch))
	c.ob.Queued = 0
}

// errFinal ends the output after a packet that closes the connection.
var errFinal = errors.New("mqtt: final packet written")

// WriteOutput implements frontend.OnDemand: on the writer's goroutine,
// outside ob.Mu, it encodes the items TakeOutput took after buf's bytes
// (the event loop's PINGRESPs the socket did not take), writes the whole
// in one write, then acks what settles on being written. A write that
// fails closes the connection; a final packet written (a refusing
// CONNACK, a DISCONNECT) lets it linger closed (errFinal).
func (c *conn) WriteOutput(buf []byte) ([]byte, error) {
	w := c.w
	c.saveQoS2Before(w.batch)
	w.buf = buf
	closeAfter := false
	var err error
	for i := range w.batch {
		w.write(&w.batch[i])
		closeAfter = closeAfter || w.batch[i].closeAfter
		w.batch[i] = outItem{}
		if len(w.buf) >= writeChunk && err == nil {
			// A long batch goes out as it is encoded: the client
			// reads the first deliveries while the rest are, and the
			// buffer stays small.
			err = w.flush()
		}
	}
	w.batch = w.batch[:0]
	if err == nil {
		err = w.flush()
	}
	// The length returned is the longest write's: the output gives back
	// a buffer a burst grew past it (frontend.Output.Drain).
	buf, w.buf = w.buf[:w.flushed], nil
	w.flushed = 0
	w.settle()
	switch {
	case err != nil:
		c.nc.Close()
		c.wakeReader()
	case closeAfter:
		// The last packet is out: close gently so that it reaches the
		// client.
		c.lingering.Store(true)
		// The reader stops now (it may be waiting for a client that
		// has gone: a session takeover must not wait for it);
		// lingerClose drains after it.
		_ = c.nc.SetReadDeadline(time.Now())
		c.wakeReader()
		go lingerClose(c.nc, c.readDone.C())
		err = errFinal
	}
	return buf, err
}

// writeChunk is how much encoded output the writer holds before it
// writes it, within a batch.
const writeChunk = 64 << 10

// flush writes what w.buf holds (counted in sentBytes as it goes) and
// empties it; an encoding error is reported instead.
func (w *packetWriter) flush() error {
	if err := w.err; err != nil {
		w.err = nil
		return err
	}
	if len(w.buf) == 0 {
		return nil
	}
	w.c.sentBytes.Add(uint64(len(w.buf)))
	w.flushed = max(w.flushed, len(w.buf))
	_, err := w.c.nc.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// Stopped implements frontend.OnDemand: the output is halted and no write
// is under way (stopWriter waits for it).
func (c *conn) Stopped() { c.wdone.fire() }

// writeLoop is the connection's writer: it writes what is queued until
// nothing is (frontend.Output.Drain), on a goroutine that exists only
// while there is output (a runner, started by whoever queued it), so that
// an idle connection keeps no writer stack. After a burst it gives back
// what the burst grew, and a parked connection's writer gives back its
// whole state.
func (c *conn) writeLoop() {
	_ = c.ob.Drain() // a failed write closed the connection (WriteOutput)
	c.ob.Mu.Lock()
	w, idle, list := c.w, false, false
	if w != nil && !c.ob.Busy() && !c.ob.Halted() {
		// A list past maxKeptItems is kept while rounds still fill a
		// quarter of it (a consumer that streams), and given back once
		// they do not (the burst is over).
		if cap(w.batch) > maxKeptItems && w.took*4 < cap(w.batch) {
			w.batch = nil
		}
		if len(w.out) == 0 && cap(w.out) > maxKeptItems && w.took*4 < cap(w.out) {
			w.out = nil
		}
		w.took = 0
		if c.parked.Load() || c.neverParks() {
			// The reader is idle too (or is a TLS or WebSocket one,
			// which never parks and keeps its goroutine: its output
			// goes as a parked one's): the connection is, but for what
			// the core sends it, and keeps nothing for the next
			// writer. A subscriber that only receives stays parked, so
			// while the core streams to it (more than streamRounds
			// rounds within streamWindow) it keeps its state, as a busy
			// connection does, rather than growing it again every round,
			// until the stream ends (keptOutputs).
			if !c.writerStreamingLocked() {
				idle = c.releaseOutputLocked()
			} else if !c.keptListed {
				c.keptListed, list = true, true
			}
		}
	}
	c.ob.Mu.Unlock()
	if list {
		c.s.kept.add(c)
	}
	if idle {
		// Nor do its queues keep the room the round's deliveries took:
		// a device that only receives (QoS 0 commands to a fleet) never
		// wakes its reader, and would keep it until it next does
		// (dropIdleState). Outside ob.Mu: Deliver takes it under the
		// queue's lock.
		c.trimQueues()
	}
}

// neverParks reports whether the connection's reader never parks: a TLS
// or WebSocket connection (readbuf.go).
func (c *conn) neverParks() bool {
	_, tcp := c.nc.(*net.TCPConn)
	return !tcp
}

// keptOutputs lists the parked connections whose writer kept its state
// because the core streams to them (writeLoop): a sweep gives it back
// once their stream has ended, so that a connection idle after a burst
// holds no output state however its burst came. The sweep runs every
// streamWindow while the list is not empty (a timer, no goroutine of its
// own).
type keptOutputs struct {
	mu    sync.Mutex
	cs    []*conn
	timer *time.Timer
}

// add lists c (listed under its ob.Mu: keptListed) and arms the sweep.
func (k *keptOutputs) add(c *conn) {
	k.mu.Lock()
	k.cs = append(k.cs, c)
	if k.timer == nil {
		k.timer = time.AfterFunc(c.s.streamWindow, func() { k.sweep(c.s) })
	}
	k.mu.Unlock()
}

// sweep gives back the output state of the listed connections that are
// parked and have had no writer round for a streamWindow, and keeps the
// others listed.
func (k *keptOutputs) sweep(s *Server) {
	k.mu.Lock()
	cs := k.cs
	k.cs, k.timer = nil, nil
	k.mu.Unlock()
	now := time.Now().UnixNano()
	var again []*conn
	for i, c := range cs {
		cs[i] = nil
		c.ob.Mu.Lock()
		released := false
		if (c.parked.Load() || c.neverParks()) && now-c.wWindow >= int64(s.streamWindow) {
			released = c.releaseOutputLocked()
		}
		keep := !released && c.w != nil && !c.ob.Halted()
		c.keptListed = keep
		c.ob.Mu.Unlock()
		switch {
		case released:
			c.trimQueues() // as writeLoop's idle end does
		case keep:
			again = append(again, c)
		}
	}
	for _, c := range again {
		k.add(c)
	}
}

// writerStreamingLocked counts a writer round of a parked connection and
// reports whether the rounds come as a stream (under ob.Mu).
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

// dropIdleOutput gives back what the output keeps between writes (its
// buffers, lists, encoding scratch, settle runs) while no writer runs and
// nothing is queued: the connection is idle (park.go), and the next
// writer takes a state again.
func (c *conn) dropIdleOutput() {
	c.ob.Mu.Lock()
	c.releaseOutputLocked()
	c.ob.Mu.Unlock()
}

// releaseOutputLocked detaches the writer state from the connection's
// output and pools it, if the output is idle (ob.Mu held), and reports
// whether it did.
func (c *conn) releaseOutputLocked() bool {
	w := c.w
	if w == nil || !c.ob.Release() {
		return false
	}
	c.w = nil
	w.reset()
	writerStates.Put(w)
	return true
}

// writerStates holds the writer state of idle connections' outputs, so
// that an idle connection keeps none and a busy one reuses another's
// buffers.
var writerStates = sync.Pool{New: func() any { return new(packetWriter) }}

// maxKeptScratch bounds the encoding buffers a pooled writer state keeps.
const maxKeptScratch = 4 << 10

// reset makes w ready for writerStates (its output state released): it
// forgets its connection and caches, and buffers a burst grew.
func (w *packetWriter) reset() {
	if w.scratch.Cap() > maxKeptScratch {
		w.scratch = bytes.Buffer{}
	}
	w.scratch.Reset()
	if cap(w.hdr) > maxKeptScratch {
		w.hdr = nil
	}
	w.hdr = w.hdr[:0]
	for i := range w.settled {
		if cap(w.settled[i].seqs) > maxKeptSeqs/16 {
			w.settled[i].seqs = nil
		}
	}
	w.settled = w.settled[:0]
	if cap(w.out) > maxKeptItems {
		w.out = nil
	}
	if cap(w.batch) > maxKeptItems {
		w.batch = nil
	}
	w.out, w.batch = w.out[:0], w.batch[:0]
	w.c, w.buf, w.err, w.took, w.flushed = nil, nil, nil, 0, 0
	w.lastKey, w.lastTopic = "", ""
}

// packetWriter encodes outbound items for one connection.
type packetWriter struct {
	st      frontend.OutputState // the connection's output's, while attached
	c       *conn
	out     []outItem // the outbound list (ob.Mu)
	batch   []outItem // what the writer took of it (TakeOutput)
	took    int       // the longest batch since the writer started
	buf     []byte    // what the writer encodes into (WriteOutput)
	flushed int       // the longest write of buf in this round
	scratch bytes.Buffer
	small   [8]byte
	err     error
	settled []settleRun // deliveries to ack after the write
	hdr     []byte      // an MQTT 3 PUBLISH header (deliver.go)

	lastKey, lastTopic string // topicOf's cache
}

func (w *packetWriter) write(it *outItem) {
	c := w.c
	switch it.kind {
	case itemAck:
		b := wire.AppendAck(w.small[:0], it.typ, it.pid, it.code, c.version == 5)
		w.emit(b)
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
		w.emit(w.scratch.Bytes())
	case itemDelivery:
		w.delivery(it.d)
	case itemRetained:
		w.retained(it.ret, it.sub, true)
	case itemSys:
		w.retained(it.ret, it.sub, false)
	case itemPingresp:
		w.emit(append(w.small[:0], packets.Pingresp<<4, 0))
	}
}

func (w *packetWriter) emit(b []byte) {
	w.buf = append(w.buf, b...)
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
