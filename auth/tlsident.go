package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
)

// TLS identities: a client that presented a certificate the listener
// verified may log in as the user the certificate names, without a
// password (AMQP SASL EXTERNAL, MQTT and STOMP certificate login), as
// RabbitMQ's rabbitmq_auth_mechanism_ssl does.

// Where CertLogin takes the user name from (RabbitMQ's ssl_cert_login_from).
const (
	CertFromCommonName = "common_name"
	CertFromSAN        = "subject_alternative_name"
)

// Which subject alternative name CertFromSAN uses (RabbitMQ's
// ssl_cert_login_san_type).
const (
	SANTypeDNS   = "dns"
	SANTypeEmail = "email"
)

// ErrNoCertIdentity: the certificate has no value in the field CertLogin
// takes the user name from.
var ErrNoCertIdentity = errors.New("auth: client certificate carries no user name in the configured field")

// CertLogin maps a verified client certificate to a user name. The zero
// value takes the subject's common name.
type CertLogin struct {
	From    string // CertFromCommonName (default) or CertFromSAN
	SANType string // SANTypeDNS (default) or SANTypeEmail, for CertFromSAN
}

// Username returns the user name cert carries in the configured field: the
// subject's CN, or the first DNS (or email) subject alternative name.
func (cl CertLogin) Username(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", ErrNoCertIdentity
	}
	var name string
	switch cl.From {
	case "", CertFromCommonName:
		name = cert.Subject.CommonName
	case CertFromSAN:
		switch cl.SANType {
		case "", SANTypeDNS:
			if len(cert.DNSNames) > 0 {
				name = cert.DNSNames[0]
			}
		case SANTypeEmail:
			if len(cert.EmailAddresses) > 0 {
				name = cert.EmailAddresses[0]
			}
		}
	}
	if !validName(name) {
		return "", ErrNoCertIdentity
	}
	return name, nil
}

// VerifiedClientCert returns the leaf of the first verified chain of the
// TLS connection c, or nil when c is not TLS (it has no ConnectionState
// method), its handshake is not done, or the client sent no certificate
// the server verified. Only verified certificates may log anyone in.
func VerifiedClientCert(c any) *x509.Certificate {
	s, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return nil
	}
	cs := s.ConnectionState()
	return VerifiedClientCertOf(&cs)
}

// VerifiedClientCertOf is VerifiedClientCert for a connection state, such
// as an HTTP request's TLS field (nil for plain HTTP).
func VerifiedClientCertOf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || !cs.HandshakeComplete || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// AuthenticateCert logs in the user named by a verified client
// certificate: there is no password to check, but the user must exist
// (ErrBadCredentials otherwise) and the loopback restriction applies
// (ErrLoopbackOnly).
func (us *Users) AuthenticateCert(name string, remote net.Addr) (*User, error) {
	u := us.snap.Load().users[name]
	if u == nil {
		return nil, ErrBadCredentials
	}
	if us.loopback[name] && !isLoopback(remote) {
		return nil, ErrLoopbackOnly
	}
	return u, nil
}
