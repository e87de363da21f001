package test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

// testPKI is a CA made by the test, the server certificate it signed
// (written to files for the broker) and helpers to make client
// certificates.
type testPKI struct {
	t        testing.TB
	dir      string
	ca       *x509.Certificate
	caKey    *ecdsa.PrivateKey
	pool     *x509.CertPool
	certFile string
	keyFile  string
	caFile   string
	serial   int64
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	p := &testPKI{t: t, dir: t.TempDir(), serial: 1}
	p.ca, p.caKey = p.makeCA("Trident Test CA")
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.caFile = filepath.Join(p.dir, "ca.pem")
	p.write(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.ca.Raw}))
	p.certFile = filepath.Join(p.dir, "server.pem")
	p.keyFile = filepath.Join(p.dir, "server.key")
	p.writeServerCert()
	return p
}

func (p *testPKI) write(path string, data []byte) {
	p.t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
}

func (p *testPKI) key() *ecdsa.PrivateKey {
	p.t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	return k
}

func (p *testPKI) nextSerial() *big.Int {
	p.serial++
	return big.NewInt(p.serial)
}

// makeCA makes a self-signed CA (also used for a CA the broker does not
// trust).
func (p *testPKI) makeCA(cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	p.t.Helper()
	k := p.key()
	tmpl := &x509.Certificate{
		SerialNumber:          p.nextSerial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		p.t.Fatal(err)
	}
	return c, k
}

// sign issues a certificate for tmpl's subject signed by ca.
func (p *testPKI) sign(tmpl *x509.Certificate, ca *x509.Certificate, caKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey) {
	p.t.Helper()
	k := p.key()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	return der, k
}

// writeServerCert (re)writes the server's certificate and key files with a
// new serial number, which it returns.
func (p *testPKI) writeServerCert() *big.Int {
	p.t.Helper()
	serial := p.nextSerial()
	der, k := p.sign(&x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, p.ca, p.caKey)
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		p.t.Fatal(err)
	}
	// Key first: the broker may look between the two writes and must then
	// keep the old pair (a mismatched pair does not load).
	p.write(p.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	p.write(p.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return serial
}

// clientCert issues a client certificate with common name cn and the given
// DNS and email subject alternative names, signed by the test CA.
func (p *testPKI) clientCert(cn string, dns, emails []string) tls.Certificate {
	p.t.Helper()
	return p.clientCertBy(p.ca, p.caKey, cn, dns, emails)
}

func (p *testPKI) clientCertBy(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, dns, emails []string) tls.Certificate {
	p.t.Helper()
	der, k := p.sign(&x509.Certificate{
		SerialNumber:   p.nextSerial(),
		Subject:        pkix.Name{CommonName: cn},
		DNSNames:       dns,
		EmailAddresses: emails,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
}

// untrustedClientCert is a client certificate from a CA the broker does
// not know.
func (p *testPKI) untrustedClientCert(cn string) tls.Certificate {
	p.t.Helper()
	ca, caKey := p.makeCA("Rogue CA")
	return p.clientCertBy(ca, caKey, cn, nil, nil)
}

// client returns a client TLS config trusting the test CA, presenting
// certs (none, or one client certificate). The certificate is sent even
// when its issuer is not among the CAs the server asks for (Go's client
// would otherwise quietly send none), so an untrusted certificate really
// reaches the server's verification.
func (p *testPKI) client(certs ...tls.Certificate) *tls.Config {
	cfg := &tls.Config{RootCAs: p.pool, ServerName: "localhost"}
	if len(certs) > 0 {
		cert := certs[0]
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return cfg
}

// tlsBroker starts a node with every TLS listener on a loopback port
// (the plain MQTT, STOMP and HTTP listeners stay off, so those front ends
// run on TLS alone), client certificates verified against the test CA
// but not required, and MQTT and STOMP certificate login on.
func tlsBroker(t testing.TB, p *testPKI, mutate ...func(*conf.Config)) *broker {
	t.Helper()
	return startBroker(t, append([]func(*conf.Config){func(c *conf.Config) {
		c.TLS.CertFile, c.TLS.KeyFile, c.TLS.CAFile = p.certFile, p.keyFile, p.caFile
		c.TLS.Verify = "verify_peer"
		c.AMQP.TLSListen = "127.0.0.1:0"
		c.MQTT.TLSListen, c.MQTT.WSSListen = "127.0.0.1:0", "127.0.0.1:0"
		c.STOMP.TLSListen, c.STOMP.WSSListen = "127.0.0.1:0", "127.0.0.1:0"
		c.HTTP.TLSListen, c.Prometheus.TLSListen = "127.0.0.1:0", "127.0.0.1:0"
		c.MQTT.CertLogin, c.STOMP.CertLogin = true, true
	}}, mutate...)...)
}

// addUser creates user (password pass) with full permissions on "/".
func addUser(t testing.TB, b *broker, user, pass string) {
	t.Helper()
	if err := b.n.Users().PutUser(user, pass, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.n.Users().SetPermissions(user, "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
}

// httpsClient is an HTTP client over TLS with cfg.
func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// httpsGet GETs url as guest over TLS with cfg and returns the status and body.
func httpsGet(t testing.TB, cfg *tls.Config, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	resp, err := httpsClient(cfg).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// connectionUsers lists the users of the open connections whose protocol
// (as the API names it) starts with protocol, through the HTTPS API.
func connectionUsers(t testing.TB, b *broker, p *testPKI, protocol string) []string {
	t.Helper()
	code, data := httpsGet(t, p.client(), "https://"+b.n.HTTPSAddr().String()+"/api/connections")
	if code != http.StatusOK {
		t.Fatalf("GET /api/connections: %d %s", code, data)
	}
	var conns []struct {
		User     string `json:"user"`
		Protocol string `json:"protocol"`
	}
	if err := json.Unmarshal(data, &conns); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range conns {
		if strings.HasPrefix(c.Protocol, protocol) {
			out = append(out, c.User)
		}
	}
	return out
}
