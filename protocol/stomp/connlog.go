package stomp

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/event"
	"github.com/trident-broker/trident/protocol/frontend"
	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// A connection's life in the log (every line has the server's proto=stomp
// and the connection's conn="peer -> local"):
//
//	INFO  "connection accepted"       peer, transport, version, host   (a CONNECT or STOMP frame)
//	INFO  "connection authenticated"  + user, vhost, login
//	WARN  "connection refused"        a CONNECT refused after login: message, detail
//	WARN  "authorization denied"      user, vhost, op, destination, perm, kind, resource, routing_key
//	WARN  "STOMP error frame sent"    any other ERROR frame: message, detail
//	INFO  "connection closed"         reason, duration
//
// A refused password or token is logged once, by auth ("authentication
// failed"); the front end does not repeat it.

// logState is what the log needs beyond the session (reader goroutine,
// except hbTimeout).
type logState struct {
	accepted      bool   // a CONNECT frame was read
	refusalLogged bool   // the CONNECT's refusal is logged (by auth)
	loginName     string // the CONNECT's login
	host          string // the CONNECT's host header
	errSent       *Error // the ERROR frame the reader sent
	hbTimeout     atomic.Bool
}

func (c *conn) transportName() string {
	if c.t.web() {
		return "websocket"
	}
	return "tcp"
}

// who returns the attributes naming the connection's user and client.
func (c *conn) who() []any {
	user, vhost := c.lg.loginName, c.lg.host
	if c.user != nil {
		user = c.user.Name()
	}
	if c.vh != nil {
		vhost = c.vh.Name()
	}
	return []any{"user", user, "vhost", vhost, "peer", c.t.remote(), "transport", c.transportName()}
}

func (c *conn) logAccepted(f *frame.Frame) {
	c.lg.accepted = true
	c.lg.host = f.Value("host")
	c.lg.loginName = f.Value("login")
	c.log.Info("connection accepted", "peer", c.t.remote(), "transport", c.transportName(), "host", c.lg.host,
		"accept_version", f.Value("accept-version"))
}

func (c *conn) logAuthenticated() {
	c.log.Info("connection authenticated", append(c.who(), "login", c.lg.loginName, "version", c.version.String())...)
	c.connEvent(true, "")
}

// connEvent reports connection.created (created) or connection.closed
// with reason to the core's event bus (exchange/event).
func (c *conn) connEvent(created bool, reason string) {
	if created { // churn metrics (exchange/churn.go)
		c.s.b.Churn().ConnectionOpened(exchange.ProtoSTOMP)
	} else {
		c.s.b.Churn().ConnectionClosed(exchange.ProtoSTOMP)
	}
	ev := c.s.b.Events()
	if !ev.On() || c.vh == nil {
		return
	}
	ssl := false
	if t, ok := c.t.(*tcpTransport); ok {
		_, ssl = t.nc.(*tls.Conn)
	} else if w, ok := c.t.(*wsTransport); ok {
		ssl = w.tls != nil
	}
	e := &event.Conn{Name: c.name, Protocol: "STOMP " + c.version.String(), VHost: c.vh.Name(), Peer: c.t.remote(),
		Local: c.t.local(), SSL: ssl, AuthMechanism: "PLAIN", ClientProperties: map[string]any{"login": c.lg.loginName},
		ConnectedAt: c.connectedAt}
	if c.user != nil {
		e.User = c.user.Name()
	}
	if created {
		ev.ConnectionCreated(e)
	} else {
		ev.ConnectionClosed(e, reason)
	}
}

// logError logs the ERROR frame e, sent because of err, once: a denial as
// "authorization denied", a refused CONNECT as "connection refused"
// (unless auth has logged it), anything else as an error frame.
func (c *conn) logError(e *Error, err error, f *frame.Frame) {
	c.lg.errSent = e
	var ae *auth.AccessError
	switch {
	case !c.opened.Load():
		if c.lg.accepted && !c.lg.refusalLogged {
			c.log.Warn("connection refused", append(c.who(), "message", e.Message, "detail", e.Detail)...)
		}
	case errors.As(err, &ae) && f != nil:
		c.log.Warn("authorization denied", append(append(c.who(), "op", f.Command, "destination", f.Value("destination")),
			frontend.DeniedAttrs(err)...)...)
	default:
		c.log.Warn("STOMP error frame sent", append(c.who(), "message", e.Message, "detail", e.Detail)...)
	}
}

// logClosed is the last line of an opened connection.
func (c *conn) logClosed(err error) {
	var reason string
	switch r := c.forced.Load(); {
	case r != nil:
		reason = "closed by the broker: " + *r
	case c.lg.errSent != nil:
		reason = "error frame sent: " + c.lg.errSent.Message
	case c.lg.hbTimeout.Load():
		reason = "missed heart-beats from client"
	case errors.Is(err, errDisconnect):
		reason = "client disconnected"
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		reason = "client closed TCP connection"
	default:
		reason = "error: " + err.Error()
	}
	c.log.Info("connection closed", append(c.who(), "reason", reason, "duration", time.Since(c.connectedAt).Round(time.Millisecond))...)
	c.connEvent(false, reason)
}
