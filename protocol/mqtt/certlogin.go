package mqtt

import (
	"crypto/tls"
	"net"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/trident-broker/trident/auth"
)

// certLoginUser returns the user a client logs in as by its certificate
// (RabbitMQ's mqtt.ssl_cert_login): only when CertLogin is configured, the
// CONNECT carries neither username nor password, and the connection's TLS
// client certificate was verified. Otherwise "".
func (c *conn) certLoginUser(pk *packets.Packet) string {
	cl := c.s.cfg.CertLogin
	if cl == nil || pk.Connect.UsernameFlag || pk.Connect.PasswordFlag {
		return ""
	}
	name, err := cl.Username(auth.VerifiedClientCert(c.nc))
	if err != nil {
		return ""
	}
	return name
}

// tlsStateConn is a WebSocket connection that came over HTTPS: it carries
// the request's TLS state for certificate login.
type tlsStateConn struct {
	net.Conn
	cs *tls.ConnectionState
}

func (c tlsStateConn) ConnectionState() tls.ConnectionState { return *c.cs }

// withTLSState wraps nc with cs when the WebSocket came over TLS.
func withTLSState(nc net.Conn, cs *tls.ConnectionState) net.Conn {
	if cs == nil {
		return nc
	}
	return tlsStateConn{nc, cs}
}
