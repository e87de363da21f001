package stomp

import (
	"crypto/x509"

	"github.com/trident-broker/trident/auth"
)

// certLoginUser returns the user a CONNECT without a login header logs in
// as by its TLS client certificate (RabbitMQ's stomp.ssl_cert_login): only
// when CertLogin is configured and the certificate was verified; else "".
func (c *conn) certLoginUser() string {
	cl := c.s.cfg.CertLogin
	if cl == nil {
		return ""
	}
	name, err := cl.Username(peerCert(c.t))
	if err != nil {
		return ""
	}
	return name
}

// peerCert returns the transport's verified TLS client certificate, or nil.
func peerCert(t transport) *x509.Certificate {
	switch t := t.(type) {
	case *tcpTransport:
		return auth.VerifiedClientCert(t.nc)
	case *wsTransport:
		return auth.VerifiedClientCertOf(t.tls)
	}
	return nil
}
