package mqtt

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"github.com/trident-broker/trident/exchange"
	"github.com/trident-broker/trident/exchange/event"
	"github.com/trident-broker/trident/protocol/frontend"
)

// A connection's life in the log (every line has the server's proto=mqtt):
//
//	INFO  "connection accepted"       peer, transport, client_id, version   (a valid CONNECT)
//	INFO  "connection authenticated"  + user, vhost
//	WARN  "connection refused"        CONNECT refused after it was read: code (CONNACK's, MQTT 5 numbering), err
//	WARN  "authorization denied"      user, vhost, client_id, op, perm, kind, resource, routing_key
//	INFO  "connection closed"         reason, code, err, duration
//
// A refused password or token is logged once, by auth ("authentication
// failed"); the front end does not repeat it.

// who returns the attributes naming the connection's user and client.
// Reader goroutine (CONNECT is handled while the reader waits).
func (c *conn) who() []any {
	user, vhost := "", ""
	if c.user != nil {
		user = c.user.Name()
	} else if c.rare != nil {
		user = c.rare.loginName
	}
	if c.vh != nil {
		vhost = c.vh.Name()
	}
	return []any{"user", user, "vhost", vhost, "client_id", c.clientID, "peer", c.peer(), "transport", c.transport()}
}

func (c *conn) peer() string {
	if a := c.nc.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// setCloseCode records the reason code the broker disconnects with; the
// first one wins (serverDisconnect, any goroutine).
func (c *conn) setCloseCode(code byte) { c.closeCode.CompareAndSwap(0, uint32(code)|0x100) }

// disconnectReason names a reason code the broker disconnects with.
func disconnectReason(code byte) string {
	switch code {
	case codeServerShuttingDown:
		return "server shutting down"
	case codeSessionTakenOver:
		return "session taken over by another connection"
	case codeKeepAliveTimeout:
		return "keep-alive timeout"
	case codeAdministrativeAction:
		return "closed by an administrator"
	case codeMaximumConnectTime:
		return "credential expired"
	case codePacketTooLarge:
		return "packet too large"
	case codeNotAuthorized:
		return "not authorized"
	}
	return "protocol error"
}

// logEnd is the connection's last line: "connection closed" for one that
// was connected, "connection refused" for a CONNECT that was not.
func (c *conn) logEnd(err error) {
	if !c.accepted {
		return // not MQTT, or nothing came: not logged, as RabbitMQ
	}
	if !c.connected.Load() {
		if c.refusalLogged || err == nil {
			return
		}
		code := c.refusedCode
		if code == 0 {
			code = reasonOf(err)
		}
		c.s.log.Warn("connection refused", append(c.who(), "code", hexCode(code), "err", err)...)
		return
	}
	attrs := c.who()
	code := c.closeCode.Load()
	var reason string
	switch {
	case code != 0:
		reason = "disconnected by the broker: " + disconnectReason(byte(code))
		attrs = append(attrs, "reason", reason, "code", hexCode(byte(code)))
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			attrs = append(attrs, "err", err)
		}
	case err == nil:
		reason = "client disconnected"
		attrs = append(attrs, "reason", reason)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		reason = "client closed TCP connection"
		attrs = append(attrs, "reason", reason)
	default:
		reason = "error"
		attrs = append(attrs, "reason", reason, "err", err)
	}
	attrs = append(attrs, "duration", time.Duration(time.Now().UnixNano()-c.connectedAt).Round(time.Millisecond))
	c.s.log.Info("connection closed", attrs...)
	c.connEvent(false, reason)
}

// connEvent reports connection.created (created) or connection.closed
// with reason to the core's event bus (exchange/event).
func (c *conn) connEvent(created bool, reason string) {
	if created { // churn metrics (exchange/churn.go)
		c.s.b.Churn().ConnectionOpened(exchange.ProtoMQTT)
	} else {
		c.s.b.Churn().ConnectionClosed(exchange.ProtoMQTT)
	}
	if created {
		c.s.sys.connects.Add(1) // $SYS/broker/load/connections (sys.go)
	}
	ev := c.s.b.Events()
	if !ev.On() || c.vh == nil {
		return
	}
	proto := "MQTT 3.1.1"
	switch c.version {
	case 3:
		proto = "MQTT 3.1"
	case 5:
		proto = "MQTT 5.0"
	}
	_, tls := c.nc.(interface{ ConnectionState() tls.ConnectionState })
	e := &event.Conn{Name: c.connName(), Protocol: proto, VHost: c.vh.Name(), Peer: c.peer(), Local: c.nc.LocalAddr().String(),
		SSL: tls, AuthMechanism: c.authMethod(), ClientProperties: map[string]any{"client_id": c.clientID},
		UserProvidedName: c.clientID, ConnectedAt: time.Unix(0, c.connectedAt)}
	if c.user != nil {
		e.User = c.user.Name()
	}
	if created {
		ev.ConnectionCreated(e)
	} else {
		ev.ConnectionClosed(e, reason)
	}
}

// hexCode writes an MQTT reason code as the specification does ("0x87").
func hexCode(code byte) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{'0', 'x', digits[code>>4], digits[code&15]})
}

// logDenied logs an authorization refusal of op ("subscribe", "publish",
// "will") on topic; auth has put it in the audit log.
func (c *conn) logDenied(op, topic string, err error) {
	c.s.log.Warn("authorization denied", append(append(c.who(), "op", op, "topic", topic), frontend.DeniedAttrs(err)...)...)
}
