package mqtt

import (
	"os"
	"time"
)

// An idle connection holds no goroutine. On a plain TCP connection
// (frontend.AsyncConn), once CONNECT is handled, the reader reads what
// the socket has without waiting (connReader.tryFill); when it finds the
// socket empty it registers the descriptor with the server's poller and
// its goroutine returns (park). Input, a hang-up, the keep-alive running
// out or a close from the server side (wakeReader) starts a new goroutine
// that reads on (readOn); PINGREQs alone the event loop answers without
// one (pingfast_linux.go). A packet that arrives in pieces is still waited
// for in the runtime, as is everything on TLS and WebSocket connections,
// which keep their reader goroutine.
//
// Who reads: exactly one goroutine at a time. The parker publishes its
// writes to the connection by setting parked; whoever clears it (the
// poller's event, the keep-alive timer, wakeReader) is the next reader.

// parkAfter is how long a connection's socket stays empty before it
// parks: a busy connection keeps its reader goroutine.
const parkAfter = 2 * time.Second

// A connection woken from the event loop more than streamWakes times
// within streamWindow is a stream: after a publish or an acknowledgement
// its reader waits parkAfter for more before it parks; any other parks as
// soon as its socket is empty (packetLoop's eager).
const (
	streamWakes  = 4
	streamWindow = parkAfter
)

// readOn reads on after a wake; timedOut: the keep-alive ran out.
func (c *conn) readOn(timedOut bool) {
	if c.br == nil {
		c.br = newConnReader(c.nc) // park gave its reader back
		c.s.parkedReaders.Add(1)
	}
	if timedOut {
		c.finish(c.readFailed(os.ErrDeadlineExceeded))
		return
	}
	err, parked := c.packetLoop(true)
	if !parked {
		c.finish(err)
	}
}

// finish ends the connection once its reader has stopped.
func (c *conn) finish(err error) {
	c.end(err)
	if c.pollID != 0 {
		c.s.poller().forget(c.pollID)
	}
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	if c.ended != nil {
		c.ended(c)
	}
}

// park hands the connection to the event loop; false if it cannot (no
// event loop, or the connection is closing), and the reader goes on
// waiting in the runtime.
func (c *conn) park() bool {
	if c.br.rc == nil || !c.connected.Load() {
		return false
	}
	p := c.s.poller()
	if p == nil {
		return false
	}
	if c.pollID == 0 {
		c.pollID = p.add(c)
	}
	c.dropIdleState()
	c.armKeepAlive(time.Now())
	// The reader goes back to the pool before the connection is parked:
	// the next reader takes one of its own (readOn).
	br := c.br
	rc := br.rc
	br.putBack()
	c.br = nil
	c.parked.Store(true)
	// wakeReader sets noPark before it looks at parked: either it sees
	// parked and takes the connection, or this sees noPark.
	if c.noPark.Load() && c.parked.CompareAndSwap(true, false) {
		c.br = newConnReader(c.nc)
		return false
	}
	if err := p.arm(c, rc); err != nil && c.parked.CompareAndSwap(true, false) {
		c.br = newConnReader(c.nc)
		return false // closed meanwhile: the reader sees it
	}
	// The output's state goes once parked is set: a writer that ends
	// meanwhile sees it set and gives the state back itself, or has ended
	// (its state is idle) by the time this looks (dropIdleOutput only
	// takes ob.Mu: another reader may have c already).
	c.dropIdleOutput()
	// A burst that woke a fleet ends in as many parks: its garbage, and
	// the stacks of the goroutines that served it, are given back once
	// the parking has been quiet for a while (giveback.go). c is not
	// touched here: another reader may have it already.
	s := c.s
	s.giveBack.noteParked()
	return true
}

// armKeepAlive starts the keep-alive of a connection about to park: if
// nothing comes within 1.5 times the keep-alive, keepAliveRanOut ends it.
// The reader, or the event loop in its place (pingfast_linux.go).
func (c *conn) armKeepAlive(now time.Time) {
	if c.keepalive() <= 0 {
		return
	}
	d := c.keepalive() * 3 / 2
	c.kaDue.Store(now.Add(d).UnixNano())
	if c.kaTimer == nil {
		c.kaTimer = time.AfterFunc(d, c.keepAliveRanOut)
	} else {
		c.kaTimer.Reset(d)
	}
}

// wake starts a reader for a parked connection.
func (c *conn) wake() {
	if c.parked.CompareAndSwap(true, false) {
		c.s.run.start(c, runRead)
	}
}

// wakeReader makes the reader see that the connection is closing: a
// parked one is woken, and none parks again.
func (c *conn) wakeReader() {
	c.noPark.Store(true)
	c.wake()
}

// keepAliveRanOut runs when a parked connection's keep-alive timer fires.
func (c *conn) keepAliveRanOut() {
	if time.Now().UnixNano() < c.kaDue.Load() {
		return // rearmed meanwhile
	}
	if c.parked.CompareAndSwap(true, false) {
		c.readOn(true)
	}
}
