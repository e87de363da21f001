package stomp

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/stomp/frame"
)

const version = "0.1.0"

// conn is one STOMP session. Frames are handled on the reader goroutine
// (serve); the core calls the sinks (Deliver) and Confirm from its own.
//
// Lock order: Queue.mu (core) → conn.dmu → conn.w.Mu; conn.rmu → conn.w.Mu.
// The reader goroutine never holds dmu or rmu while calling into the core.
type conn struct {
	s    *Server
	t    transport
	id   uint64
	name string
	log  *slog.Logger

	// Set by CONNECT; read-only afterwards.
	version     frame.Version
	user        *auth.User
	vh          *exchange.VHost
	session     string
	hbOut, hbIn time.Duration
	client      map[string]any
	connectedAt time.Time
	opened      atomic.Bool
	expiry      *auth.ExpiryWatch // a token user's (OAuth 2): ERROR and close when it expires

	// Reader goroutine only.
	subs       map[string]*subscription // by subscription id
	txs        map[string]*transaction
	replyQs    map[string]string // temp-queue id → queue name
	declared   map[string]bool   // /queue/ names declared by SEND
	canWrite   map[string]bool   // exchanges the user may publish to (checked once)
	topics     auth.TopicCache   // topic permission decisions (topicperm.go)
	txBytes    int               // body bytes buffered in open transactions
	txFrames   int               // frames buffered in open transactions
	lastDest   string            // the last SEND destination header...
	lastParsed destination       // ...parsed
	closing    bool              // an ERROR was sent; stop reading

	// Deliveries: tag counter and the subscriptions' unacked lists.
	dmu     sync.Mutex
	nextTag uint64
	acked   []*subscription // subscriptions that had deliveries to acknowledge (timeout.go)
	// Consumer timeout (timeout.go): the watchdog, whose clock stamps
	// each delivery.
	wd frontend.Watchdog

	// Receipts waiting for the store, in order (see receipt.go).
	rmu      sync.Mutex
	rcond    *sync.Cond
	receipts []receiptEntry
	rbase    uint64 // sequence number of receipts[0]

	// Writer state: frame ends are recorded on WebSocket only.
	w frontend.Output
	// batch is this connection's, as a publisher: the reader flushes it
	// before it reads the socket again (readTracker).
	batch     exchange.Batch
	lastWrite atomic.Int64 // unix ns of the last write to the socket (per batch), for heart-beats

	lastRead atomic.Int64
	// Management counters.
	recvOct, sendOct, published, delivered atomic.Uint64
	wdone                                  chan struct{}
	done                                   chan struct{}
	forced                                 atomic.Pointer[string]

	// stop is closed by kill, to wake a reader that waits for a resource
	// alarm or a rate limit (see limits.go).
	stop        chan struct{}
	releaseConn func() // the connection limits' slot, set by CONNECT

	lg logState // connlog.go
}

func newConn(s *Server, t transport) *conn {
	c := &conn{s: s, t: t, id: s.seq.Add(1), version: frame.V10, done: make(chan struct{}), wdone: make(chan struct{}), stop: make(chan struct{}),
		subs: map[string]*subscription{}, txs: map[string]*transaction{}, replyQs: map[string]string{}, declared: map[string]bool{}, canWrite: map[string]bool{}}
	c.name = fmt.Sprintf("%s -> %s", t.remote(), t.local())
	c.log = s.log.With("conn", c.name)
	c.w.Init()
	// A plain socket (not TLS, not a WebSocket): a publisher's batch
	// may write its deliveries itself (Output.Flush), up to 4 KiB: a
	// small write costs the publisher's core less than waking the
	// writer, a larger one is better left to the writer on the other core
	// while the publisher reads on. Measured with tridentbench
	// (raw-stomp-1to1, stomp-queue-1to1, raw-stomp-persistent-receipt):
	// 4 KiB beat 0 (wake the writer always) and 16 or 64 KiB (which cost
	// raw 1→1 4–10%, its reader writing what the writer used to write in
	// parallel).
	c.w.DirectMax = 4 << 10
	if tt, ok := t.(*tcpTransport); ok {
		if direct := frontend.NonBlockingWrite(tt.nc); direct != nil {
			c.w.Direct = func(p []byte) (int, error) {
				n, err := direct(p)
				c.sendOct.Add(uint64(n))
				c.lastWrite.Store(time.Now().UnixNano())
				return n, err
			}
		}
	}
	c.rcond = sync.NewCond(&c.rmu)
	c.connectedAt = time.Now()
	c.lastRead.Store(time.Now().UnixNano())
	c.lastWrite.Store(time.Now().UnixNano())
	return c
}

func randomID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Abort closes the transport at once (frontend.Conn).
func (c *conn) Abort() { c.t.Close() }

// Serve runs the connection until it ends (frontend.Conn).
func (c *conn) Serve() {
	go c.writer()
	hs := time.AfterFunc(c.s.cfg.HandshakeTimeout, func() {
		if !c.opened.Load() {
			c.log.Info("no CONNECT frame in time, closing")
			c.t.Close()
		}
	})
	// Until CONNECT succeeds the reader holds at most the pre-login
	// bound; connect raises it (handle).
	// The frame reader reads only when what it has buffered holds no whole
	// frame, so the meter flushes the batch exactly before a read that may wait.
	rd := frame.NewReader(frontend.ReadMeter{R: c.t, Batch: &c.batch, LastRead: &c.lastRead, Bytes: &c.recvOct}, c.s.preLim)
	err := c.readLoop(rd)
	hs.Stop()
	c.cleanup()
	c.stopWriter()
	close(c.done)
	select {
	case <-c.wdone:
	case <-time.After(5 * time.Second):
	}
	if c.closing {
		c.t.closeGracefully()
	} else {
		c.t.Close()
	}
	if c.opened.Load() {
		c.logClosed(err)
	}
}

// errDisconnect ends the read loop after DISCONNECT or an ERROR frame.
var errDisconnect = errors.New("stomp: disconnect")

func (c *conn) readLoop(rd *frame.Reader) error {
	defer c.batch.Flush()
	for {
		f, err := rd.Read()
		if err != nil {
			var fe *frame.Error
			if errors.As(err, &fe) {
				c.sendError(&Error{Message: fe.Message, Detail: fe.Detail}, "", err, nil)
				return err
			}
			if r := c.forced.Load(); r != nil {
				return errDisconnect
			}
			return err
		}
		if r := c.forced.Load(); r != nil {
			return errDisconnect
		}
		c.waitOutput()
		if err := c.handle(&f, rd); err != nil {
			if !errors.Is(err, errDisconnect) {
				c.sendError(coreError(err), f.Value("receipt"), err, &f)
			}
			return err
		}
	}
}

// handle runs one frame.
func (c *conn) handle(f *frame.Frame, rd *frame.Reader) error {
	if !c.opened.Load() {
		if f.Command != frame.CONNECT && f.Command != frame.STOMP {
			return errorf("Illegal command", "You must log in using CONNECT first")
		}
		if err := c.connect(f); err != nil {
			return err
		}
		rd.SetVersion(c.version)
		rd.SetLimits(c.s.lim)
		return nil
	}
	var err error
	switch f.Command {
	case frame.SEND:
		err = c.send(f)
	case frame.SUBSCRIBE:
		err = c.subscribe(f)
	case frame.UNSUBSCRIBE:
		err = c.unsubscribe(f)
	case frame.ACK:
		err = c.ack(f, true)
	case frame.NACK:
		if c.version == frame.V10 {
			return errorf("Bad command", "Could not interpret command %s", f.Command)
		}
		err = c.ack(f, false)
	case frame.BEGIN:
		err = c.begin(f)
	case frame.COMMIT:
		err = c.commit(f)
	case frame.ABORT:
		err = c.abort(f)
	case frame.DISCONNECT:
		c.disconnect(f)
		return errDisconnect
	case frame.CONNECT, frame.STOMP:
		return errorf("Unexpected CONNECT", "Already connected")
	default:
		return errorf("Bad command", "Could not interpret command %s", f.Command)
	}
	if err != nil {
		return err
	}
	if id, ok := f.Get("receipt"); ok && f.Command != frame.SEND && f.Command != frame.COMMIT {
		c.receipt(id)
	}
	return nil
}

// sendError writes an ERROR frame and marks the connection closing: the
// reader stops and the socket is closed once the frame is flushed.
func (c *conn) sendError(e *Error, receipt string, err error, f *frame.Frame) {
	if c.closing {
		return
	}
	c.closing = true
	c.logError(e, err, f)
	hs := []frame.Header{{Key: "message", Value: e.Message}, {Key: "content-type", Value: "text/plain"},
		{Key: "version", Value: "1.0,1.1,1.2"}}
	if receipt != "" {
		hs = append(hs, frame.Header{Key: "receipt-id", Value: receipt})
	}
	c.writeFrame(&frame.Frame{Command: frame.ERROR, Headers: hs, Body: []byte(e.Detail)})
}

// forceClose is called from other goroutines (shutdown, management): it
// sends an ERROR frame and makes the reader stop.
func (c *conn) forceClose(reason string) {
	c.kill(&Error{Message: "CONNECTION_FORCED", Detail: "CONNECTION_FORCED - " + reason}, "")
}

// kill sends an ERROR frame from a goroutine other than the reader and
// closes the connection once it is flushed.
func (c *conn) kill(e *Error, receipt string) {
	reason := e.Message
	if !c.forced.CompareAndSwap(nil, &reason) {
		return
	}
	close(c.stop)
	if c.opened.Load() {
		hs := []frame.Header{{Key: "message", Value: e.Message}, {Key: "content-type", Value: "text/plain"}}
		if receipt != "" {
			hs = append(hs, frame.Header{Key: "receipt-id", Value: receipt})
		}
		c.writeFrame(&frame.Frame{Command: frame.ERROR, Headers: hs, Body: []byte(e.Detail)})
	}
	c.stopWriter()
	go func() {
		select {
		case <-c.wdone:
		case <-time.After(2 * time.Second):
		}
		c.t.Close()
	}()
}

// --- writer ---

func (c *conn) writer() {
	defer close(c.wdone)
	err := c.w.Run(func(buf []byte, ends []int) error {
		err := c.t.writeFrames(buf, ends)
		if err == nil {
			c.sendOct.Add(uint64(len(buf)))
		}
		c.lastWrite.Store(time.Now().UnixNano())
		return err
	})
	if err != nil {
		c.t.Close()
	}
}

// stopWriter lets the writer flush what is queued and exit.
func (c *conn) stopWriter() { c.w.Stop() }

// waitOutput holds the reader while the output buffer is over its high
// watermark, so that a client that sends without reading (receipts,
// ERRORs) cannot grow it without bound.
func (c *conn) waitOutput() { c.w.WaitBelowHigh() }

// endFrameLocked records the end of a frame just appended (w.Mu held).
func (c *conn) endFrameLocked() {
	c.endFrameBatchLocked(nil)
}

// endFrameBatchLocked is endFrameLocked for a delivery that batch (nil:
// none) made (see frontend.Output.SignalIn).
func (c *conn) endFrameBatchLocked(batch *exchange.Batch) {
	if c.t.web() {
		c.w.Ends = append(c.w.Ends, len(c.w.Buf))
	}
	c.w.SignalIn(batch)
}

// writeFrame queues one frame.
func (c *conn) writeFrame(f *frame.Frame) {
	c.w.Mu.Lock()
	if !c.w.Closed {
		c.w.Buf = frame.Append(c.w.Buf, f, c.version)
		c.endFrameLocked()
	}
	c.w.Mu.Unlock()
}

// heartbeater sends heart-beats when nothing else was written and closes
// the connection when the client has been silent for too long.
//
// Outgoing: the spec asks for new data at least every hbOut, so a beat
// goes out once nothing was written for hbOut less one check period; the
// checks come every hbOut/4, so no gap exceeds hbOut (a client such as
// stomp.py gives up after 1.5 × hbOut). Incoming: as RabbitMQ, the
// client may miss one beat; silence for two intervals closes.
func (c *conn) heartbeater() {
	tick := c.hbOut / 4
	if tick == 0 || (c.hbIn > 0 && c.hbIn/2 < tick) {
		tick = c.hbIn / 2
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		now := time.Now()
		if c.hbOut > 0 && now.Sub(time.Unix(0, c.lastWrite.Load())) >= c.hbOut-tick {
			c.w.Mu.Lock()
			if !c.w.Closed && len(c.w.Buf) == 0 {
				c.w.Buf = append(c.w.Buf, '\n')
				c.endFrameLocked()
			}
			c.w.Mu.Unlock()
		}
		if c.hbIn > 0 && now.Sub(time.Unix(0, c.lastRead.Load())) > 2*c.hbIn {
			c.lg.hbTimeout.Store(true)
			c.log.Warn("no heart-beat from client, closing", append(c.who(), "interval", c.hbIn)...)
			c.t.Close()
			return
		}
	}
}

// cleanup cancels the subscriptions (requeueing unacked messages) and
// deletes the connection's exclusive queues. Idempotent.
func (c *conn) cleanup() {
	c.expiry.Stop()
	for id, s := range c.subs {
		s.cancel()
		delete(c.subs, id)
	}
	c.txs = map[string]*transaction{}
	if c.vh != nil {
		c.vh.CloseOwner(c)
	}
	if c.releaseConn != nil {
		c.releaseConn()
		c.releaseConn = nil
	}
	c.rmu.Lock()
	c.receipts = nil
	c.rcond.Broadcast()
	c.rmu.Unlock()
}

func (c *conn) info() (ConnInfo, bool) {
	if !c.opened.Load() {
		return ConnInfo{}, false
	}
	proto := "STOMP " + c.version.String()
	if c.t.web() {
		proto = "Web STOMP " + c.version.String()
	}
	return ConnInfo{Name: c.name, Protocol: proto, User: c.user.Name(), VHost: c.vh.Name(), Peer: c.t.remote(),
		Local: c.t.local(), ConnectedAt: c.connectedAt, Heartbeat: c.hbIn, Client: c.client,
		RecvOct: c.recvOct.Load(), SendOct: c.sendOct.Load(), Published: c.published.Load(), Delivered: c.delivered.Load()}, true
}
