package amqp

import (
	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/protocol/amqp/wire"
)

// SASL EXTERNAL (RabbitMQ's rabbitmq_auth_mechanism_ssl): a client whose
// TLS certificate the listener verified logs in as the user the
// certificate names, without a password.

const mechExternal = "EXTERNAL"

// mechanisms lists the SASL mechanisms offered in connection.start:
// EXTERNAL only on a TLS connection with a verified client certificate
// (the TLS handshake is done: the protocol header has been read), and
// after the password mechanisms so that clients picking the server's
// first choice keep using passwords.
func (c *conn) mechanisms() string {
	if c.s.cfg.CertLogin != nil && auth.VerifiedClientCert(c.nc) != nil {
		return "PLAIN AMQPLAIN " + mechExternal
	}
	return "PLAIN AMQPLAIN"
}

// externalLogin authenticates a connection.start-ok with mechanism
// EXTERNAL. The response (an optional authorization identity) is ignored,
// as RabbitMQ does. It returns the user name for the log, the user, and
// an authentication error; a client that chose EXTERNAL when it was not
// offered gets the unsupported-mechanism error.
func (c *conn) externalLogin() (string, *auth.User, error) {
	cert := auth.VerifiedClientCert(c.nc)
	if c.s.cfg.CertLogin == nil || cert == nil {
		return "", nil, wire.NewConnectionError(wire.AccessRefused, "unsupported authentication mechanism '%s'", mechExternal)
	}
	name, err := c.s.cfg.CertLogin.Username(cert)
	if err != nil {
		return "", nil, err
	}
	u, err := c.s.users.AuthenticateCert(name, c.nc.RemoteAddr())
	return name, u, err
}
