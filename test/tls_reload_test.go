package test

import (
	"crypto/tls"
	"math/big"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// serverSerial dials addr and returns the serial of the certificate the
// server presents.
func serverSerial(t testing.TB, p *testPKI, addr string) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, p.client())
	if err != nil {
		t.Fatalf("tls dial %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func TestTLSCertificateReload(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	addr := b.n.AMQPTLSAddr().String()
	first := serverSerial(t, p, addr)

	old, err := amqp.DialTLS(amqpsURL(b, "guest:guest@"), p.client())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got := old.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(first) != 0 {
		t.Fatalf("serial %v, want %v", got, first)
	}

	// Replaced files are picked up by new connections (the broker looks
	// at most once a second).
	second := p.writeServerCert()
	deadline := time.Now().Add(5 * time.Second)
	for serverSerial(t, p, addr).Cmp(second) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("new certificate (serial %v) not served after 5s", second)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, a := range []string{b.n.MQTTTLSAddr().String(), b.n.STOMPTLSAddr().String(), b.n.HTTPSAddr().String(), b.n.STOMPWSSAddr().String()} {
		if got := serverSerial(t, p, a); got.Cmp(second) != 0 {
			t.Errorf("%s serves serial %v, want %v", a, got, second)
		}
	}
	// The connection made before is unaffected.
	amqpRoundTrip(t, old, "tls-reload-old")

	// An explicit reload (SIGHUP) takes effect at once.
	third := p.writeServerCert()
	if err := b.n.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS: %v", err)
	}
	if got := serverSerial(t, p, addr); got.Cmp(third) != 0 {
		t.Fatalf("after ReloadTLS serial %v, want %v", got, third)
	}

	// Broken files are refused and the current certificate stays.
	p.write(p.certFile, []byte("not a certificate"))
	if err := b.n.ReloadTLS(); err == nil {
		t.Fatal("ReloadTLS accepted a broken certificate file")
	}
	time.Sleep(1100 * time.Millisecond) // let the automatic check see it too
	if got := serverSerial(t, p, addr); got.Cmp(third) != 0 {
		t.Fatalf("after a broken file serial %v, want %v", got, third)
	}
	amqpRoundTrip(t, old, "tls-reload-old2")
}
