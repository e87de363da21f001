package stream

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange/event"
	"github.com/trident-broker/trident/protocol/frontend"
)

// A connection's life in the log (every line has proto=stream and the
// connection's conn="peer -> local"):
//
//	INFO  "connection accepted"       peer, tls                (peer properties read)
//	INFO  "connection authenticated"  user, vhost, login        (Open succeeded)
//	WARN  "connection refused"        SASL or Open refused: reason
//	WARN  "authorization denied"      user, vhost, op, stream, perm, kind, resource
//	WARN  "stream protocol error, closing"  code, reason        (frame too large, unknown frame)
//	INFO  "connection closed"         reason, duration
//
// A refused password or token is logged once, by auth.

type logState struct {
	accepted      bool
	refusalLogged bool
	login, vhost  string
	errSent       string // the reason of the Close the server sent
	clientClose   string // the reason of the client's Close
	hbTimeout     atomic.Bool
}

func (c *conn) who() []any {
	user, vhost := c.lg.login, c.lg.vhost
	if c.user != nil {
		user = c.user.Name()
	}
	return []any{"user", user, "vhost", vhost, "peer", c.nc.RemoteAddr().String()}
}

func (c *conn) logOpened() {
	c.log.Info("connection authenticated", append(c.who(), "login", c.lg.login)...)
	c.connEvent(true, "")
}

func (c *conn) denied(op, stream string, err error) {
	c.log.Warn("authorization denied", append(append(c.who(), "op", op, "stream", stream), frontend.DeniedAttrs(err)...)...)
}

func isAccessError(err error) bool {
	var ae *auth.AccessError
	return errors.As(err, &ae)
}

func (c *conn) connEvent(created bool, reason string) {
	ev := c.s.b.Events()
	if !ev.On() || c.vh == nil {
		return
	}
	props := map[string]any{}
	for _, kv := range c.peerProps {
		props[kv.Key] = kv.Value
	}
	e := &event.Conn{Name: c.name, Protocol: "stream", VHost: c.vh.Name(), Peer: c.nc.RemoteAddr().String(),
		Local: c.nc.LocalAddr().String(), SSL: c.isTLS(), AuthMechanism: "PLAIN", ClientProperties: props,
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

func (c *conn) logClosed(err error) {
	var reason string
	switch r := c.forced.Load(); {
	case r != nil:
		reason = "closed by the broker: " + *r
	case c.lg.errSent != "":
		reason = "close sent: " + c.lg.errSent
	case c.lg.hbTimeout.Load():
		reason = "missed heartbeats from client"
	case c.closing:
		reason = "client closed the connection: " + c.lg.clientClose
	case isEOF(err):
		reason = "client closed TCP connection"
	default:
		reason = "error: " + err.Error()
	}
	c.log.Info("connection closed", append(c.who(), "reason", reason, "duration", time.Since(c.connectedAt).Round(time.Millisecond))...)
	c.connEvent(false, reason)
}
