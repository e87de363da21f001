package mqtt

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/mqtt/wire"
)

// conn is one client connection and its session state machine.
type conn struct {
	s  *Server
	nc net.Conn
	br *connReader // reader goroutine only (readbuf.go)
	// nameP is the connection's name, made by the first that asks for it
	// (connName); seq is its number in it.
	nameP       atomic.Pointer[string]
	seq         uint64
	connectedAt int64 // Unix nanoseconds

	// Set while handling CONNECT, read-only afterwards.
	clientID   string
	topics     auth.TopicCache // topic permission decisions (topicperm.go); reader only
	user       *auth.User
	vh         *exchange.VHost
	se         *session
	version    byte
	cleanStart bool
	aliasMax   uint16 // the client's topic alias maximum (MQTT 5), 0: none
	maxOut     uint32 // the client's maximum packet size, 0: none
	// rare holds what few connections use (a will, a token's expiry,
	// an authentication method, topic aliases); nil for most.
	rare *connRare

	connected atomic.Bool
	noLocal   atomic.Bool // the session has a no-local subscription

	// rd is the reader's publish state (reader goroutine only), made by
	// the first publish or acknowledgement and dropped when the
	// connection parks (dropIdleState).
	rd *readerState
	// inQuota counts MQTT 5 inbound QoS 1 and 2 publishes not yet
	// acknowledged (PUBACK, a failed PUBREC, or PUBCOMP), against the
	// Receive Maximum the server advertised; see publish.go.
	inQuota        atomic.Int32
	normalClose    bool // DISCONNECT without will
	disconnectWill bool // DISCONNECT 0x04
	expirySet      bool // DISCONNECT changed the session expiry interval
	consClosed     bool // cleanup took the consumers (consMu)

	consMu    sync.Mutex
	consumers []*exchange.Consumer // one a queue: the session's, shared groups' (few)
	limit     exchange.Limit

	// The connection's output and its writers on demand (writer.go): a
	// writer goroutine runs only while there is output; once halted
	// (cleanup, a write error, a final packet written) none starts
	// again, and wdone is closed when the last write has ended.
	ob        frontend.Output
	wdone     signal
	runWriter func() // c.runWriterLoop, made once: go c.runWriter() allocates nothing
	// w is the writer's state, the output's while attached (ob.Mu); nil
	// while the connection is idle (dropIdleOutput puts it back in
	// writerStates).
	w       *packetWriter
	closing atomic.Bool
	// outFull: the output reached frontend.High; the reader waits
	// (waitOutput) until the writer has it under.
	outFull atomic.Bool
	// finalQueued: a packet after which the writer closes is queued.
	finalQueued atomic.Bool
	// lingering: the writer sent that packet and lingerClose owns the
	// closing of nc.
	lingering atomic.Bool
	// keptListed: the connection is on Server.kept (ob.Mu).
	keptListed bool
	// The writer rounds of a parked connection since wWindow (Unix
	// nanoseconds; writerStreamingLocked, under ob.Mu).
	wRounds uint8
	// wakes is packetLoop's (reader), here where it takes no room.
	wakes uint8
	// kaSecs is the keep-alive in seconds (keepalive), set by CONNECT.
	kaSecs   uint16
	wWindow  int64
	readDone signal // fired when the reader has stopped
	// left fires once cleanup has let go of the session this connection
	// owned (a takeover waits for it; a channel per session was 96 bytes).
	left signal

	infMu    sync.Mutex
	inflight pidTable

	ackMu   sync.Mutex
	acks    []pendingAck
	ackBase uint64

	// The event loop (park.go): parked while the reader goroutine is
	// gone and the descriptor waits in the server's poller; noPark once
	// the connection is being closed (the reader then waits in the
	// runtime, as a reader always did, to see the close).
	parked atomic.Bool
	noPark atomic.Bool
	pollID uint64 // the poller's id of the connection, 0 until it first parks (reader)
	// wakes (above) counts the reader's wakes from the event loop since
	// wakeWindow (Unix nanoseconds), to tell a stream from a device that
	// sends now and then (packetLoop's eager; reader).
	wakeWindow int64
	ended      func(any) // frontend.AsyncConn's, nil under Serve
	kaTimer    *time.Timer
	kaDue      atomic.Int64 // when the keep-alive of a parked connection runs out, Unix nanoseconds

	recvPublish, sentPublish atomic.Uint64
	recvBytes, sentBytes     atomic.Uint64

	// abort is fired by serverDisconnect, to wake a reader that waits
	// for a resource alarm or a rate limit (see limits.go).
	abort signal

	// For the log (connlog.go): the reason code the broker disconnected
	// with (|0x100 once set); a valid CONNECT was read; its refusal is
	// already logged (reader goroutine).
	closeCode     atomic.Uint32
	accepted      bool
	refusalLogged bool
	refusedCode   byte // the CONNACK refusal's reason code
	// slotHeld: CONNECT took a slot under the connection limits for
	// user and vh (openLimited), which cleanup gives back.
	slotHeld bool
}

// connRare is what few connections use, made on first use (rareState)
// by newConn or the reader while it handles CONNECT, before the
// connection is connected; read-only afterwards but for outAliases, the writer's,
// which is only used when aliasMax is set (and rare made with it).
type connRare struct {
	will       *will
	expiry     *auth.ExpiryWatch // a token user's (OAuth 2): disconnects when the token expires
	authMethod string            // MQTT 5 Authentication Method of CONNECT (reauth.go); "" none
	// loginName is the user name of a CONNECT refused before its user
	// was known (the log's who); a connection with a user names it.
	loginName  string
	outAliases map[string]uint16 // outbound topic aliases (MQTT 5); the writer's
	ws         bool              // a WebSocket connection (transport)
}

// rareState returns c.rare, made if need be. Reader only, before the
// connection is connected or for fields no other goroutine reads.
func (c *conn) rareState() *connRare {
	if c.rare == nil {
		c.rare = &connRare{}
	}
	return c.rare
}

// authMethod is CONNECT's MQTT 5 Authentication Method, "" if none.
func (c *conn) authMethod() string {
	if c.rare == nil {
		return ""
	}
	return c.rare.authMethod
}

// keepalive is the keep-alive CONNECT set (the client's or the
// server's), 0 for none.
func (c *conn) keepalive() time.Duration { return time.Duration(c.kaSecs) * time.Second }

// transport names the connection's transport for management and the log.
func (c *conn) transport() string {
	if c.rare != nil && c.rare.ws {
		return "websocket"
	}
	return "tcp"
}

func newConn(s *Server, nc net.Conn, transport string) *conn {
	c := &conn{
		s: s, nc: nc, br: newConnReader(nc),
		seq: s.seq.Add(1), connectedAt: time.Now().UnixNano(),
	}
	if transport == "websocket" {
		c.rareState().ws = true
	}
	c.runWriter = c.runWriterLoop
	return c
}

// connName is the connection's name in the management API, the log and
// the events: its peer's and local address and its number. Made when
// first asked for: a fleet's idle devices that nobody lists or logs
// keep no string of it.
func (c *conn) connName() string {
	if p := c.nameP.Load(); p != nil {
		return *p
	}
	n := c.nc.RemoteAddr().String() + " -> " + c.nc.LocalAddr().String() + " #" + strconv.FormatUint(c.seq, 10)
	c.nameP.CompareAndSwap(nil, &n)
	return *c.nameP.Load()
}

// Abort closes the transport at once (frontend.Conn).
func (c *conn) Abort() {
	c.nc.Close()
	c.wakeReader()
}

// Serve runs the connection until it ends (frontend.Conn).
func (c *conn) Serve() {
	c.end(c.readLoop())
}

// ServeAsync runs the connection until it ends or waits for input in
// the event loop (frontend.AsyncConn; park.go).
// TLS and WebSocket connections, which the poller cannot read, are
// served as Serve does, their reader goroutine kept.
func (c *conn) ServeAsync(ended func(any)) {
	if c.br.rc == nil {
		c.Serve()
		ended(c)
		return
	}
	c.ended = ended
	if err := c.readConnect(); err != nil {
		c.finish(err)
		return
	}
	c.readOn(false)
}

// end runs once the reader has stopped with err. It is not part of Serve
// so that Serve's frame, which is on the stack of every idle connection,
// stays small (see readLoop).
func (c *conn) end(err error) {
	c.br.release()
	c.readDone.fire()
	c.flushSettles()
	c.logEnd(err) // connlog.go
	c.s.noteClosed(c)
	c.cleanup()
	c.s.giveBack.noteEnded()
}

// readLoop is the reader goroutine's loop. An idle connection spends its
// life parked in it, and a goroutine's stack only shrinks (at a GC) to a
// size its parked frames fill less than a quarter of: so the loop waits
// for input (connReader.Wait) in frames of a few hundred bytes, and a
// packet is decoded and handled in readPacket, whose frame (a
// packets.Packet is most of a kilobyte, and the decoder's is more) is gone
// while it waits. With the large frames on the stack an idle reader kept
// 8 KiB; without them (about 700 bytes are parked) it keeps 2 KiB, or 4
// KiB if the runtime started it with that (it starts goroutines at the
// average stack use it measured, and shrinks a stack only to where the
// parked frames and 800 bytes take less than a quarter).
func (c *conn) readLoop() error {
	if err := offStack(c.readConnect); err != nil {
		return err
	}
	err, _ := c.packetLoop(false)
	return err
}

// packetLoop reads and handles packets until the connection ends (its
// error, nil after a DISCONNECT) or, if async, until it parks in the
// event loop (parked true; park.go).
func (c *conn) packetLoop(async bool) (err error, parked bool) {
	defer func() {
		if !parked { // (parking flushed it: tryFill)
			c.br.flushBatch() // the consumers' writers the last packets deferred
		}
	}()
	sinceArm := 0
	// idle: the socket stayed empty for parkAfter, or the connection was
	// just woken from the event loop (it parks again at once if the wake
	// brought nothing to read).
	idle := async
	// eager: the connection parks again as soon as its socket is empty
	// after a publish or an acknowledgement, rather than waiting
	// parkAfter for more: it was woken from the event loop at most
	// streamWakes times within streamWindow (a device that sends now and
	// then, or answers a few bursts). A connection woken more often (a
	// stream) waits. After the other packets (SUBSCRIBE, PINGREQ, ...)
	// every connection parks at once. Without this, a fleet answering a
	// burst, or connecting and subscribing, held a reader goroutine per
	// device for parkAfter, their stacks (grown deep in SUBSCRIBE and
	// PUBLISH) a transient peak of ~10 KB per device that stayed in the
	// process's resident memory (idle heap, which the runtime gives back
	// only after its next collection, and an idle broker runs one every
	// two minutes).
	eager := async && !c.wokenAsStream()
	for {
		// Keep-alive is rearmed when the reader is about to wait for the
		// socket, and every 64 packets of a stream that keeps the buffer
		// full, rather than for every packet.
		empty := c.br.Buffered() == 0
		if empty {
			c.flushSettles() // settle what was read before waiting
		}
		if sinceArm++; empty || sinceArm >= 64 {
			sinceArm = 0
			if c.keepalive() > 0 {
				_ = c.nc.SetReadDeadline(time.Now().Add(c.keepalive() * 3 / 2))
			}
		}
		if empty && async && c.br.rc != nil && !c.noPark.Load() {
			if idle {
				wouldBlock, err := c.br.tryFill()
				if err != nil {
					return c.readFailed(err), false
				}
				if wouldBlock && c.park() {
					return nil, true
				}
			} else {
				// Recently busy: wait in the runtime, at most parkAfter
				// (parking and waking for every packet of a busy
				// connection would cost an epoll_ctl, a goroutine and its
				// output buffers each time).
				var kaDl time.Time
				now := time.Now()
				if c.keepalive() > 0 {
					kaDl = now.Add(c.keepalive() * 3 / 2)
				}
				dl := now.Add(c.s.parkAfter)
				if !kaDl.IsZero() && kaDl.Before(dl) {
					dl = kaDl
				}
				_ = c.nc.SetReadDeadline(dl)
				if err := c.br.Wait(); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) || (!kaDl.IsZero() && !time.Now().Before(kaDl)) {
						return c.readFailed(err), false
					}
					_ = c.nc.SetReadDeadline(kaDl) // none without a keep-alive
					idle = true                    // quiet for parkAfter: park
					continue
				}
				_ = c.nc.SetReadDeadline(kaDl) // the rest of a packet waits for the keep-alive alone
			}
		}
		idle = false
		if c.br.Buffered() == 0 {
			if err := c.br.Wait(); err != nil {
				return c.readFailed(err), false
			}
		}
		if c.outFull.Load() {
			c.waitOutput()
		}
		var err error
		typ := c.br.Next() >> 4
		if !async && (typ == packets.Subscribe || typ == packets.Unsubscribe) {
			err = offStack(c.readPacket)
		} else {
			err = c.readPacket()
		}
		switch typ {
		case packets.Publish, packets.Puback, packets.Pubrec, packets.Pubrel, packets.Pubcomp:
			idle = eager
		default:
			idle = async
		}
		if err != nil {
			if errors.Is(err, errClientDisconnect) {
				return nil, false
			}
			return err, false
		}
	}
}

// wokenAsStream counts a wake from the event loop and reports whether the
// connection is woken as a stream: more than streamWakes times within
// streamWindow (the reader, or the loop in its place).
func (c *conn) wokenAsStream() bool {
	now := time.Now().UnixNano()
	if now-c.wakeWindow >= int64(c.s.streamWindow) {
		c.wakeWindow, c.wakes = now, 0
	}
	if c.wakes < 255 {
		c.wakes++
	}
	return c.wakes > streamWakes
}

// readConnect reads and handles the first packet, which must be CONNECT.
// It runs on offStack's goroutine, as readPacket does for SUBSCRIBE and
// UNSUBSCRIBE: they go deep into the core (sessions, queue declarations,
// bindings), and run on the reader they would grow its stack to several
// times what reading packets needs. The reader waits meanwhile, so only
// one goroutine at a time reads c.br.
func (c *conn) readConnect() error {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.ConnectTimeout))
	pk, err := c.readConnectPacket()
	if err != nil {
		return err
	}
	c.recvBytes.Add(uint64(pk.FixedHeader.Remaining + 2))
	if err := c.handleConnect(&pk); err != nil {
		return err
	}
	if c.keepalive() == 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	return nil
}

// readPacket reads one packet and handles it. An error stops the reader:
// errClientDisconnect after a DISCONNECT, else the read or protocol error
// (the client was told, as its version allows).
func (c *conn) readPacket() error {
	h, err := wire.ReadHeader(c.br, c.s.cfg.MaxPacketSize)
	if err != nil {
		return c.readFailed(err)
	}
	var buf []byte // ReadBody's own, unless the packet may be pooled
	sm := pooledPublish(h)
	if sm != nil {
		buf = sm.buf
	}
	pk, raw, err := wire.ReadBody(c.br, h, c.version, buf)
	if err != nil {
		return c.readFailed(err)
	}
	c.recvBytes.Add(uint64(pk.FixedHeader.Remaining + 2))
	if err := c.handle(&pk, raw, sm); err != nil {
		if !errors.Is(err, errClientDisconnect) {
			c.serverDisconnect(reasonOf(err))
		}
		return err
	}
	return nil
}

// readFailed ends the connection after a read error and returns err.
func (c *conn) readFailed(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		c.serverDisconnect(codePacketTooLarge)
	case errors.As(err, &ne) && ne.Timeout():
		c.serverDisconnect(codeKeepAliveTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
	default:
		c.serverDisconnect(reasonOf(err))
	}
	return err
}

var errClientDisconnect = errors.New("mqtt: client sent DISCONNECT")

// offStack runs fn on a goroutine of its own and waits for it (see
// readConnect): a goroutine's stack is not given back while it lives, so
// every idle connection would keep what CONNECT and SUBSCRIBE grew the
// reader's to. A goroutine per such packet costs about a microsecond; the
// reader's stack stays small.
func offStack(fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return <-done
}

// handle acts on pk; raw is the whole packet as it came (wire.ReadRaw),
// in sm's buffer if sm is not nil (pooledPublish).
func (c *conn) handle(pk *packets.Packet, raw []byte, sm *sharedMsg) error {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		return c.handlePublish(pk, raw, sm)
	case packets.Puback:
		c.handlePuback(pk.PacketID, pk.ReasonCode)
	case packets.Pubrec:
		c.handlePubrec(pk.PacketID, pk.ReasonCode)
	case packets.Pubrel:
		c.handlePubrel(pk.PacketID)
	case packets.Pubcomp:
		c.handlePubcomp(pk.PacketID)
	case packets.Subscribe:
		return c.handleSubscribe(pk) // on offStack's goroutine (readLoop)
	case packets.Unsubscribe:
		return c.handleUnsubscribe(pk)
	case packets.Pingreq:
		c.push(outItem{kind: itemPingresp})
	case packets.Disconnect:
		return c.handleDisconnect(pk)
	case packets.Auth:
		return c.handleAuth(pk)
	case packets.Connect:
		return errProto(codeProtocolError, "second CONNECT")
	default:
		return errProto(codeProtocolError, "unexpected packet type "+packets.PacketNames[pk.FixedHeader.Type])
	}
	return nil
}

func (c *conn) handleDisconnect(pk *packets.Packet) error {
	c.normalClose = true
	if c.version == 5 {
		if pk.ReasonCode == packets.CodeDisconnectWillMessage.Code {
			c.disconnectWill = true
		}
		if pk.Properties.SessionExpiryIntervalFlag {
			se := c.se
			se.mu.Lock()
			if se.expiry == 0 && pk.Properties.SessionExpiryInterval != 0 {
				se.mu.Unlock()
				return errProto(codeProtocolError, "session expiry interval set on DISCONNECT after 0 on CONNECT")
			}
			se.expiry = pk.Properties.SessionExpiryInterval
			se.persistent = se.expiry > 0
			se.mu.Unlock()
			c.expirySet = true
		}
	}
	return errClientDisconnect
}

// serverDisconnect ends the connection from the server side: MQTT 5
// clients get a DISCONNECT with code first.
func (c *conn) serverDisconnect(code byte) {
	if !c.closing.CompareAndSwap(false, true) {
		return
	}
	c.setCloseCode(code)
	c.abort.fire()
	c.wakeReader()
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if c.connected.Load() && c.version == 5 {
		c.sendPacket(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect},
			ProtocolVersion: 5, ReasonCode: code}, true)
		return
	}
	c.nc.Close()
}

// cleanup runs once the reader has stopped: it stops the writer, returns
// unacknowledged deliveries to their queues, releases or ends the session
// and sends the will message.
func (c *conn) cleanup() {
	if c.rare != nil {
		c.rare.expiry.Stop()
	}
	if c.finalQueued.Load() {
		// Let the writer send the last packet (CONNACK refusal,
		// DISCONNECT); it closes the connection after it.
		select {
		case <-c.wdone.C():
		case <-time.After(5 * time.Second):
		}
	}
	if !c.lingering.Load() {
		c.nc.Close()
	}
	c.closeLimited()
	c.consMu.Lock()
	cons := c.consumers
	c.consumers, c.consClosed = nil, true
	c.consMu.Unlock()
	for _, k := range cons {
		k.Cancel()
	}
	c.stopWriter()

	// Everything delivered but not acknowledged goes back, flagged
	// redelivered.
	back := map[*exchange.Queue][]uint64{}
	var relAcks map[*exchange.Queue][]uint64 // unwritten PUBRELs' messages
	c.ob.Mu.Lock()
	var queued []outItem
	if c.w != nil {
		queued, c.w.out = c.w.out, nil
		c.ob.Queued = 0
	}
	for i := range queued {
		switch it := &queued[i]; {
		case it.kind == itemDelivery:
			back[it.d.Queue] = append(back[it.d.Queue], it.d.Seq)
		case it.kind == itemAck && it.d.Queue != nil:
			if relAcks == nil {
				relAcks = map[*exchange.Queue][]uint64{}
			}
			relAcks[it.d.Queue] = append(relAcks[it.d.Queue], it.d.Seq)
		}
	}
	c.ob.Mu.Unlock()
	var released []uint16
	c.infMu.Lock()
	c.inflight.each(func(pid uint16, f inflight) {
		if f.released {
			released = append(released, pid)
		} else if f.q != nil {
			back[f.q] = append(back[f.q], f.seq)
		}
	})
	c.inflight = pidTable{}
	c.infMu.Unlock()
	for q, seqs := range back {
		q.Reject(seqs, true)
	}

	se := c.se
	if se == nil {
		c.settleReleased(relAcks)
		return
	}
	s := c.s
	s.mu.Lock()
	se.mu.Lock()
	if se.owner != c {
		se.mu.Unlock()
		s.mu.Unlock()
		c.settleReleased(relAcks)
		return
	}
	se.owner = nil
	se.offAt = time.Now().UnixMilli()
	se.setRelOut(released)
	end := !se.persistent
	var dropped chan struct{}
	if end {
		se.ended = true
		if s.sessions[se.key] == se {
			dropped = make(chan struct{})
			se.dropping = dropped // takeSession waits for it
		}
	}
	se.mu.Unlock()
	s.mu.Unlock()
	c.settleReleased(relAcks)

	if end {
		s.dropSession(se)
		if dropped != nil {
			s.mu.Lock()
			if s.sessions[se.key] == se {
				delete(s.sessions, se.key)
			}
			s.mu.Unlock()
			close(dropped)
		}
	} else {
		if c.expirySet || s.clustered() {
			// The record carries the new interval, for a node that
			// resumes the session or for a restart; in a cluster, that
			// no connection holds it and since when (orphan.go).
			if err := s.saveSession(se); err != nil {
				s.log.Error("store session", "client_id", c.clientID, "err", err)
			}
		}
		s.armExpiry(se)
	}
	if c.rare != nil && c.rare.will != nil && (!c.normalClose || c.disconnectWill) {
		s.scheduleWill(se, c.rare.will, end)
	}
	c.left.fire()
}

// info describes the connection for management.
func (c *conn) info() (ConnInfo, bool) {
	if !c.connected.Load() {
		return ConnInfo{}, false
	}
	c.infMu.Lock()
	inf := c.inflight.len()
	c.infMu.Unlock()
	i := ConnInfo{Name: c.connName(), ClientID: c.clientID, VHost: c.vh.Name(), Peer: c.nc.RemoteAddr().String(),
		Local: c.nc.LocalAddr().String(), Transport: c.transport(), Version: c.version, ConnectedAt: time.Unix(0, c.connectedAt),
		Keepalive: c.keepalive(), CleanStart: c.cleanStart,
		RecvPublish: c.recvPublish.Load(), SentPublish: c.sentPublish.Load(),
		RecvBytes: c.recvBytes.Load(), SentBytes: c.sentBytes.Load(),
		Subscriptions: len(c.se.subList()), Inflight: inf}
	if c.user != nil {
		i.User = c.user.Name()
	}
	return i, true
}

// splitUsername applies RabbitMQ's "vhost:user" convention.
func (s *Server) splitUsername(name string) (vhost, user string) {
	if v, u, ok := strings.Cut(name, ":"); ok && v != "" && u != "" {
		return v, u
	}
	return s.cfg.DefaultVHost, name
}

// Lingering close bounds: how long and how much a closing connection
// still reads and drops.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 1 << 20
)

// lingerClose closes nc after a final packet without destroying it: a
// close with unread input makes the kernel reset the connection, and a
// reset can discard the packet before the client reads it (a client
// still sending, such as one answering PUBRECs before it reads the
// DISCONNECT that follows them, sees only a broken socket). So the
// sending side is shut first, and once the reader has stopped (the writer
// cut its wait short) what the client still sends is read and dropped
// until it closes too, for at most lingerTime and lingerBytes.
func lingerClose(nc net.Conn, readDone <-chan struct{}) {
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		nc.Close()
		return
	}
	select {
	case <-readDone:
	case <-time.After(lingerTime):
		nc.Close()
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, nc, lingerBytes)
	nc.Close()
}
