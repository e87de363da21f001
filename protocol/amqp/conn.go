package amqp

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/event"
	"github.com/trident-broker/trident/protocol/amqp/wire"
	"github.com/trident-broker/trident/protocol/frontend"
)

const version = "0.1.0"

type conn struct {
	s    *Server
	nc   net.Conn
	id   uint64
	name string
	r    *bufio.Reader
	log  *slog.Logger

	// Negotiated at handshake; read-only afterwards.
	frameMax    uint32
	channelMax  uint16
	heartbeat   time.Duration
	user        *auth.User
	vh          *exchange.VHost
	clientProps wire.Table
	capCancel   bool // consumer_cancel_notify
	capBlocked  bool // connection.blocked
	connectedAt time.Time

	chmu     sync.Mutex
	channels map[uint16]*channel
	lastCh   *channel // the reader's last looked-up channel (reader goroutine)

	// Writer state: the output buffer, whose lock (w.Mu) also guards
	// the scratch encoders and confirm state below.
	w       frontend.Output
	deliver wire.BasicDeliver // scratch, under w.Mu
	props   wire.Properties   // scratch, under w.Mu
	ack     wire.BasicAck     // scratch, under w.Mu
	nack    wire.BasicNack    // scratch, under w.Mu
	// confirmRuns are the channels with a run of publisher confirms not
	// yet written (confirms.go), under w.Mu.
	confirmRuns []*channel
	// batch is this connection's own, as a publisher (reader goroutine).
	batch exchange.Batch
	wrote atomic.Bool // something was written since the last heartbeat tick

	opened   atomic.Bool // handshake done: vh, user and the tuned values are set
	wdone    chan struct{}
	lastRead atomic.Int64
	recvOct  atomic.Uint64
	sendOct  atomic.Uint64
	closing  atomic.Bool   // connection.close sent, waiting for close-ok
	blocked  atomic.Bool   // reading is paused by a resource alarm
	abort    chan struct{} // closed by forceClose: stop waiting on alarms
	abortOne sync.Once
	done     chan struct{}

	releaseConn func() // the connection limits' slot, set by the handshake

	// Consumer timeout (timeout.go): the watchdog, whose clock stamps
	// each delivery.
	wd frontend.Watchdog

	preauth   *auth.User // an in-process connection's user (local.go); set before serve
	accepted  bool       // the protocol header was valid (reader goroutine)
	wantVHost string     // the vhost connection.open asked for (reader goroutine)
	mechanism string     // the SASL mechanism the client logged in with

	expiry *auth.ExpiryWatch // a token user's: closes the connection when the token expires

	cause      atomic.Pointer[closeCause] // why it ended, for the log (connlog.go)
	authLogged bool                       // a refused login was logged (by auth or here); handshake only
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, id: s.seq.Add(1), channels: map[uint16]*channel{}, done: make(chan struct{}), wdone: make(chan struct{}), abort: make(chan struct{})}
	c.name = fmt.Sprintf("%s -> %s", nc.RemoteAddr(), nc.LocalAddr())
	c.log = s.log.With("conn", c.name)
	c.w.Init()
	c.w.Pending = func() bool { return len(c.confirmRuns) > 0 }
	c.w.Prepare = c.writeConfirmRunsLocked
	// Not over TLS (nc is then no socket): the writer writes all.
	if direct := frontend.NonBlockingWrite(nc); direct != nil {
		c.w.Direct = func(p []byte) (int, error) {
			n, err := direct(p)
			c.wrote.Store(true)
			c.sendOct.Add(uint64(n))
			return n, err
		}
	}
	c.frameMax = s.cfg.InitialFrameMax
	c.connectedAt = time.Now()
	return c
}

// errClosed ends the reader loop quietly.
var errClosed = errors.New("amqp: connection closed")

// Abort closes the transport at once (frontend.Conn).
func (c *conn) Abort() { c.nc.Close() }

// Serve runs the connection until it ends (frontend.Conn).
func (c *conn) Serve() {
	defer c.nc.Close()
	c.r = bufio.NewReaderSize(readTracker{c}, handshakeBufSize)
	go c.writer()
	err := c.handshake()
	if err == nil {
		c.growReader()
		c.logAuthenticated()
		if c.heartbeat > 0 {
			go c.heartbeater()
		}
		// As RabbitMQ: an expired credential closes the connection
		// with 320 CONNECTION_FORCED "credential expired".
		c.expiry = auth.WatchExpiry(c.user, func() {
			c.log.Warn("closing connection: credential has expired", "user", c.user.Name())
			c.forceClose("credential expired")
		})
		err = c.readLoop()
		c.expiry.Stop()
	}
	c.cleanup()
	c.stopWriter()
	close(c.done)
	select {
	case <-c.wdone:
	case <-time.After(5 * time.Second):
	}
	switch {
	case c.opened.Load():
		c.logClosed(err)
	case c.accepted:
		c.logRefused(err)
	}
}

// readTracker records the time of every successful read, for heartbeats.
type readTracker struct{ c *conn }

func (t readTracker) Read(p []byte) (int, error) {
	n, err := t.c.nc.Read(p)
	if n > 0 {
		t.c.lastRead.Store(time.Now().UnixNano())
		t.c.recvOct.Add(uint64(n))
	}
	return n, err
}

// --- writer ---

func (c *conn) writer() {
	defer close(c.wdone)
	err := c.w.Run(func(buf []byte, _ []int) error {
		n, err := c.nc.Write(buf)
		c.wrote.Store(true)
		c.sendOct.Add(uint64(n))
		return err
	})
	if err != nil {
		c.nc.Close()
	}
}

// stopWriter lets the writer flush what is queued and exit.
func (c *conn) stopWriter() { c.w.Stop() }

// queued is called with w.Mu held after appending to w.Buf.
func (c *conn) queued() { c.w.Signal() }

// send writes one method frame.
func (c *conn) send(ch uint16, m wire.Method) {
	c.w.Mu.Lock()
	if !c.w.Closed {
		// A method goes after the confirms sent before it: channel.close-ok
		// must not overtake its channel's acks.
		c.writeConfirmRunsLocked()
		var err error
		var b []byte
		if b, err = wire.AppendMethodFrame(c.w.Buf, ch, m); err == nil {
			c.w.Buf = b
		} else {
			c.log.Warn("cannot encode method", "method", m.Name(), "err", err)
		}
		c.queued()
	}
	c.w.Mu.Unlock()
}

// sendContent writes a method with content (deliver, get-ok, return).
// Called with w.Mu held. It returns false if the output buffer is over its
// high watermark.
func (c *conn) appendContentLocked(ch uint16, m wire.Method, msg *exchange.Message, batch *exchange.Batch) bool {
	if c.w.Closed {
		return true
	}
	toWireProps(&c.props, &msg.Props)
	b, err := wire.AppendMethodFrame(c.w.Buf, ch, m)
	if err == nil {
		b, err = wire.AppendHeaderFrame(b, ch, uint64(len(msg.Body)), &c.props)
	}
	if err != nil {
		c.log.Warn("cannot encode delivery", "err", err)
		return true
	}
	maxBody := int(c.frameMax - wire.FrameOverhead)
	for rest := msg.Body; len(rest) > 0; {
		n := min(len(rest), maxBody)
		b = wire.AppendFrame(b, wire.FrameBody, ch, rest[:n])
		rest = rest[n:]
	}
	c.w.Buf = b
	c.w.SignalIn(batch)
	return len(c.w.Buf) < frontend.High
}

func (c *conn) heartbeater() {
	t := time.NewTicker(c.heartbeat / 2)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if !c.wrote.Swap(false) {
			c.w.Mu.Lock()
			if !c.w.Closed {
				c.w.Buf = wire.AppendHeartbeat(c.w.Buf)
				c.queued()
			}
			c.w.Mu.Unlock()
		}
		if c.blocked.Load() {
			continue // we are not reading on purpose
		}
		if time.Since(time.Unix(0, c.lastRead.Load())) > 2*c.heartbeat {
			c.setCause(reasonHeartbeat, 0, "timeout: "+c.heartbeat.String())
			c.nc.Close()
			return
		}
	}
}

// --- reading ---

func (c *conn) readLoop() error {
	var buf []byte
	defer c.batch.Flush()
	for {
		if c.batch.Active() && !wire.FrameBuffered(c.r) {
			// What was read is done: wake the consumers' writers once
			// for all the deliveries it made, and read the clock again
			// for what comes next.
			c.batch.Flush()
			c.batch.Tick()
		}
		f, err := wire.ReadFrame(c.r, c.frameMax, buf)
		if err != nil {
			if c.closing.Load() {
				return errClosed
			}
			var we *wire.Error
			if errors.As(err, &we) {
				c.connectionError(we)
				return err
			}
			return err
		}
		buf = f.Payload[:0]
		if err := c.handleFrame(f); err != nil {
			if errors.Is(err, errClosed) {
				return nil
			}
			var we *wire.Error
			if errors.As(err, &we) {
				c.connectionError(we)
			}
			return err
		}
	}
}

func (c *conn) handleFrame(f wire.Frame) error {
	if c.closing.Load() {
		// After connection.close only close-ok (or close) matters.
		if f.Type == wire.FrameMethod && f.Channel == 0 {
			m, err := wire.DecodeMethod(f.Payload)
			if err == nil {
				switch m.(type) {
				case *wire.ConnectionCloseOK:
					return errClosed
				case *wire.ConnectionClose:
					c.send(0, &wire.ConnectionCloseOK{})
					return errClosed
				}
			}
		}
		return nil
	}
	switch f.Type {
	case wire.FrameHeartbeat:
		if f.Channel != 0 {
			return wire.NewConnectionError(wire.FrameError, "heartbeat frame on channel %d", f.Channel)
		}
		return nil
	case wire.FrameMethod:
		if ch := c.channel(f.Channel); ch != nil && f.Channel != 0 {
			// The hot path: basic.publish decodes into a value the channel
			// keeps, which reuses its exchange and routing key strings.
			cid, mid, args, err := wire.SplitMethod(f.Payload)
			if err == nil && cid == wire.ClassBasic && mid == wire.MethodBasicPublish && ch.state == chOpen && !ch.pubActive {
				if err := ch.pubIn.DecodeArgs(args); err != nil {
					return withMethod(wire.NewConnectionError(wire.SyntaxError, "%s", err.Error()), &ch.pubIn)
				}
				c.waitUnblocked()
				return ch.method(&ch.pubIn)
			}
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			return err
		}
		if f.Channel == 0 {
			return c.connectionMethod(m)
		}
		return c.channelMethod(f.Channel, m)
	case wire.FrameHeader, wire.FrameBody:
		ch := c.channel(f.Channel)
		if ch == nil {
			return wire.NewConnectionError(wire.UnexpectedFrame, "content frame on unopened channel %d", f.Channel)
		}
		return ch.content(f)
	}
	return wire.NewConnectionError(wire.FrameError, "unknown frame type %d", f.Type)
}

func (c *conn) connectionMethod(m wire.Method) error {
	switch m := m.(type) {
	case *wire.ConnectionClose:
		if m.ReplyCode != 0 && m.ReplyCode != wire.ReplySuccess {
			c.setCause(reasonClientError, m.ReplyCode, m.ReplyText)
			c.log.Warn("client closed connection with an error", append(c.who(), "code", m.ReplyCode, "text", m.ReplyText)...)
		} else {
			c.setCause(reasonClientClosed, m.ReplyCode, m.ReplyText)
		}
		c.cleanup()
		c.send(0, &wire.ConnectionCloseOK{})
		return errClosed
	case *wire.ConnectionCloseOK:
		return errClosed
	case *wire.ConnectionBlocked, *wire.ConnectionUnblocked:
		return nil
	case *wire.ConnectionUpdateSecret:
		return c.updateSecret(m)
	default:
		return wire.NewConnectionError(wire.CommandInvalid, "unexpected method %s on channel 0", m.Name())
	}
}

// channel returns an open channel. Only the reader goroutine changes the
// channels map (under chmu, for info), so the reader reads it unlocked.
func (c *conn) channel(id uint16) *channel {
	if ch := c.lastCh; ch != nil && ch.id == id {
		return ch // a publish is three frames on one channel
	}
	ch := c.channels[id]
	c.lastCh = ch
	return ch
}

func (c *conn) channelMethod(id uint16, m wire.Method) error {
	ch := c.channel(id)
	if ch == nil {
		if _, ok := m.(*wire.ChannelOpen); !ok {
			if _, ok := m.(*wire.ChannelCloseOK); ok {
				return nil
			}
			return wire.NewConnectionError(wire.ChannelError, "expected 'channel.open' on channel %d", id)
		}
		// The spec's usable channel numbers are 1..channel-max. RabbitMQ
		// (3.10) opens any number and counts only the open channels;
		// Trident refuses a number above the negotiated channel_max too,
		// with the code RabbitMQ gives for too many channels
		// (530 NOT_ALLOWED), so that channel_max bounds the ids a peer can
		// make the broker track.
		if c.channelMax != 0 && id > c.channelMax {
			return withMethod(wire.NewConnectionError(wire.NotAllowed, "channel number %d is above the negotiated channel_max (%d)", id, c.channelMax), m)
		}
		c.chmu.Lock()
		if n := len(c.channels); c.channelMax != 0 && n >= int(c.channelMax) {
			c.chmu.Unlock()
			return wire.NewConnectionError(wire.NotAllowed, "number of channels opened (%d) has reached the negotiated channel_max (%d)", n, c.channelMax)
		}
		ch = newChannel(c, id)
		c.channels[id] = ch
		c.chmu.Unlock()
		c.channelEvent(event.ChannelCreated, id)
		c.send(id, &wire.ChannelOpenOK{})
		return nil
	}
	return ch.method(m)
}

func (c *conn) removeChannel(id uint16) {
	c.lastCh = nil
	c.chmu.Lock()
	delete(c.channels, id)
	c.chmu.Unlock()
}

// connectionError closes the connection with err's code.
func (c *conn) connectionError(we *wire.Error) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	c.setCause(reasonConnError, we.Code, we.Text)
	c.logConnectionError(we)
	c.cleanup()
	c.send(0, &wire.ConnectionClose{ReplyCode: we.Code, ReplyText: we.Text, ReplyClassID: we.ClassID, ReplyMethodID: we.MethodID})
	c.waitCloseOK()
}

// forceClose is called from other goroutines (shutdown, management) to
// close the connection with 320 CONNECTION_FORCED.
func (c *conn) forceClose(reason string) {
	if !c.opened.Load() {
		c.nc.Close()
		return
	}
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	c.setCause(reasonForced, wire.ConnectionForced, reason)
	c.abortOne.Do(func() { close(c.abort) })
	c.send(0, &wire.ConnectionClose{ReplyCode: wire.ConnectionForced, ReplyText: "CONNECTION_FORCED - " + reason})
	// The reader sees close-ok, or its deadline.
	_ = c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
}

// cleanup closes every channel (requeueing unacked messages, cancelling
// consumers) and deletes the connection's exclusive queues. Idempotent.
func (c *conn) cleanup() {
	c.chmu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.channels = map[uint16]*channel{}
	c.lastCh = nil
	c.chmu.Unlock()
	for _, ch := range chs {
		ch.cleanup()
	}
	if c.vh != nil {
		c.vh.CloseOwner(c)
	}
	if c.releaseConn != nil {
		c.releaseConn() // idempotent
	}
}

func (c *conn) info() (ConnInfo, bool) {
	if !c.opened.Load() {
		return ConnInfo{}, false
	}
	c.chmu.Lock()
	chs := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chs = append(chs, ch)
	}
	c.chmu.Unlock()
	i := ConnInfo{Name: c.name, User: c.user.Name(), VHost: c.vh.Name(), Peer: c.nc.RemoteAddr().String(),
		Local: c.nc.LocalAddr().String(), Channels: len(chs), ConnectedAt: c.connectedAt, ClientProperties: c.clientProps,
		FrameMax: c.frameMax, ChannelMax: c.channelMax, Heartbeat: c.heartbeat,
		RecvOct: c.recvOct.Load(), SendOct: c.sendOct.Load()}
	for _, ch := range chs {
		ci := ch.info()
		i.Published += ci.Published
		i.Delivered += ci.Delivered + ci.DeliveredNoAck + ci.Got + ci.GotNoAck
		i.ChannelList = append(i.ChannelList, ci)
	}
	sort.Slice(i.ChannelList, func(a, b int) bool { return i.ChannelList[a].Number < i.ChannelList[b].Number })
	return i, true
}

// updateSecret handles connection.update-secret: the connection's user
// logs in again with the new secret, and must still reach the vhost, or
// the connection is closed with NOT_ALLOWED in RabbitMQ's words. For a
// token user (OAuth 2) the new token must be valid and name the same
// user; its scopes apply to every later check on the connection's
// channels, and the expiry timer follows the new exp. (For a
// user of its internal database RabbitMQ accepts any secret, as such
// credentials never expire; Trident checks it: a client that updates its
// secret gets a real answer.) A certificate login (EXTERNAL) has no
// secret to update.
func (c *conn) updateSecret(m *wire.ConnectionUpdateSecret) error {
	refused := func(why string, args ...any) error {
		c.log.Warn("secret update refused", "user", c.user.Name(), "reason", m.Reason, "why", fmt.Sprintf(why, args...))
		return withMethod(wire.NewConnectionError(wire.NotAllowed, "New secret was refused by one of the backends"), m)
	}
	if c.mechanism == mechExternal {
		return refused("logged in with EXTERNAL (a certificate), which has no secret")
	}
	if err := c.s.users.UpdateSecret(c.user, m.NewSecret, c.nc.RemoteAddr()); err != nil {
		return refused("%v", err)
	}
	if c.vh != nil {
		if err := c.s.users.CheckVHost(c.user, c.vh.Name()); err != nil {
			return refused("%v", err)
		}
	}
	c.expiry.Reset()
	for _, ch := range c.channels { // the reader owns the map
		ch.recheckConsumers()
	}
	u := c.user
	c.log.Info("secret updated", "user", u.Name(), "reason", m.Reason)
	c.send(0, &wire.ConnectionUpdateSecretOK{})
	return nil
}
