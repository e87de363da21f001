package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"testing"
)

func TestCertLoginUsername(t *testing.T) {
	cert := &x509.Certificate{
		Subject:        pkix.Name{CommonName: "alice", Organization: []string{"Example"}},
		DNSNames:       []string{"device-1.example.com", "device-2.example.com"},
		EmailAddresses: []string{"alice@example.com"},
	}
	for _, tc := range []struct {
		cl   CertLogin
		want string
	}{
		{CertLogin{}, "alice"},
		{CertLogin{From: CertFromCommonName}, "alice"},
		{CertLogin{From: CertFromSAN}, "device-1.example.com"},
		{CertLogin{From: CertFromSAN, SANType: SANTypeDNS}, "device-1.example.com"},
		{CertLogin{From: CertFromSAN, SANType: SANTypeEmail}, "alice@example.com"},
	} {
		got, err := tc.cl.Username(cert)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc.cl, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cl   CertLogin
		cert *x509.Certificate
	}{
		{CertLogin{}, nil},
		{CertLogin{}, &x509.Certificate{}},
		{CertLogin{From: CertFromSAN}, &x509.Certificate{Subject: pkix.Name{CommonName: "x"}}},
		{CertLogin{From: CertFromSAN, SANType: SANTypeEmail}, &x509.Certificate{DNSNames: []string{"a"}}},
		{CertLogin{From: "distinguished_name"}, cert},
	} {
		if got, err := tc.cl.Username(tc.cert); !errors.Is(err, ErrNoCertIdentity) {
			t.Errorf("%+v on %v: %q, %v; want ErrNoCertIdentity", tc.cl, tc.cert, got, err)
		}
	}
}

func TestVerifiedClientCert(t *testing.T) {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}
	if VerifiedClientCert(nil) != nil || VerifiedClientCertOf(nil) != nil {
		t.Fatal("nil has a certificate")
	}
	var plain net.Conn = &net.TCPConn{}
	if VerifiedClientCert(plain) != nil {
		t.Fatal("a plain connection has a certificate")
	}
	// Presented but not verified (verify_none): no identity.
	cs := &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf}}
	if VerifiedClientCertOf(cs) != nil {
		t.Fatal("an unverified certificate counts")
	}
	cs.VerifiedChains = [][]*x509.Certificate{{leaf}}
	if VerifiedClientCertOf(cs) != leaf {
		t.Fatal("the verified leaf is not returned")
	}
	cs.HandshakeComplete = false
	if VerifiedClientCertOf(cs) != nil {
		t.Fatal("a certificate before the handshake is done counts")
	}
}

func TestAuthenticateCert(t *testing.T) {
	us := mustNew(t, newMemStore(), Options{DefaultUser: "guest", DefaultPass: "guest", LoopbackUsers: []string{"guest"}})
	if err := us.PutUser("alice", "", nil); err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	if u, err := us.AuthenticateCert("alice", remote); err != nil || u.Name() != "alice" {
		t.Fatalf("alice: %v, %v", u, err)
	}
	if _, err := us.AuthenticateCert("mallory", remote); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("unknown user: %v", err)
	}
	if _, err := us.AuthenticateCert("guest", remote); !errors.Is(err, ErrLoopbackOnly) {
		t.Fatalf("loopback user from afar: %v", err)
	}
	if _, err := us.AuthenticateCert("guest", local); err != nil {
		t.Fatalf("loopback user from loopback: %v", err)
	}
}
