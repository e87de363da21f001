package mux

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"
)

// testCA is a CA that signs node certificates, for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// node signs a node certificate (no host names: none are checked).
func (ca *testCA) node(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func newTLSMux(t *testing.T, cfg *tls.Config) *Mux {
	t.Helper()
	opts := []Option{}
	if cfg != nil {
		opts = append(opts, WithTLS(func() (*tls.Config, error) { return cfg, nil }))
	}
	m, err := Listen("127.0.0.1:0", "", "k", nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	m.handshake.Store(int64(time.Second))
	return m
}

// TestTLS: nodes with certificates of the cluster's CA talk; a node with a
// certificate of another CA, or without TLS, is refused in both
// directions, before any header is read.
func TestTLS(t *testing.T) {
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "other CA")
	a := newTLSMux(t, NodeTLS(ca.node(t, "a"), ca.pool))
	b := newTLSMux(t, NodeTLS(ca.node(t, "b"), ca.pool))
	rogue := newTLSMux(t, NodeTLS(other.node(t, "rogue"), other.pool))
	// A rogue that trusts the cluster CA still has no certificate of it.
	mixed := newTLSMux(t, NodeTLS(other.node(t, "mixed"), ca.pool))
	plain := newTLSMux(t, nil)
	for _, m := range []*Mux{a, b, rogue, mixed, plain} {
		l, err := m.Listener("s")
		if err != nil {
			t.Fatal(err)
		}
		go echo(l)
	}
	c, err := a.Dial(b.Addr(), "s", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "over TLS")
	if PeerAddr(c) != b.Addr() {
		t.Fatalf("peer %q", PeerAddr(c))
	}
	c.Close()
	for _, tc := range []struct {
		name     string
		from, to *Mux
	}{
		{"rogue dials a", rogue, a}, {"a dials rogue", a, rogue},
		{"mixed dials a", mixed, a}, {"a dials mixed", a, mixed},
		{"plain dials a", plain, a}, {"a dials plain", a, plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.from.Dial(tc.to.Addr(), "s", 2*time.Second)
			if err == nil {
				// TLS 1.3: the client may finish its side before the
				// server refuses its certificate; nothing goes through.
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				_, werr := c.Write([]byte("x"))
				var b [1]byte
				_, rerr := c.Read(b[:])
				c.Close()
				if werr == nil && rerr == nil {
					t.Fatal("a connection without a certificate of the cluster CA carried data")
				}
				return
			}
			if tc.from == plain {
				return // no TLS on its side: the header is not answered
			}
			var re *RefusedError
			if errors.As(err, &re) {
				t.Fatalf("refused after the header (%v): TLS should have failed first", err)
			}
		})
	}
}
