package amqp

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/protocol/amqp/wire"
)

func (c *conn) serverProperties() wire.Table {
	return wire.Table{
		"product":      c.s.cfg.Product,
		"version":      version,
		"platform":     "Go",
		"cluster_name": c.s.cfg.ClusterName,
		"copyright":    "Trident authors",
		"information":  "Trident, a multi-protocol message broker",
		"capabilities": wire.Table{
			"publisher_confirms":           true,
			"exchange_exchange_bindings":   true,
			"basic.nack":                   true,
			"consumer_cancel_notify":       true,
			"connection.blocked":           true,
			"consumer_priorities":          true,
			"authentication_failure_close": true,
			"per_consumer_qos":             true,
			"direct_reply_to":              true,
		},
	}
}

// readMethod reads the next frame during the handshake and decodes it as a
// method on channel 0, skipping heartbeats.
func (c *conn) readMethod() (wire.Method, error) {
	for {
		f, err := wire.ReadFrame(c.r, c.frameMax, nil)
		if err != nil {
			return nil, err
		}
		switch f.Type {
		case wire.FrameHeartbeat:
			continue
		case wire.FrameMethod:
			if f.Channel != 0 {
				return nil, wire.NewConnectionError(wire.ChannelError, "expected 'connection' class frames on channel 0")
			}
			return wire.DecodeMethod(f.Payload)
		default:
			return nil, wire.NewConnectionError(wire.UnexpectedFrame, "expected method frame, got frame type %d", f.Type)
		}
	}
}

func (c *conn) handshake() error {
	cfg := &c.s.cfg
	_ = c.nc.SetDeadline(time.Now().Add(cfg.HandshakeTimeout))
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(c.r, hdr); err != nil {
		return err
	}
	if err := wire.CheckProtocolHeader(hdr); err != nil {
		c.nc.Write([]byte(wire.ProtocolHeader))
		return err
	}
	// As RabbitMQ, a connection is logged once it has sent a valid
	// protocol header: a TCP probe that sends nothing is not.
	c.accepted = true
	c.log.Info("connection accepted", "peer", c.peer(), "tls", c.isTLS())
	c.send(0, &wire.ConnectionStart{VersionMajor: 0, VersionMinor: 9, ServerProperties: c.serverProperties(),
		Mechanisms: c.mechanisms(), Locales: "en_US"})
	m, err := c.readMethod()
	if err != nil {
		return c.handshakeError(err)
	}
	so, ok := m.(*wire.ConnectionStartOK)
	if !ok {
		return c.handshakeError(wire.NewConnectionError(wire.CommandInvalid, "expected connection.start-ok, got %s", m.Name()))
	}
	c.clientProps = so.ClientProperties
	c.mechanism = so.Mechanism
	if caps, ok := so.ClientProperties["capabilities"].(wire.Table); ok {
		c.capCancel, _ = caps["consumer_cancel_notify"].(bool)
		c.capBlocked, _ = caps["connection.blocked"].(bool)
	}
	var (
		user string
		u    *auth.User
		aerr error
	)
	c.authLogged = true // Authenticate logs its failures
	if c.preauth != nil {
		user, u = c.preauth.Name(), c.preauth // see local.go
	} else if so.Mechanism == mechExternal {
		c.authLogged = false
		user, u, aerr = c.externalLogin() // see external.go
	} else {
		var pass string
		user, pass, err = saslCredentials(so.Mechanism, so.Response)
		if err != nil {
			c.authLogged = false // logged as refused, with its code
			return c.handshakeError(err)
		}
		u, aerr = c.s.users.Authenticate(user, pass, c.nc.RemoteAddr())
	}
	if aerr != nil {
		if !c.authLogged {
			c.log.Warn("authentication failed", "user", user, "peer", c.peer(), "mechanism", so.Mechanism, "err", aerr)
			c.authLogged = true
		}
		text := fmt.Sprintf("Login was refused using authentication mechanism %s. For details see the broker logfile.", so.Mechanism)
		if errors.Is(aerr, auth.ErrLoopbackOnly) {
			text = fmt.Sprintf("User '%s' can only connect via localhost", user)
		}
		return c.handshakeError(wire.NewConnectionError(wire.AccessRefused, "%s", text))
	}
	c.user = u
	c.authLogged = false
	hb := uint16(cfg.Heartbeat / time.Second)
	chMax := cfg.ChannelMax
	c.send(0, &wire.ConnectionTune{ChannelMax: chMax, FrameMax: cfg.FrameMax, Heartbeat: hb})
	m, err = c.readMethod()
	if err != nil {
		return c.handshakeError(err)
	}
	to, ok := m.(*wire.ConnectionTuneOK)
	if !ok {
		return c.handshakeError(wire.NewConnectionError(wire.CommandInvalid, "expected connection.tune-ok, got %s", m.Name()))
	}
	c.channelMax = chMax
	if to.ChannelMax != 0 && (c.channelMax == 0 || to.ChannelMax < c.channelMax) {
		c.channelMax = to.ChannelMax
	}
	switch {
	case to.FrameMax == 0:
		c.frameMax = cfg.FrameMax
	case to.FrameMax < wire.FrameMinSize:
		return c.handshakeError(wire.NewConnectionError(wire.NotAllowed, "frame_max=%d < %d min size", to.FrameMax, wire.FrameMinSize))
	case to.FrameMax > cfg.FrameMax:
		return c.handshakeError(wire.NewConnectionError(wire.NotAllowed, "frame_max=%d > %d max size", to.FrameMax, cfg.FrameMax))
	default:
		c.frameMax = to.FrameMax
	}
	c.heartbeat = time.Duration(to.Heartbeat) * time.Second
	m, err = c.readMethod()
	if err != nil {
		return c.handshakeError(err)
	}
	op, ok := m.(*wire.ConnectionOpen)
	if !ok {
		return c.handshakeError(wire.NewConnectionError(wire.CommandInvalid, "expected connection.open, got %s", m.Name()))
	}
	c.wantVHost = op.VirtualHost
	vh, ok := c.s.b.VHost(op.VirtualHost)
	if !ok {
		return c.handshakeError(wire.NewConnectionError(wire.NotAllowed, "vhost %s not found", op.VirtualHost))
	}
	if err := c.s.users.CheckVHost(u, op.VirtualHost); err != nil {
		return c.handshakeError(wire.NewConnectionError(wire.NotAllowed, "%s", err.Error()))
	}
	if err := c.openLimited(u.Name(), op.VirtualHost); err != nil {
		return c.handshakeError(err)
	}
	c.vh = vh
	c.opened.Store(true)
	c.lastRead.Store(time.Now().UnixNano())
	_ = c.nc.SetDeadline(time.Time{})
	c.send(0, &wire.ConnectionOpenOK{})
	return nil
}

// handshakeError sends connection.close for a protocol error during the
// handshake and waits briefly for the client to read it.
func (c *conn) handshakeError(err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		c.send(0, &wire.ConnectionClose{ReplyCode: we.Code, ReplyText: we.Text, ReplyClassID: we.ClassID, ReplyMethodID: we.MethodID})
		c.stopWriter()
		c.waitCloseOK()
	}
	return err
}

// waitCloseOK reads and drops frames until connection.close-ok or a timeout.
func (c *conn) waitCloseOK() {
	_ = c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		f, err := wire.ReadFrame(c.r, c.frameMax, nil)
		if err != nil {
			return
		}
		if f.Type == wire.FrameMethod && f.Channel == 0 {
			if m, err := wire.DecodeMethod(f.Payload); err == nil {
				switch m.(type) {
				case *wire.ConnectionCloseOK:
					return
				case *wire.ConnectionClose:
					c.send(0, &wire.ConnectionCloseOK{})
					return
				}
			}
		}
	}
}

func saslCredentials(mech, resp string) (user, pass string, err error) {
	switch mech {
	case "PLAIN":
		parts := strings.SplitN(resp, "\x00", 3)
		if len(parts) != 3 {
			return "", "", wire.NewConnectionError(wire.AccessRefused, "Login was refused using authentication mechanism PLAIN. For details see the broker logfile.")
		}
		return parts[1], parts[2], nil
	case "AMQPLAIN":
		// A field table without its length prefix.
		b := make([]byte, 4+len(resp))
		b[0], b[1], b[2], b[3] = byte(len(resp)>>24), byte(len(resp)>>16), byte(len(resp)>>8), byte(len(resp))
		copy(b[4:], resp)
		t, terr := wire.DecodeTable(b)
		if terr != nil {
			return "", "", wire.NewConnectionError(wire.AccessRefused, "Login was refused using authentication mechanism AMQPLAIN. For details see the broker logfile.")
		}
		user, _ = t["LOGIN"].(string)
		pass, _ = t["PASSWORD"].(string)
		return user, pass, nil
	}
	return "", "", wire.NewConnectionError(wire.AccessRefused, "unsupported authentication mechanism '%s'", mech)
}
