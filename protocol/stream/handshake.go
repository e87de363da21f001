package stream

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/protocol/stream/wire"
)

// The handshake: PeerProperties, SaslHandshake, SaslAuthenticate (the
// server then sends Tune), Tune back, Open. Until Open succeeds every frame
// is bounded by InitialFrameMax (readLoop) and only these frames, Close
// and Heartbeat are accepted.

const (
	mechPlain    = "PLAIN"
	mechExternal = "EXTERNAL"
)

func (c *conn) handshake(f wire.Frame) error {
	switch f := f.(type) {
	case wire.PeerProperties:
		c.peerProps = f.Props
		c.lg.accepted = true
		c.log.Info("connection accepted", "peer", c.nc.RemoteAddr().String(), "tls", c.isTLS())
		props := []wire.KV{{Key: "product", Value: c.s.cfg.Product}, {Key: "version", Value: c.s.cfg.Version},
			{Key: "platform", Value: "Go"}, {Key: "information", Value: "Trident, the RabbitMQ stream protocol"}}
		c.write(func(b []byte) []byte { return wire.AppendPeerPropertiesResponse(b, f.Corr, wire.OK, props) })
		return nil
	case wire.SaslHandshake:
		c.mechs = []string{mechPlain}
		if c.certUser() != "" {
			c.mechs = append(c.mechs, mechExternal)
		}
		c.write(func(b []byte) []byte { return wire.AppendSaslHandshakeResponse(b, f.Corr, wire.OK, c.mechs) })
		return nil
	case wire.SaslAuthenticate:
		return c.authenticate(f)
	case wire.Tune:
		if c.user == nil {
			break
		}
		c.tune(f)
		return nil
	case wire.Open:
		if c.user == nil || !c.tuned {
			break
		}
		return c.open(f)
	case wire.Heartbeat:
		return nil
	case wire.Close:
		c.respond(wire.KeyClose, f.Corr, wire.OK)
		c.closing = true
		return nil
	}
	c.protocolError(wire.UnknownFrame, "unknown frame", fmt.Errorf("%T before open", f))
	return errClosed
}

// refuse answers SASL authenticate with code and ends the connection, as
// RabbitMQ does.
func (c *conn) refuse(corr uint32, code wire.Code, why string) error {
	c.respond(wire.KeySaslAuthenticate, corr, code)
	c.closing = true
	if !c.lg.refusalLogged {
		c.log.Warn("connection refused", append(c.who(), "reason", why)...)
	}
	return nil
}

func (c *conn) authenticate(f wire.SaslAuthenticate) error {
	if c.user != nil {
		c.protocolError(wire.UnknownFrame, "unknown frame", errors.New("authenticated twice"))
		return errClosed
	}
	var u *auth.User
	var err error
	switch f.Mechanism {
	case mechPlain:
		// [authzid] NUL authcid NUL passwd
		parts := bytes.SplitN(f.Data, []byte{0}, 3)
		if len(parts) != 3 {
			return c.refuse(f.Corr, wire.SaslError, "malformed PLAIN response")
		}
		c.lg.login = string(parts[1])
		u, err = c.s.users.Authenticate(string(parts[1]), string(parts[2]), c.nc.RemoteAddr())
		c.lg.refusalLogged = true // auth logs a refused password or token
	case mechExternal:
		name := c.certUser()
		if name == "" {
			return c.refuse(f.Corr, wire.SaslMechanismNotSupported, "EXTERNAL without a verified client certificate")
		}
		c.lg.login = name
		u, err = c.s.users.AuthenticateCert(name, c.nc.RemoteAddr())
	default:
		return c.refuse(f.Corr, wire.SaslMechanismNotSupported, "mechanism "+strconv.Quote(f.Mechanism))
	}
	if err != nil {
		if errors.Is(err, auth.ErrLoopbackOnly) {
			return c.refuse(f.Corr, wire.AuthenticationLoopback, "user can only connect via localhost")
		}
		return c.refuse(f.Corr, wire.AuthenticationFailure, err.Error())
	}
	c.user = u
	c.actor = auth.Actor{Users: c.s.users, User: u}
	hb := uint32(c.s.cfg.Heartbeat / time.Second)
	c.write(func(b []byte) []byte {
		b = wire.AppendResponse(b, wire.KeySaslAuthenticate, f.Corr, wire.OK)
		return wire.AppendTune(b, c.s.cfg.FrameMax, hb)
	})
	return nil
}

// tune takes the client's settings: a frame max and heartbeat of its own
// choosing, no more than the server's (0 means no limit on either side).
func (c *conn) tune(f wire.Tune) {
	c.frameMax = c.s.cfg.FrameMax
	if f.FrameMax != 0 && f.FrameMax < c.frameMax {
		c.frameMax = max(f.FrameMax, 1024)
	}
	c.heartbeat = time.Duration(f.Heartbeat) * time.Second
	c.tuned = true
}

func (c *conn) open(f wire.Open) error {
	c.lg.vhost = f.VHost
	refuse := func(code wire.Code, why string) error {
		c.write(func(b []byte) []byte { return wire.AppendOpenResponse(b, f.Corr, code, nil) })
		c.closing = true
		c.log.Warn("connection refused", append(c.who(), "reason", why)...)
		return nil
	}
	vh, ok := c.s.b.VHost(f.VHost)
	if !ok {
		return refuse(wire.VHostAccessFailure, "no such virtual host")
	}
	if err := c.s.users.CheckVHost(c.user, f.VHost); err != nil {
		return refuse(wire.VHostAccessFailure, "virtual host access denied")
	}
	release, err := c.s.b.Limiter().OpenConnection(c.user.Name(), f.VHost)
	if err != nil {
		return refuse(wire.PreconditionFailed, err.Error())
	}
	c.releaseCon = release
	c.vh = vh
	host, port := c.advertised()
	props := []wire.KV{{Key: "advertised_host", Value: host}, {Key: "advertised_port", Value: strconv.Itoa(port)}}
	c.write(func(b []byte) []byte { return wire.AppendOpenResponse(b, f.Corr, wire.OK, props) })
	c.opened.Store(true)
	u := c.user
	c.expiry = auth.WatchExpiry(u, func() {
		c.log.Warn("closing stream connection: credential has expired", "user", u.Name())
		c.forceClose("credential expired")
	})
	if c.heartbeat > 0 {
		go c.heartbeater()
	}
	c.logOpened()
	return nil
}

// advertised is this node's address as Metadata and Open give it.
func (c *conn) advertised() (string, int) {
	host, port := c.s.cfg.AdvertisedHost, c.s.cfg.AdvertisedPort
	if c.isTLS() {
		port = c.s.cfg.AdvertisedTLSPort
	}
	if host == "" || port == 0 {
		if la, ok := c.nc.LocalAddr().(*net.TCPAddr); ok {
			if host == "" {
				host = la.IP.String()
			}
			if port == 0 {
				port = la.Port
			}
		}
	}
	return host, port
}

func (c *conn) isTLS() bool {
	_, ok := c.nc.(*tls.Conn)
	return ok
}

// certUser is the user a verified client certificate names, "" if none
// (or certificate login is off).
func (c *conn) certUser() string {
	cl := c.s.cfg.CertLogin
	if cl == nil {
		return ""
	}
	name, err := cl.Username(auth.VerifiedClientCert(c.nc))
	if err != nil {
		return ""
	}
	return name
}
