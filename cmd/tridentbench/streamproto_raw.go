package main

// The raw client of the stream-protocol benchmark (streamproto.go): the
// stream protocol spoken with hand-encoded frames, so that the figures are
// the broker's, not a client library's. The client side of the protocol
// is encoded here (the broker's codec, protocol/stream/wire, decodes
// client frames and encodes server ones: the unit test checks each side
// against the other); only its constants are shared.
//
//	raw publish 16 B   one publisher: a publish frame of rawSPBatch (100) messages
//	                   (AMQP 1.0 data sections), encoded once, its publishing
//	                   ids rewritten in place before each write; writes
//	                   pipelined while at most --stream-protocol-window are
//	                   unconfirmed; a reader counts the confirmed ids (each
//	                   once, none refused) and their latency from the write
//	raw consume xK     K readers from first, each on its own connection: a
//	                   Deliver frame's chunk header gives its first offset
//	                   and record count, the messages are not decoded; the
//	                   chunk's first offset must be the count so far (each
//	                   message once, in order); one credit back per chunk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/protocol/stream/wire"
)

// rawSPBatch is the number of messages in one raw publish frame: the
// clients' default batch size (the Go client's BatchSize, stream-perf-test's
// --batch-size). Trident as of this writing confirms 256-message frames
// about 3x slower than 100-message ones (81k/s against 278k/s here): a
// broker matter, measured with this constant changed.
const rawSPBatch = 100

// rawSPCredit is a raw reader's initial credit (chunks in flight).
const rawSPCredit = 10

// Client frames: each appended whole (size included) to b.

func spBegin(b []byte, key, ver uint16) ([]byte, int) {
	at := len(b)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint16(b, key)
	return binary.BigEndian.AppendUint16(b, ver), at
}

func spEnd(b []byte, at int) []byte {
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

func spStr(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}

func spKVs(b []byte, kv ...string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(kv)/2))
	for _, s := range kv {
		b = spStr(b, s)
	}
	return b
}

func spPeerProperties(b []byte, corr uint32, kv ...string) []byte {
	b, at := spBegin(b, wire.KeyPeerProperties, 1)
	return spEnd(spKVs(binary.BigEndian.AppendUint32(b, corr), kv...), at)
}

func spSaslHandshake(b []byte, corr uint32) []byte {
	b, at := spBegin(b, wire.KeySaslHandshake, 1)
	return spEnd(binary.BigEndian.AppendUint32(b, corr), at)
}

func spSaslPlain(b []byte, corr uint32, user, pass string) []byte {
	b, at := spBegin(b, wire.KeySaslAuthenticate, 1)
	b = spStr(binary.BigEndian.AppendUint32(b, corr), "PLAIN")
	data := "\x00" + user + "\x00" + pass
	return spEnd(append(binary.BigEndian.AppendUint32(b, uint32(len(data))), data...), at)
}

// spTuneOK answers the server's Tune (with the response bit, as the Go
// client does).
func spTuneOK(b []byte, frameMax, heartbeat uint32) []byte {
	b, at := spBegin(b, wire.KeyTune|wire.ResponseBit, 1)
	return spEnd(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(b, frameMax), heartbeat), at)
}

func spOpen(b []byte, corr uint32, vhost string) []byte {
	b, at := spBegin(b, wire.KeyOpen, 1)
	return spEnd(spStr(binary.BigEndian.AppendUint32(b, corr), vhost), at)
}

func spCreate(b []byte, corr uint32, stream string) []byte {
	b, at := spBegin(b, wire.KeyCreate, 1)
	return spEnd(spKVs(spStr(binary.BigEndian.AppendUint32(b, corr), stream)), at)
}

func spDelete(b []byte, corr uint32, stream string) []byte {
	b, at := spBegin(b, wire.KeyDelete, 1)
	return spEnd(spStr(binary.BigEndian.AppendUint32(b, corr), stream), at)
}

func spDeclarePublisher(b []byte, corr uint32, id uint8, stream string) []byte {
	b, at := spBegin(b, wire.KeyDeclarePublisher, 1)
	b = append(binary.BigEndian.AppendUint32(b, corr), id)
	return spEnd(spStr(spStr(b, ""), stream), at)
}

func spSubscribe(b []byte, corr uint32, id uint8, stream string, offsetType uint16, credit uint16) []byte {
	b, at := spBegin(b, wire.KeySubscribe, 1)
	b = spStr(append(binary.BigEndian.AppendUint32(b, corr), id), stream)
	b = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, offsetType), credit)
	return spEnd(spKVs(b), at)
}

func spCredit(b []byte, id uint8, credit uint16) []byte {
	b, at := spBegin(b, wire.KeyCredit, 1)
	return spEnd(binary.BigEndian.AppendUint16(append(b, id), credit), at)
}

// spAMQPData is body as an AMQP 1.0 message of one data section, as the
// stream clients publish it.
func spAMQPData(body []byte) []byte {
	b := []byte{0x00, 0x53, 0x75} // described type: data section
	if len(body) < 256 {
		b = append(b, 0xa0, byte(len(body))) // vbin8
	} else {
		b = binary.BigEndian.AppendUint32(append(b, 0xb0), uint32(len(body))) // vbin32
	}
	return append(b, body...)
}

// spPublishTemplate is a publish frame of k copies of msg for publisher
// id; setIDs writes the publishing ids first, first+1, … into it.
type spPublishTemplate struct {
	frame []byte
	at    []int // where each message's publishing id is
}

func newSPPublish(id uint8, k int, msg []byte) *spPublishTemplate {
	t := &spPublishTemplate{}
	b, at := spBegin(nil, wire.KeyPublish, 1)
	b = binary.BigEndian.AppendUint32(append(b, id), uint32(k))
	for range k {
		t.at = append(t.at, len(b))
		b = binary.BigEndian.AppendUint64(b, 0)
		b = append(binary.BigEndian.AppendUint32(b, uint32(len(msg))), msg...)
	}
	t.frame = spEnd(b, at)
	return t
}

func (t *spPublishTemplate) setIDs(first uint64) {
	for i, at := range t.at {
		binary.BigEndian.PutUint64(t.frame[at:], first+uint64(i))
	}
}

// spFrame is the frame at the start of b: its payload (key onwards) and
// the bytes it takes; n == 0 when b does not hold all of it yet.
func spFrame(b []byte, max uint32) (payload []byte, n int, err error) {
	if len(b) < 4 {
		return nil, 0, nil
	}
	size := binary.BigEndian.Uint32(b)
	if size < 4 || size > max {
		return nil, 0, fmt.Errorf("stream frame of %d bytes", size)
	}
	if uint32(len(b)-4) < size {
		return nil, 0, nil
	}
	return b[4 : 4+size], int(4 + size), nil
}

// spKey is a payload's key.
func spKey(p []byte) uint16 { return binary.BigEndian.Uint16(p) }

// spChunk is what a raw reader takes from a Deliver frame.
type spChunk struct {
	sub     uint8
	typ     uint8
	first   uint64
	records uint32
}

// spDeliver reads the chunk header of a Deliver payload (version 1, or 2
// with the committed offset), checking that the data it announces is
// there; the messages are not looked at.
func spDeliver(p []byte) (spChunk, error) {
	var c spChunk
	if len(p) < 5 || spKey(p) != wire.KeyDeliver {
		return c, errors.New("not a deliver frame")
	}
	ver := binary.BigEndian.Uint16(p[2:])
	c.sub = p[4]
	h := p[5:]
	if ver == 2 {
		if len(h) < 8 {
			return c, errors.New("short deliver frame")
		}
		h = h[8:]
	} else if ver != 1 {
		return c, fmt.Errorf("deliver version %d", ver)
	}
	if len(h) < 48 || h[0]>>4 != 5 {
		return c, errors.New("bad chunk header")
	}
	c.typ = h[1]
	c.records = binary.BigEndian.Uint32(h[4:])
	c.first = binary.BigEndian.Uint64(h[24:])
	data := binary.BigEndian.Uint32(h[36:])
	trailer := binary.BigEndian.Uint32(h[40:])
	if uint64(len(h)-48) != uint64(data)+uint64(trailer) {
		return c, fmt.Errorf("chunk of %d data bytes in %d", data, len(h)-48)
	}
	return c, nil
}

// spConn is a raw stream-protocol connection after Open.
type spConn struct {
	rawReader
	corr     uint32
	frameMax uint32
}

// spDial connects and opens u's vhost with PLAIN, socket buffers sockbuf.
func spDial(u spURL, sockbuf int) (*spConn, error) {
	nc, err := net.DialTimeout("tcp", u.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok && sockbuf > 0 {
		_ = tc.SetReadBuffer(sockbuf)
		_ = tc.SetWriteBuffer(sockbuf)
	}
	c := &spConn{rawReader: rawReader{nc: nc, buf: make([]byte, 256<<10)}, frameMax: 1 << 20}
	if err := c.handshake(u); err != nil {
		nc.Close()
		return nil, fmt.Errorf("stream handshake with %s: %w", u.addr, err)
	}
	return c, nil
}

func (c *spConn) handshake(u spURL) error {
	_ = c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.call(spPeerProperties(nil, c.next(), "product", "tridentbench")); err != nil {
		return err
	}
	if _, err := c.call(spSaslHandshake(nil, c.next())); err != nil {
		return err
	}
	if _, err := c.call(spSaslPlain(nil, c.next(), u.user, u.pass)); err != nil {
		return err
	}
	tune, err := c.await(wire.KeyTune)
	if err != nil {
		return err
	}
	if len(tune) < 12 {
		return errors.New("short tune")
	}
	// The server's frame max; no heartbeats (a control connection sits
	// idle while the phases run).
	fm := binary.BigEndian.Uint32(tune[4:])
	if fm > 0 {
		c.frameMax = fm
	}
	if _, err := c.nc.Write(spTuneOK(nil, fm, 0)); err != nil {
		return err
	}
	_, err = c.call(spOpen(nil, c.next(), u.vhost))
	return err
}

func (c *spConn) next() uint32 { c.corr++; return c.corr }

// call writes a request frame and waits for its response (the request's
// key with the response bit), failing unless its code is OK.
func (c *spConn) call(req []byte) ([]byte, error) {
	if _, err := c.nc.Write(req); err != nil {
		return nil, err
	}
	key := binary.BigEndian.Uint16(req[4:])
	p, err := c.await(key | wire.ResponseBit)
	if err != nil {
		return nil, err
	}
	if len(p) < 10 {
		return nil, fmt.Errorf("short response to %#04x", key)
	}
	if code := wire.Code(binary.BigEndian.Uint16(p[8:])); code != wire.OK {
		return nil, fmt.Errorf("request %#04x: %w", key, code)
	}
	return p, nil
}

// await reads frames until one with key comes (skipping heartbeats) and
// returns a copy of its payload.
func (c *spConn) await(key uint16) ([]byte, error) {
	off := 0
	for {
		p, n, err := spFrame(c.buf[off:c.have], max(c.frameMax, 1<<20))
		if err != nil {
			return nil, err
		}
		if n == 0 {
			if _, err := c.fill(off); err != nil {
				return nil, err
			}
			off = 0
			continue
		}
		off += n
		switch k := spKey(p); k {
		case key:
			p = append([]byte(nil), p...)
			c.drop(off)
			return p, nil
		case wire.KeyHeartbeat:
		case wire.KeyClose:
			return nil, errors.New("the broker closed the connection")
		default:
			return nil, fmt.Errorf("frame %#04x while waiting for %#04x", k, key)
		}
	}
}

func spRawTarget(ctx context.Context, o *options, t spTarget, n int) ([]spPhase, error) {
	u, err := parseSPURL(t.url)
	if err != nil {
		return nil, err
	}
	ctl, err := spDial(u, o.streamProtoSockBuf)
	if err != nil {
		return nil, err
	}
	defer ctl.nc.Close()
	name := "tridentbench-sp-raw-" + randomSuffix()
	if _, err := ctl.call(spCreate(nil, ctl.next(), name)); err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	defer ctl.call(spDelete(nil, ctl.next(), name))

	var out []spPhase
	p, err := spRunPhase(t, "raw publish 16 B", func() (spPhase, error) { return spRawPublish(ctx, o, u, name, n, 16) })
	if err != nil {
		return out, err
	}
	out = append(out, p)
	if k := o.streamProtoSuper; k > 0 {
		p, err := spRunPhase(t, fmt.Sprintf("raw partitions x%d publish 16 B", k), func() (spPhase, error) {
			return spRawPartitions(ctx, o, u, ctl, name, k, n)
		})
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	for _, k := range []int{1, 10} {
		p, err := spRunPhase(t, fmt.Sprintf("raw consume x%d", k), func() (spPhase, error) {
			return spReadAll(ctx, k, n, func(ctx context.Context, n int) (float64, error) {
				return spRawConsume(ctx, o, u, name, n)
			})
		})
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// spRawPartitions publishes n messages of 16 B spread over k streams
// (name-0 … name-(k-1): a super stream's partitions, as its clients
// publish to them, one producer and connection each, the client having
// routed each message), all k at once; the rate is n over the wall time
// from the first connection to the last confirm, the latencies the
// slowest partition's. Plain streams, so that a broker without super
// streams over the protocol (RabbitMQ 3.10) is measured alike.
func spRawPartitions(ctx context.Context, o *options, u spURL, ctl *spConn, name string, k, n int) (spPhase, error) {
	p := spPhase{Messages: n}
	for i := range k {
		part := fmt.Sprintf("%s-%d", name, i)
		if _, err := ctl.call(spCreate(nil, ctl.next(), part)); err != nil {
			return p, fmt.Errorf("create %s: %w", part, err)
		}
		defer ctl.call(spDelete(nil, ctl.next(), part))
	}
	parts := make([]spPhase, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range k {
		each := n / k
		if i == k-1 {
			each = n - each*(k-1)
		}
		wg.Go(func() {
			parts[i], errs[i] = spRawPublish(ctx, o, u, fmt.Sprintf("%s-%d", name, i), each, 16)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return p, err
	}
	p.Rate = float64(n) / time.Since(start).Seconds()
	for _, q := range parts {
		p.P50us, p.P99us = max(p.P50us, q.P50us), max(p.P99us, q.P99us)
		p.ConfirmFrm += q.ConfirmFrm
	}
	return p, nil
}

// spRawPublish publishes n messages of size bytes into stream with
// publishing ids 1 … n and waits until each is confirmed once.
func spRawPublish(ctx context.Context, o *options, u spURL, stream string, n, size int) (spPhase, error) {
	p := spPhase{Messages: n}
	c, err := spDial(u, o.streamProtoSockBuf)
	if err != nil {
		return p, err
	}
	defer c.nc.Close()
	if _, err := c.call(spDeclarePublisher(nil, c.next(), 0, stream)); err != nil {
		return p, err
	}
	msg := spAMQPData(make([]byte, size))
	full := newSPPublish(0, rawSPBatch, msg)
	if uint32(len(full.frame)) > c.frameMax {
		return p, fmt.Errorf("a publish frame of %d bytes is over the broker's frame max %d", len(full.frame), c.frameMax)
	}
	batches := (n + rawSPBatch - 1) / rawSPBatch
	sentAt := make([]int64, batches) // by batch, ns
	lat := make([]int64, 0, n)
	seen := make([]bool, n+1)
	var confirmed atomic.Uint64
	var frames uint64
	var lastAt atomic.Int64
	var stop atomic.Bool
	g := newGate()
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		c.readLoop("raw publisher", &stop, func(err error) { errc <- err; g.kick() }, func() (int, error) {
			off := 0
			for {
				f, k, err := spFrame(c.buf[off:c.have], c.frameMax)
				if err != nil || k == 0 {
					return off, err
				}
				off += k
				switch spKey(f) {
				case wire.KeyPublishConfirm:
					if len(f) < 9 || uint32(len(f)-9) != 8*binary.BigEndian.Uint32(f[5:]) {
						return off, errors.New("malformed publish confirm")
					}
					now := time.Now().UnixNano()
					frames++
					for ids := f[9:]; len(ids) > 0; ids = ids[8:] {
						id := binary.BigEndian.Uint64(ids)
						if id == 0 || id > uint64(n) || seen[id] {
							return off, fmt.Errorf("publishing id %d confirmed twice or unknown", id)
						}
						seen[id] = true
						lat = append(lat, now-atomic.LoadInt64(&sentAt[(id-1)/rawSPBatch]))
					}
					lastAt.Store(now)
					if confirmed.Add(uint64(len(f)-9)/8) == uint64(n) {
						stop.Store(true)
					}
					g.kick()
				case wire.KeyPublishError:
					return off, errors.New("the broker refused a publish (publish error)")
				case wire.KeyHeartbeat:
				case wire.KeyClose:
					return off, errors.New("the broker closed the connection")
				}
			}
		})
	})
	window := uint64(max(o.streamProtoWindow, rawSPBatch))
	var sent uint64
	start := time.Now()
	var werr error
	for b := 0; b < batches && werr == nil; b++ {
		k := uint64(min(rawSPBatch, n-b*rawSPBatch))
		g.wait(func() bool { return sent+k-confirmed.Load() <= window || len(errc) > 0 || ctx.Err() != nil }, &stop)
		if len(errc) > 0 || ctx.Err() != nil {
			break
		}
		t := full
		if k < rawSPBatch {
			t = newSPPublish(0, int(k), msg)
		}
		t.setIDs(sent + 1)
		atomic.StoreInt64(&sentAt[b], time.Now().UnixNano())
		_, werr = c.nc.Write(t.frame)
		sent += k
	}
	deadline := time.Now().Add(5 * time.Minute)
	for werr == nil && confirmed.Load() < uint64(n) && len(errc) == 0 && ctx.Err() == nil && time.Now().Before(deadline) {
		g.wait(func() bool { return confirmed.Load() == uint64(n) || len(errc) > 0 }, &stop)
		if confirmed.Load() < uint64(n) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop.Store(true)
	c.nc.Close()
	wg.Wait()
	select {
	case err := <-errc:
		return p, err
	default:
	}
	if werr != nil {
		return p, werr
	}
	if ctx.Err() != nil {
		return p, ctx.Err()
	}
	if got := confirmed.Load(); got != uint64(n) {
		return p, fmt.Errorf("%d of %d messages confirmed", got, n)
	}
	p.Rate = float64(n) / time.Duration(lastAt.Load()-start.UnixNano()).Seconds()
	p.P50us, p.P99us = quantilesUs(lat)
	p.ConfirmFrm = frames
	return p, nil
}

// spRawConsume reads stream from first on its own connection until n
// messages came, checking each chunk's first offset against the count.
func spRawConsume(ctx context.Context, o *options, u spURL, stream string, n int) (float64, error) {
	c, err := spDial(u, o.streamProtoSockBuf)
	if err != nil {
		return 0, err
	}
	defer c.nc.Close()
	start := time.Now()
	if _, err := c.call(spSubscribe(nil, c.next(), 0, stream, wire.OffsetFirst, rawSPCredit)); err != nil {
		return 0, err
	}
	var got uint64
	var credit []byte
	// The read that brought the subscribe's answer may have brought
	// chunks behind it: those are read first (reading more before them
	// waited for chunks the broker sends only for their credit).
	buffered := c.have > 0
	for got < uint64(n) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		if !buffered {
			if _, err := c.fill(0); err != nil {
				return 0, fmt.Errorf("raw reader after %d of %d: %w", got, n, err)
			}
		}
		buffered = false
		off, chunks := 0, 0
		for {
			f, k, err := spFrame(c.buf[off:c.have], max(c.frameMax, 1<<20))
			if err != nil {
				return 0, err
			}
			if k == 0 {
				break
			}
			off += k
			switch spKey(f) {
			case wire.KeyDeliver:
				ch, err := spDeliver(f)
				if err != nil {
					return 0, err
				}
				chunks++
				if ch.typ != 0 { // not user data
					continue
				}
				if ch.first != got {
					return 0, fmt.Errorf("chunk at offset %d where %d was due", ch.first, got)
				}
				got += uint64(ch.records)
			case wire.KeyHeartbeat:
			case wire.KeyClose:
				return 0, errors.New("the broker closed the connection")
			default:
				return 0, fmt.Errorf("unexpected frame %#04x", spKey(f))
			}
		}
		c.drop(off)
		if chunks > 0 {
			credit = spCredit(credit[:0], 0, uint16(chunks))
			if _, err := c.nc.Write(credit); err != nil {
				return 0, err
			}
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	if got != uint64(n) {
		return rate, fmt.Errorf("%d messages consumed, %d published", got, n)
	}
	return rate, nil
}
