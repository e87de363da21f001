package mqtt

import (
	"encoding/binary"
	"net"
	"syscall"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/exchange"
)

// The keep-alive of a parked connection, answered by the event loop.
// A device that only pings (most of a fleet, most of the time) sends a
// PINGREQ every keep-alive period; waking a reader goroutine for each
// (a goroutine, a pooled reader and read buffer, a writer goroutine for
// the PINGRESP, the reader's next read that finds the socket empty, and a
// park) cost more than the two bytes each way. So when a parked
// connection's socket becomes readable, the loop first reads it itself,
// without waiting, into a buffer of its own (pingReadSize bytes, shared
// by all the loop's connections), and if that is one or more whole PINGREQs and
// nothing else it:
//   - counts them as the reader would (recvBytes), writes one PINGRESP
//     for each in the writer's place (answerPings: without waiting; if a
//     writer is running they go in the output's buffer instead, and what
//     the socket does not take at once goes first in it, for a writer
//     started for it, so nothing is lost), counted in sentBytes as the
//     writer would;
//   - refreshes the keep-alive as the reader does before it parks (the
//     socket's read deadline and the parked connection's timer): a
//     connection that only pings is never timed out, and one that sends
//     nothing still is;
//   - and leaves the connection parked: no goroutine, no reader taken
//     from the pool.
//
// A device's PUBACK (of a QoS 1 command: unicast to a fleet) is the same
// round trip the other way, so the loop settles short PUBACKs too (a
// packet id and nothing else: every MQTT 3 PUBACK, and MQTT 5's for
// success), alone or among PINGREQs, as handlePuback does (loopAcks):
// the inflight entry goes and the delivery is acknowledged to its queue,
// which gives the consumer's credit back and may deliver the next. Not
// when the queue is durable (a persistent session's: settling may wait
// for the store or a quorum, which the loop must not), when they fill
// the loop's read, or when the connection wakes as a stream (more than
// streamWakes times within streamWindow: a subscriber QoS 1 messages
// flow to), which a reader reads in bulk and stays for.
//
// Anything else (a partial packet, another packet type, bytes after the
// PINGREQs, the end of the stream or a read error) is handed to a reader
// as today's wake does, with the bytes already read buffered at the head
// of its connReader (handOver) and the error, if any, after them: the
// reader consumes them first, then reads the socket on, so nothing is
// lost or reordered. A hang-up or error event wakes a reader without a
// read in the loop. TLS and WebSocket connections never park (their
// reader goroutine stays, readbuf.go), so they keep the reader's path.
//
// While the loop reads, it is the connection's reader: it took it from
// parked as the reader started by a wake would (park.go's rule that the
// goroutine that clears parked is the one reader), and gives it back by
// parking it again (repark) or starting a reader (handOver).

// pingreqPacket is a PINGREQ.
var pingreqPacket = [2]byte{packets.Pingreq << 4, 0}

// pingReadSize is how much the loop reads from a socket that woke: 32
// PINGREQs. A larger packet's first bytes go to the reader.
const pingReadSize = 64

// serve handles an event of parked connection c's descriptor.
func (l *pollLoop) serve(c *conn, ev uint32) {
	if !c.parked.CompareAndSwap(true, false) {
		return // another reader has it (wakeReader, the keep-alive's end)
	}
	tc, ok := c.nc.(*net.TCPConn)
	if !ok || ev&(syscall.EPOLLERR|syscall.EPOLLHUP|syscall.EPOLLRDHUP) != 0 ||
		c.noPark.Load() || !c.connected.Load() {
		c.s.run.start(c, runRead)
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		c.s.run.start(c, runRead)
		return
	}
	l.n, l.errno = 0, nil
	if err := rc.Read(l.readFn); err != nil {
		c.s.run.start(c, runRead) // a deadline that ran out, or closed: the reader sees it
		return
	}
	switch {
	case l.errno == syscall.EAGAIN:
		// Nothing after all (the loop is the only reader, so this is
		// rare): a reader looks, as the wake always did.
		c.s.run.start(c, runRead)
		return
	case l.errno != nil:
		c.handOver(nil, l.errno, false, false)
		return
	case l.n == 0:
		c.handOver(nil, nil, true, false)
		return
	}
	b := l.rbuf[:l.n]
	pings, acks, ok := loopPackets(b)
	// PUBACKs that fill the read, or come often (a subscriber a stream
	// of QoS 1 messages flows to), go to a reader, which reads them in
	// bulk and stays for more rather than an event each few.
	if !ok || acks > 0 && (l.n == len(l.rbuf) || c.wokenAsStream() || !c.loopAcks(l, b, pings, acks)) {
		c.handOver(b, nil, false, l.n < len(l.rbuf))
		return
	}
	k := uint64(pings)
	if acks == 0 {
		// Counted before the PINGRESPs leave: whoever sees one sees it
		// counted (loopAcks counted what it settled).
		c.countLoopRead(len(b), pings, 0)
	}
	if k == 0 {
		c.repark(l, rc)
		return
	}
	if !c.answerPings(l, rc, int(k)) {
		// The connection is closing, or its output is over
		// frontend.High: a reader takes them (it sees the
		// close, or waits for the writer) and counts what it reads.
		// (The PUBACKs are settled: only the PINGREQs go.)
		c.recvBytes.Add(-(2 * k))
		c.s.loopPings.Add(-k)
		for i := range b[:2*k] {
			b[i] = pingreqPacket[i%2]
		}
		c.handOver(b[:2*k], nil, false, l.n < len(l.rbuf))
		return
	}
	c.repark(l, rc)
}

// loopPackets reports whether b is one or more whole packets the loop
// answers itself, PINGREQs and short PUBACKs (a packet id and nothing
// else: MQTT 3's, and MQTT 5's for success), and how many of each.
func loopPackets(b []byte) (pings, acks int, ok bool) {
	for len(b) > 0 {
		switch {
		case len(b) >= 2 && b[0] == packets.Pingreq<<4 && b[1] == 0:
			pings++
			b = b[2:]
		case len(b) >= 4 && b[0] == packets.Puback<<4 && b[1] == 2 && (b[2] != 0 || b[3] != 0):
			acks++
			b = b[4:]
		default:
			return 0, 0, false
		}
	}
	return pings, acks, pings+acks > 0
}

// loopAcks settles the deliveries b's PUBACKs acknowledge, as
// handlePuback does, and reports whether it did: it does not (and changes
// nothing) when one of them is of a durable queue, whose settling may
// wait for the store or a quorum, which the loop must not; a reader then
// takes them. A PUBACK of no packet in flight, or of a QoS 2 one, is
// ignored, as the reader does.
func (c *conn) loopAcks(l *pollLoop, b []byte, pings, acks int) bool {
	c.infMu.Lock()
	for i := 0; i < len(b); {
		if b[i] != packets.Puback<<4 {
			i += 2
			continue
		}
		if f, ok := c.inflight.get(binary.BigEndian.Uint16(b[i+2:])); ok && !f.released && f.q != nil && f.q.Durable() {
			c.infMu.Unlock()
			return false
		}
		i += 4
	}
	l.acks = l.acks[:0]
	for i := 0; i < len(b); {
		if b[i] != packets.Puback<<4 {
			i += 2
			continue
		}
		pid := binary.BigEndian.Uint16(b[i+2:])
		if f, ok := c.inflight.get(pid); ok && !f.released {
			c.inflight.del(pid)
			if f.q != nil {
				l.acks = append(l.acks, loopAck{f.q, f.seq})
			}
		}
		i += 4
	}
	c.infMu.Unlock()
	// Counted before anything is settled or answered: whoever sees the
	// effect sees it counted.
	c.countLoopRead(len(b), pings, acks)
	// One AckMany a run of one queue's (a device's session has one).
	for i := 0; i < len(l.acks); {
		q := l.acks[i].q
		l.seqs = l.seqs[:0]
		for ; i < len(l.acks) && l.acks[i].q == q; i++ {
			l.seqs = append(l.seqs, l.acks[i].seq)
		}
		q.AckMany(l.seqs)
	}
	clear(l.acks)
	return true
}

// countLoopRead counts what the loop read and answers itself: n bytes,
// pings PINGREQs and acks PUBACKs.
func (c *conn) countLoopRead(n, pings, acks int) {
	c.recvBytes.Add(uint64(n))
	c.s.loopPings.Add(uint64(pings))
	c.s.loopAcks.Add(uint64(acks))
}

// loopAck is a delivery the loop settles (loopAcks).
type loopAck struct {
	q   *exchange.Queue
	seq uint64
}

// read is the loop's RawConn read callback: what the socket has, without
// waiting.
func (l *pollLoop) read(fd uintptr) bool {
	for {
		n, err := syscall.Read(int(fd), l.rbuf[:])
		if err == syscall.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		l.n, l.errno = n, err
		return true
	}
}

// write is the loop's RawConn write callback: wbuf[:wlen], as much as the
// socket takes without waiting.
func (l *pollLoop) write(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), l.wbuf[:l.wlen])
		if err == syscall.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		l.n, l.errno = n, err
		return true
	}
}

// direct writes p, which is wbuf[:len(p)], to l.rc: as much as the
// socket takes without waiting (Output.WriteAround's write).
func (l *pollLoop) direct(p []byte) (int, error) {
	l.wlen, l.n, l.errno = len(p), 0, nil
	if err := l.rc.Write(l.writeFn); err != nil {
		return 0, err // a write deadline, or closed: the writer sees it
	}
	return l.n, l.errno
}

// answerPings writes k PINGRESPs in the writer's place
// (frontend.Output.WriteAround): without waiting, outside ob.Mu, when no
// writer runs and nothing is queued; what the socket does not take (half
// a PINGRESP, maybe) goes first in the output's buffer, for a writer
// started for it, so nothing is lost or reordered. A running writer gets
// them in its buffer instead. An idle connection's output is idle again
// after it. False if the connection writes no more (it is closing), or
// its output is over frontend.High.
func (c *conn) answerPings(l *pollLoop, rc syscall.RawConn, k int) bool {
	c.ob.Mu.Lock()
	wasIdle := c.w == nil
	c.outLocked()
	l.rc = rc
	n, ok := c.ob.WriteAround(l.wbuf[:2*k], l.directFn)
	l.rc = nil
	c.sentBytes.Add(uint64(n))
	if wasIdle {
		c.releaseOutputLocked()
	}
	c.ob.Mu.Unlock()
	return ok
}

// repark parks c again after the loop answered its PINGREQs (as the
// reader it took over): its keep-alive starts again from now, as the
// reader sets it before it parks (packetLoop's read deadline, park's
// timer).
func (c *conn) repark(l *pollLoop, rc syscall.RawConn) {
	if c.keepalive() > 0 {
		now := time.Now()
		_ = c.nc.SetReadDeadline(now.Add(c.keepalive() * 3 / 2))
		c.armKeepAlive(now)
	}
	c.parked.Store(true)
	// As in park: wakeReader sets noPark before it looks at parked.
	if c.noPark.Load() && c.parked.CompareAndSwap(true, false) {
		c.s.run.start(c, runRead)
		return
	}
	if err := l.p.arm(c, rc); err != nil && c.parked.CompareAndSwap(true, false) {
		c.s.run.start(c, runRead) // closed meanwhile: the reader sees it
	}
}

// handOver starts a reader for c with what the loop read (b, then the
// read's error or the end of the stream) buffered ahead of the socket.
// drained: the loop's read took all the socket had (it returned less
// than it asked for), so the reader that has consumed b may park without
// reading the socket again to find it empty (connReader.drained).
func (c *conn) handOver(b []byte, errno error, eof, drained bool) {
	r := newConnReader(c.nc)
	r.handOver(b, errno, eof)
	r.drained = drained && len(b) > 0 && errno == nil && !eof
	c.br = r
	c.s.parkedReaders.Add(1)
	if c.keepalive() > 0 {
		// As the woken reader's packetLoop does before its first read.
		_ = c.nc.SetReadDeadline(time.Now().Add(c.keepalive() * 3 / 2))
	}
	c.s.run.start(c, runRead)
}
