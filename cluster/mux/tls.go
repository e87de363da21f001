package mux

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"
)

// Option configures Listen.
type Option func(*Mux)

// WithTLS makes every connection of the mux, accepted or dialled, mutual
// TLS: config is called for each one (so that a reloaded certificate or
// CA is used from the next connection on) and returns the node's
// certificate and the pool of CAs a peer's certificate must chain to
// (see NodeTLS). The TLS handshake comes before the header: the cookie
// proofs and the stream name travel encrypted, and a peer without a
// certificate of the cluster's CA never gets to the cookie exchange.
func WithTLS(config func() (*tls.Config, error)) Option {
	return func(m *Mux) { m.tlsConfig = config }
}

// ErrTLS wraps a failed TLS handshake of Dial.
var ErrTLS = errors.New("mux: TLS handshake failed")

// NodeTLS builds the mutual TLS configuration of a node: cert is
// presented to every peer, in both directions, and a peer's certificate
// must chain to one of cas, whatever name or address it was dialled by
// (nodes reach each other by IP address and gossiped addresses, so the
// cluster's CA is the identity, as in RabbitMQ's inter-node TLS with
// verify_peer and no hostname check). Any extended key usage is accepted,
// so that one node certificate serves as client and server.
func NodeTLS(cert tls.Certificate, cas *x509.CertPool) *tls.Config {
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("mux: peer presented no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, b := range raw {
			c, err := x509.ParseCertificate(b)
			if err != nil {
				return fmt.Errorf("mux: peer certificate: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: cas, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("mux: peer certificate %q: %w", certs[0].Subject.CommonName, err)
		}
		return nil
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
		// Both ends verify the other in VerifyPeerCertificate, against
		// cas and without a host name: the server asks for any
		// certificate, the client skips the standard (host name) check.
		ClientAuth:            tls.RequireAnyClientCert,
		InsecureSkipVerify:    true, //nolint:gosec // verified by VerifyPeerCertificate
		VerifyPeerCertificate: verify,
	}
}

// serverTLS runs the server side of the TLS handshake on an accepted
// connection, under the handshake deadline; c unchanged without TLS.
func (m *Mux) serverTLS(c net.Conn) (net.Conn, error) {
	if m.tlsConfig == nil {
		return c, nil
	}
	cfg, err := m.tlsConfig()
	if err != nil {
		return nil, err
	}
	tc := tls.Server(c, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// clientTLS runs the client side on a dialled connection, by deadline.
func (m *Mux) clientTLS(c net.Conn, deadline time.Time) (net.Conn, error) {
	if m.tlsConfig == nil {
		return c, nil
	}
	cfg, err := m.tlsConfig()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(deadline)
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	return tc, nil
}
