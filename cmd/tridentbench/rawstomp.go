package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// Raw STOMP scenarios (STOMP 1.2 spoken with hand-encoded frames, no
// client library; the STOMP side of the load generator of rawamqp.go and
// rawmqtt.go), 1 publisher → 1 consumer through /queue/NAME (a durable
// queue, as RabbitMQ declares /queue destinations by default):
//
//	raw-stomp-1to1                transient SENDs, ack:auto subscription
//	raw-stomp-1to1-ack            the same with ack:client-individual and
//	                              prefetch-count --prefetch: one ACK frame per
//	                              message, all of one read in one write
//	raw-stomp-persistent-receipt  persistent:true SENDs, every
//	                              stompReceiptEvery-th with a receipt header,
//	                              pipelined within --confirm-window messages
//	                              not yet receipted; consumer as -ack
//
// The publisher writes rawBatch SEND frames (copies of one pre-encoded
// frame, with content-length) per write; the consumer scans what it reads
// for MESSAGE frames (scanStomp) without decoding their headers, looking
// only at ack (to echo it in the ACK) and content-length. published/s is
// what was sent, or in the receipt scenario what RECEIPTs covered (a
// receipt's id is the number of messages sent up to its SEND). Each phase
// ends by waiting for the consumer to have received (and acked) exactly
// what was sent, and for the receipts of all of it, then DISCONNECTs the
// consumer with a receipt; any difference fails the phase. Latency at
// --latency-rates is measured as in the other raw scenarios (each body
// stamped just before the write of its batch).
var rawSTOMPScenarios = []Scenario{
	rawSTOMPScenario{name: "raw-stomp-1to1"},
	rawSTOMPScenario{name: "raw-stomp-1to1-ack", ack: true},
	rawSTOMPScenario{name: "raw-stomp-persistent-receipt", ack: true, receipts: true},
}

// stompReceiptEvery is how often the receipt scenario asks for a RECEIPT
// (and the last SEND of every write asks for one too).
const stompReceiptEvery = 64

type rawSTOMPScenario struct {
	name     string
	ack      bool // ack:client-individual, else ack:auto
	receipts bool // persistent SENDs with receipts
}

func (s rawSTOMPScenario) Name() string   { return s.name }
func (s rawSTOMPScenario) Scheme() string { return "stomp" }

// stompScan is one frame found by scanStomp, as slices of the bytes it
// scanned: nothing is unescaped or copied.
type stompScan struct {
	cmd     []byte
	headers []byte // the header lines as sent (escaped), each ending in "\n"
	body    []byte
}

// stompMaxBody bounds a content-length the scanner accepts.
const stompMaxBody = 1 << 30

// scanStomp finds the frame at the start of b: its command, header block,
// and body (content-length bytes when that header is there, else up to the
// NUL). n is the number of bytes the frame took; n == 0 with no error
// means b does not hold all of it yet. EOLs (heart-beats) before a frame
// come back alone: n > 0 and no command.
func scanStomp(b []byte) (f stompScan, n int, err error) {
	if n = frame.HeartBeats(b); n > 0 {
		return f, n, nil
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return f, 0, nil
	}
	f.cmd = bytes.TrimSuffix(b[:nl], []byte{'\r'})
	size := -1
	p := nl + 1
	for {
		q := bytes.IndexByte(b[p:], '\n')
		if q < 0 {
			return stompScan{}, 0, nil
		}
		line := bytes.TrimSuffix(b[p:p+q], []byte{'\r'})
		if len(line) == 0 {
			f.headers = b[nl+1 : p]
			p += q + 1
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("content-length:")); ok && size < 0 {
			cl, perr := strconv.Atoi(string(bytes.TrimSpace(v)))
			if perr != nil || cl < 0 || cl > stompMaxBody {
				return stompScan{}, 0, fmt.Errorf("stomp: %s frame with content-length %q", f.cmd, v)
			}
			size = cl
		}
		p += q + 1
	}
	if size >= 0 {
		if len(b) < p+size+1 {
			return stompScan{}, 0, nil
		}
		if b[p+size] != 0 {
			return stompScan{}, 0, fmt.Errorf("stomp: %s frame not ended by NUL after its content-length", f.cmd)
		}
		f.body = b[p : p+size]
		return f, p + size + 1, nil
	}
	z := bytes.IndexByte(b[p:], 0)
	if z < 0 {
		return stompScan{}, 0, nil
	}
	f.body = b[p : p+z]
	return f, p + z + 1, nil
}

// header is the value of the first header line of f with key, as sent
// (escaped: echo it back as it is).
func (f *stompScan) header(key string) ([]byte, bool) {
	for h := f.headers; len(h) > 0; {
		line := h
		if i := bytes.IndexByte(h, '\n'); i >= 0 {
			line, h = h[:i], h[i+1:]
		} else {
			h = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok && len(v) > 0 && v[0] == ':' {
			return bytes.TrimSuffix(v[1:], []byte{'\r'}), true
		}
	}
	return nil, false
}

// stompError turns an ERROR frame (its whole bytes) into an error, decoded
// by the broker's codec.
func stompError(b []byte) error {
	f, _, err := frame.Parse(b, frame.V12, frame.Limits{}, nil)
	if err != nil {
		return fmt.Errorf("stomp: undecodable ERROR frame: %w", err)
	}
	return fmt.Errorf("stomp ERROR from the broker: %s: %s", f.Value("message"), bytes.TrimSpace(f.Body))
}

// stompFrame encodes a frame from key, value pairs (escaped as 1.2 wants,
// CONNECT not at all), with the broker's codec.
func stompFrame(cmd string, body []byte, kv ...string) []byte {
	f := frame.Frame{Command: cmd, Body: body}
	for i := 0; i+1 < len(kv); i += 2 {
		f.Headers = append(f.Headers, frame.Header{Key: kv[i], Value: kv[i+1]})
	}
	return frame.Append(nil, &f, frame.V12)
}

// appendStompAck appends an ACK of the MESSAGE whose ack header was id
// (escaped, as it came).
func appendStompAck(b, id []byte) []byte {
	b = append(b, "ACK\nid:"...)
	b = append(b, id...)
	return append(b, "\n\n\x00"...)
}

// stompSend is one pre-encoded SEND frame, split where a receipt header
// goes (after the last header line), and where its body starts.
type stompSend struct {
	frame  []byte
	hdrEnd int // offset of the empty line ending the headers
	body   int // offset of the body
}

// newStompSend pre-encodes a SEND of size bytes (content-length, so that
// a stamp may hold NULs) to dest, persistent or not.
func newStompSend(dest string, size int, persistent bool) stompSend {
	kv := []string{"destination", dest}
	if persistent {
		kv = append(kv, "persistent", "true")
	}
	kv = append(kv, "content-length", strconv.Itoa(size))
	b := stompFrame(frame.SEND, make([]byte, size), kv...)
	body := len(b) - 1 - size
	return stompSend{frame: b, hdrEnd: body - 1, body: body}
}

// appendBatch appends k copies of the SEND, messages n+1 to n+k of the
// publisher's: each body starting with stamp when it is not 0, and with
// every (0: no) message whose number is a multiple of receiptEvery, and
// the last one, carrying receipt:<its number>.
func (s stompSend) appendBatch(b []byte, n, k, stamp, receiptEvery uint64) []byte {
	for i := n + 1; i <= n+k; i++ {
		if receiptEvery == 0 || (i%receiptEvery != 0 && i != n+k) {
			b = append(b, s.frame...)
		} else {
			b = append(b, s.frame[:s.hdrEnd]...)
			b = append(b, "receipt:"...)
			b = strconv.AppendUint(b, i, 10)
			b = append(b, '\n')
			b = append(b, s.frame[s.hdrEnd:]...)
		}
		if stamp != 0 {
			binary.LittleEndian.PutUint64(b[len(b)-len(s.frame)+s.body:], stamp)
		}
	}
	return b
}

// rawSTOMPConn is one STOMP 1.2 connection and what its reader has not
// consumed.
type rawSTOMPConn struct {
	rawReader
}

// rawSTOMPDial connects and logs in (vhost, user and password from the
// URL, as stompDial), without heart-beats.
func rawSTOMPDial(rawURL string) (*rawSTOMPConn, error) {
	nc, u, vhost, user, pass, err := stompDialTCP(rawURL)
	if err != nil {
		return nil, err
	}
	c := &rawSTOMPConn{rawReader{nc: nc, buf: make([]byte, 256<<10)}}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	connect := stompFrame(frame.CONNECT, nil, "accept-version", "1.2", "host", vhost,
		"login", user, "passcode", pass, "heart-beat", "0,0")
	if _, err := nc.Write(connect); err == nil {
		err = c.await(frame.CONNECTED, "")
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("raw stomp connect to %s: %w", u.Host, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// await reads frames until one with command cmd (and receipt-id id, if
// not ""), during a handshake; an ERROR frame is an error.
func (c *rawSTOMPConn) await(cmd, id string) error {
	for {
		f, n, err := scanStomp(c.buf[:c.have])
		if err != nil {
			return err
		}
		if n == 0 {
			if _, err := c.fill(0); err != nil {
				return err
			}
			continue
		}
		if string(f.cmd) == frame.ERROR {
			return stompError(c.buf[:n])
		}
		got, _ := f.header("receipt-id")
		match := string(f.cmd) == cmd && (id == "" || string(got) == id)
		c.drop(n)
		if match {
			return nil
		}
	}
}

func (s rawSTOMPScenario) Run(ctx context.Context, rawURL string, p Params) (Result, error) {
	dest := "/queue/tridentbench-" + s.name + "-" + randomSuffix()
	return runRawPhases(rawURL, p, func(r Result) float64 { return r.ConsumeRate },
		func(rate float64, warmup, measured time.Duration, pid int) (Result, *RawStats, error) {
			return s.phase(ctx, rawURL, dest, p, rate, warmup, measured, pid)
		})
}

// rawSTOMPRun is one phase's connections and counters.
type rawSTOMPRun struct {
	s         rawSTOMPScenario
	p         Params
	url, dest string
	rate      float64
	cons, pub *rawSTOMPConn
	c         counters      // published: sent; consumed: MESSAGEs received
	receipted atomic.Uint64 // messages covered by RECEIPTs (the highest receipt-id)
	receipts  atomic.Uint64 // RECEIPT frames for SENDs
	acked     atomic.Uint64 // MESSAGEs ACKed (written)
	g         *gate
	errc      chan error
	hist      *histogram    // the consumer's, latency phases only
	bye       chan struct{} // closed at the RECEIPT of the consumer's DISCONNECT
}

func (r *rawSTOMPRun) fail(err error) { r.c.fail(r.errc, err) }

// phase subscribes the consumer and connects the publisher, runs warmup +
// measured (unpaced at rate 0, else rate SENDs per second, stamped),
// verifies the counts and closes the connections.
func (s rawSTOMPScenario) phase(ctx context.Context, rawURL, dest string, p Params, rate float64,
	warmup, measured time.Duration, pid int) (Result, *RawStats, error) {
	r := &rawSTOMPRun{s: s, p: p, url: rawURL, dest: dest, rate: rate, g: newGate(), errc: make(chan error, 4), bye: make(chan struct{})}
	defer r.close()
	if err := r.connect(); err != nil {
		return Result{}, nil, err
	}
	if rate > 0 {
		r.hist = histPool.Get().(*histogram)
		*r.hist = histogram{}
	}
	var wg sync.WaitGroup
	wg.Go(r.consume)
	wg.Go(r.readPublisher)
	pubDone := make(chan struct{})
	go func() { defer close(pubDone); r.publish() }()
	res, cpu, err := measureRaw(ctx, p, warmup, measured, pid, r.errc, func(sum *counters) {
		sum.consumed.Store(r.c.consumed.Load())
		if s.receipts {
			sum.published.Store(r.receipted.Load())
		} else {
			sum.published.Store(r.c.published.Load())
		}
	})
	r.c.stop.Store(true)
	r.g.kick()
	<-pubDone
	if err == nil {
		err = r.verify(20 * time.Second)
	}
	r.close()
	wg.Wait()
	if err != nil {
		return Result{}, nil, err
	}
	var hists []*histogram
	if rate > 0 {
		hists = []*histogram{r.hist}
	}
	raw := rawStatsOf(cpu, res, rate, hists)
	raw.ConfirmFrames, raw.Confirmed = r.receipts.Load(), r.receipted.Load()
	return res, raw, nil
}

// connect connects the consumer, subscribes it (awaiting the SUBSCRIBE's
// receipt: the subscription is in place) and connects the publisher.
func (r *rawSTOMPRun) connect() error {
	var err error
	if r.cons, err = rawSTOMPDial(r.url); err != nil {
		return err
	}
	kv := []string{"id", "0", "destination", r.dest, "receipt", "subscribed"}
	if r.s.ack {
		kv = append(kv, "ack", "client-individual", "prefetch-count", strconv.Itoa(r.p.Prefetch))
	}
	if _, err := r.cons.nc.Write(stompFrame(frame.SUBSCRIBE, nil, kv...)); err != nil {
		return err
	}
	_ = r.cons.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := r.cons.await(frame.RECEIPT, "subscribed"); err != nil {
		return fmt.Errorf("subscribe %s: %w", r.dest, err)
	}
	_ = r.cons.nc.SetDeadline(time.Time{})
	r.pub, err = rawSTOMPDial(r.url)
	return err
}

func (r *rawSTOMPRun) close() {
	for _, c := range []*rawSTOMPConn{r.cons, r.pub} {
		if c != nil {
			c.nc.Close()
		}
	}
}

// publish writes batches of SENDs while the credit allows: at most
// MaxInFlight sent and not yet consumed, and with receipts at most the
// confirm window not yet receipted.
func (r *rawSTOMPRun) publish() {
	send := newStompSend(r.dest, max(r.p.MsgSize, 16), r.s.receipts)
	var every uint64
	if r.s.receipts {
		every = stompReceiptEvery
	}
	maxInFlight := max(r.p.MaxInFlight, rawBatch)
	window := uint64(max(r.p.ConfirmWindow, rawBatch))
	credit := func(n, k uint64) bool {
		if n+k-r.c.consumed.Load() > maxInFlight {
			return false
		}
		return !r.s.receipts || n+k-r.receipted.Load() <= window
	}
	batch := make([]byte, 0, (len(send.frame)+32)*rawBatch)
	err := rawPublish(r.rate, &r.c.stop, r.g, &r.c.published, credit, func(n, k, stamp uint64) error {
		batch = send.appendBatch(batch[:0], n, k, stamp, every)
		_, err := r.pub.nc.Write(batch)
		return err
	})
	if err != nil {
		r.fail(fmt.Errorf("publisher: %w", err))
	}
}

// readPublisher reads the publisher's connection: RECEIPTs, and ERRORs.
func (r *rawSTOMPRun) readPublisher() {
	c := r.pub
	c.readLoop("publisher connection", &r.c.stop, r.fail, func() (int, error) {
		off := 0
		defer r.g.kick()
		for {
			f, used, err := scanStomp(c.buf[off:c.have])
			if err != nil || used == 0 {
				return off, err
			}
			switch string(f.cmd) {
			case frame.RECEIPT:
				id, _ := f.header("receipt-id")
				n, err := strconv.ParseUint(string(id), 10, 64)
				if err != nil {
					return off, fmt.Errorf("RECEIPT with receipt-id %q", id)
				}
				r.receipts.Add(1)
				if n > r.receipted.Load() { // this goroutine is the only writer
					r.receipted.Store(n)
				}
			case frame.ERROR:
				return off, stompError(c.buf[off : off+used])
			}
			off += used
		}
	})
}

// consume counts MESSAGEs (recording latency in latency phases) and in
// the ack scenarios ACKs each one, all of one read in one write.
func (r *rawSTOMPRun) consume() {
	c := r.cons
	var acks []byte
	var got uint64
	c.readLoop("consumer", &r.c.stop, r.fail, func() (int, error) {
		off := 0
		var now int64
		if r.hist != nil {
			now = int64(time.Since(rawEpoch))
		}
		acks = acks[:0]
		n0 := got
		for {
			f, used, err := scanStomp(c.buf[off:c.have])
			if err != nil {
				return off, err
			}
			if used == 0 {
				break
			}
			switch string(f.cmd) {
			case frame.MESSAGE:
				got++
				if r.hist != nil && len(f.body) >= 8 {
					r.hist.record(now - int64(binary.LittleEndian.Uint64(f.body)))
				}
				if r.s.ack {
					id, ok := f.header("ack")
					if !ok {
						return off, errors.New("MESSAGE without an ack header")
					}
					acks = appendStompAck(acks, id)
				}
			case frame.RECEIPT:
				if id, _ := f.header("receipt-id"); string(id) == "bye" {
					close(r.bye)
				}
			case frame.ERROR:
				return off, stompError(c.buf[off : off+used])
			}
			off += used
		}
		if got > n0 {
			r.c.consumed.Store(got)
			r.g.kick()
		}
		if len(acks) > 0 {
			if _, err := c.nc.Write(acks); err != nil {
				return off, err
			}
			r.acked.Store(got)
		}
		return off, nil
	})
}

// verify waits until the consumer received exactly what was sent (and
// acked it, and the broker receipted all of it), then DISCONNECTs the
// consumer with a receipt: the broker has handled every ACK before the
// connection goes, so that nothing is requeued into the next phase.
func (r *rawSTOMPRun) verify(timeout time.Duration) error {
	sent := r.c.published.Load()
	deadline := time.Now().Add(timeout)
	for {
		got, rc, ak := r.c.consumed.Load(), r.receipted.Load(), r.acked.Load()
		if got > sent {
			return fmt.Errorf("%s: consumer received %d, more than the %d sent", r.dest, got, sent)
		}
		if got == sent && (!r.s.receipts || rc == sent) && (!r.s.ack || ak == sent) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: consumer received %d of %d sent (%d receipted, %d acked)", r.dest, got, sent, rc, ak)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := r.cons.nc.Write(stompFrame(frame.DISCONNECT, nil, "receipt", "bye")); err != nil {
		return fmt.Errorf("consumer DISCONNECT: %w", err)
	}
	select {
	case <-r.bye:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s: no RECEIPT for the consumer's DISCONNECT", r.dest)
	}
}
