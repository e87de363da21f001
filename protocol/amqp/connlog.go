package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/event"
	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// A connection's life in the log, with the facts RabbitMQ's lines carry
// (connection, user, vhost, client-provided name); every line has the
// server's proto=amqp and the connection's conn="peer -> local":
//
//	INFO  "connection accepted"       peer, tls    (after a valid protocol header)
//	INFO  "connection authenticated"  + user, vhost, client, mechanism
//	WARN  "connection refused"        a handshake error (vhost, limits, bad SASL), with its code
//	WARN  "channel error"             channel, code, text, method
//	WARN  "connection error"          code, text, method; ERROR when the broker is at fault (540, 541)
//	INFO  "connection closed"         reason, code, text, duration
//
// A failed login is logged once, by auth ("authentication failed"), for
// every protocol and the HTTP API; the front end logs only what auth does
// not see (a certificate login's name, a malformed SASL response).

// Close reasons (the "reason" attribute of "connection closed").
const (
	reasonClientClosed = "client closed"                 // connection.close from the client
	reasonClientTCP    = "client closed TCP connection"  // without connection.close
	reasonConnError    = "connection error"              // the broker closed it with a hard error
	reasonForced       = "closed by the broker"          // 320: shutdown, management, expired credential
	reasonHeartbeat    = "missed heartbeats from client" // 2 × heartbeat without a frame
	reasonReadError    = "transport error"               // a read failed otherwise
	reasonClientError  = "client closed with an error"   // connection.close with a code other than 200
	clientNameProperty = "connection_name"
)

// closeCause is why a connection ended; the first one recorded wins.
type closeCause struct {
	reason string
	code   uint16
	text   string
}

func (c *conn) setCause(reason string, code uint16, text string) {
	c.cause.CompareAndSwap(nil, &closeCause{reason: reason, code: code, text: text})
}

// isTLS reports whether the connection came in on a TLS listener.
func (c *conn) isTLS() bool {
	_, ok := c.nc.(*tls.Conn)
	return ok
}

func (c *conn) peer() string {
	if a := c.nc.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// clientName is the client-provided connection name, "" if none.
func (c *conn) clientName() string {
	s, _ := c.clientProps[clientNameProperty].(string)
	return s
}

// who returns the attributes naming the connection's user and client.
func (c *conn) who() []any {
	var user, vhost string
	if c.user != nil {
		user = c.user.Name()
	}
	if c.vh != nil {
		vhost = c.vh.Name()
	} else {
		vhost = c.wantVHost
	}
	return []any{"tls", c.isTLS(), "user", user, "vhost", vhost, "peer", c.peer(), "client", c.clientName()}
}

// logAuthenticated is the line of a connection that has opened its vhost.
func (c *conn) logAuthenticated() {
	c.log.Info("connection authenticated", append(c.who(), "mechanism", c.mechanism)...)
	c.s.b.Churn().ConnectionOpened(exchange.ProtoAMQP)
	if ev := c.s.b.Events(); ev.On() {
		ev.ConnectionCreated(c.eventConn())
	}
}

// eventConn describes the connection for its events (exchange/event).
func (c *conn) eventConn() *event.Conn {
	e := &event.Conn{Name: c.name, Protocol: "AMQP 0-9-1", VHost: c.vh.Name(), Peer: c.peer(), Local: c.nc.LocalAddr().String(),
		SSL: c.isTLS(), AuthMechanism: c.mechanism, ClientProperties: c.clientProps, UserProvidedName: c.clientName(),
		ConnectedAt: c.connectedAt}
	if c.user != nil {
		e.User = c.user.Name()
	}
	return e
}

// logRefused logs a handshake that failed after the protocol header:
// once, and not at all for a refused password (auth logs it).
func (c *conn) logRefused(err error) {
	if err == nil || c.authLogged {
		return
	}
	attrs := c.who()
	var we *wire.Error
	if errors.As(err, &we) {
		c.log.Warn("connection refused", append(attrs, "code", we.Code, "text", we.Text)...)
		return
	}
	reason := reasonReadError
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) {
		reason = reasonClientTCP
	}
	c.log.Info("connection closed", append(attrs, "reason", reason+" during handshake", "err", err,
		"duration", time.Since(c.connectedAt).Round(time.Millisecond))...)
}

// logClosed is the last line of an opened connection.
func (c *conn) logClosed(err error) {
	cause := c.cause.Load()
	if cause == nil {
		switch {
		case err == nil, errors.Is(err, errClosed):
			cause = &closeCause{reason: reasonClientClosed}
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF):
			cause = &closeCause{reason: reasonClientTCP}
		default:
			cause = &closeCause{reason: reasonReadError, text: err.Error()}
		}
	}
	attrs := append(c.who(), "reason", cause.reason)
	if cause.code != 0 {
		attrs = append(attrs, "code", cause.code)
	}
	if cause.text != "" {
		attrs = append(attrs, "text", cause.text)
	}
	attrs = append(attrs, "duration", time.Since(c.connectedAt).Round(time.Millisecond))
	c.log.Info("connection closed", attrs...)
	c.s.b.Churn().ConnectionClosed(exchange.ProtoAMQP)
	if ev := c.s.b.Events(); ev.On() {
		ev.ConnectionClosed(c.eventConn(), cause.reason)
	}
}

// logConnectionError logs a hard error the broker closes the connection
// with: ERROR when the broker is at fault, WARN when the client is.
func (c *conn) logConnectionError(we *wire.Error) {
	level := slog.LevelWarn
	if we.Code == wire.InternalError || we.Code == wire.NotImplemented {
		level = slog.LevelError
	}
	c.log.Log(context.Background(), level, "connection error", append(c.who(), "code", we.Code, "text", we.Text, "method", wire.MethodName(we.ClassID, we.MethodID))...)
}

// logChannelError logs a soft error the broker closes a channel with.
func (c *conn) logChannelError(ch uint16, we *wire.Error) {
	c.log.Warn("channel error", append(c.who(), "channel", ch, "code", we.Code, "text", we.Text, "method", wire.MethodName(we.ClassID, we.MethodID))...)
}

// channelEvent reports channel.created or channel.closed of channel id.
func (c *conn) channelEvent(name string, id uint16) {
	c.s.b.Churn().Channel(name == event.ChannelCreated)
	if ev := c.s.b.Events(); ev.On() && c.vh != nil {
		user := ""
		if c.user != nil {
			user = c.user.Name()
		}
		ev.Channel(name, c.name, int64(id), user, c.vh.Name())
	}
}
