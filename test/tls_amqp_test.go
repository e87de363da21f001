package test

import (
	"crypto/tls"
	"errors"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

func amqpsURL(b *broker, userinfo string) string {
	return "amqps://" + userinfo + b.n.AMQPTLSAddr().String() + "/"
}

// dialExternal connects over AMQPS with SASL EXTERNAL only.
func dialExternal(b *broker, cfg *tls.Config) (*amqp.Connection, error) {
	return amqp.DialConfig(amqpsURL(b, ""), amqp.Config{
		SASL:            []amqp.Authentication{&amqp.ExternalAuth{}},
		TLSClientConfig: cfg,
		Heartbeat:       10 * time.Second,
	})
}

// amqpRoundTrip declares a queue, publishes one message to it and gets it
// back.
func amqpRoundTrip(t testing.TB, c *amqp.Connection, queue string) {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatalf("declare: %v", err)
	}
	if err := ch.Publish("", queue, false, false, amqp.Publishing{Body: []byte("over tls")}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if ok {
			if string(d.Body) != "over tls" {
				t.Fatalf("got %q", d.Body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("message did not arrive")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTLSAMQPPasswordLogin(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	// No client certificate: verify_peer without fail_if_no_peer_cert
	// lets it in to log in with a password.
	c, err := amqp.DialTLS(amqpsURL(b, "guest:guest@"), p.client())
	if err != nil {
		t.Fatalf("amqps with password: %v", err)
	}
	defer c.Close()
	if st := c.ConnectionState(); st.Version != tls.VersionTLS13 {
		t.Errorf("TLS version %x, want TLS 1.3 (%x)", st.Version, tls.VersionTLS13)
	}
	amqpRoundTrip(t, c, "tls-password")

	// With a client certificate, the password mechanisms still work and
	// log in as the named user, not the certificate's.
	addUser(t, b, "alice", "secret")
	c2, err := amqp.DialTLS(amqpsURL(b, "guest:guest@"), p.client(p.clientCert("alice", nil, nil)))
	if err != nil {
		t.Fatalf("amqps with password and certificate: %v", err)
	}
	defer c2.Close()
	amqpRoundTrip(t, c2, "tls-password-cert")

	if _, err := amqp.DialTLS(amqpsURL(b, "guest:wrong@"), p.client()); amqpCode(err) != amqp.AccessRefused && !errors.Is(err, amqp.ErrCredentials) {
		t.Fatalf("wrong password over TLS: %v, want access refused", err)
	}
}

func TestTLSAMQPExternal(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	addUser(t, b, "alice", "")

	c, err := dialExternal(b, p.client(p.clientCert("alice", nil, nil)))
	if err != nil {
		t.Fatalf("EXTERNAL with CN=alice: %v", err)
	}
	defer c.Close()
	amqpRoundTrip(t, c, "tls-external")
	if users := connectionUsers(t, b, p, "AMQP"); !slices.Contains(users, "alice") {
		t.Fatalf("connection users %v, want alice", users)
	}

	// The password-less user cannot log in with PLAIN.
	if _, err := amqp.DialTLS(amqpsURL(b, "alice:@"), p.client(p.clientCert("alice", nil, nil))); err == nil {
		t.Fatal("PLAIN login of a user without password succeeded")
	}

	// amqp091-go's own EXTERNAL helper works too.
	c2, err := amqp.DialTLS_ExternalAuth(amqpsURL(b, ""), p.client(p.clientCert("alice", nil, nil)))
	if err != nil {
		t.Fatalf("DialTLS_ExternalAuth: %v", err)
	}
	c2.Close()
}

func TestTLSAMQPExternalRefused(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	addUser(t, b, "alice", "")

	// A verified certificate whose CN is not a user.
	_, err := dialExternal(b, p.client(p.clientCert("mallory", nil, nil)))
	if amqpCode(err) != amqp.AccessRefused && !errors.Is(err, amqp.ErrCredentials) {
		t.Fatalf("EXTERNAL with unknown CN: %v, want access refused", err)
	}
	// No certificate: EXTERNAL is not offered at all.
	if _, err := dialExternal(b, p.client()); !errors.Is(err, amqp.ErrSASL) {
		t.Fatalf("EXTERNAL without certificate: %v, want %v", err, amqp.ErrSASL)
	}
	// A certificate from an unknown CA fails the TLS handshake.
	if _, err := dialExternal(b, p.client(p.untrustedClientCert("alice"))); err == nil {
		t.Fatal("certificate from an untrusted CA was accepted")
	}
	// The plain listener never offers EXTERNAL.
	if _, err := amqp.DialConfig("amqp://"+b.Addr+"/", amqp.Config{SASL: []amqp.Authentication{&amqp.ExternalAuth{}}}); !errors.Is(err, amqp.ErrSASL) {
		t.Fatalf("EXTERNAL on the plain listener: %v, want %v", err, amqp.ErrSASL)
	}
}

func TestTLSAMQPExternalFromSAN(t *testing.T) {
	for _, tc := range []struct {
		sanType string
		cert    func(p *testPKI) tls.Certificate
		user    string
	}{
		{"dns", func(p *testPKI) tls.Certificate {
			return p.clientCert("not-a-user", []string{"device-1.example.com"}, nil)
		}, "device-1.example.com"},
		{"email", func(p *testPKI) tls.Certificate {
			return p.clientCert("not-a-user", []string{"x.example.com"}, []string{"bob@example.com"})
		}, "bob@example.com"},
	} {
		t.Run(tc.sanType, func(t *testing.T) {
			p := newPKI(t)
			b := tlsBroker(t, p, func(c *conf.Config) {
				c.TLS.CertLoginFrom = "subject_alternative_name"
				c.TLS.CertLoginSANType = tc.sanType
			})
			addUser(t, b, tc.user, "")
			c, err := dialExternal(b, p.client(tc.cert(p)))
			if err != nil {
				t.Fatalf("EXTERNAL as %s: %v", tc.user, err)
			}
			defer c.Close()
			amqpRoundTrip(t, c, "tls-san")
			if users := connectionUsers(t, b, p, "AMQP"); !slices.Contains(users, tc.user) {
				t.Fatalf("connection users %v, want %s", users, tc.user)
			}
			// The CN is not used in this mode.
			addUser(t, b, "cn-user", "")
			if _, err := dialExternal(b, p.client(p.clientCert("cn-user", nil, nil))); err == nil {
				t.Fatal("CN login succeeded with cert_login_from subject_alternative_name")
			}
		})
	}
}

func TestTLSClientCertRequired(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p, func(c *conf.Config) { c.TLS.FailIfNoPeerCert = true })
	addUser(t, b, "alice", "")

	if c, err := amqp.DialTLS(amqpsURL(b, "guest:guest@"), p.client()); err == nil {
		c.Close()
		t.Fatal("connection without a client certificate accepted with fail_if_no_peer_cert")
	}
	if c, err := amqp.DialTLS(amqpsURL(b, "guest:guest@"), p.client(p.untrustedClientCert("alice"))); err == nil {
		c.Close()
		t.Fatal("connection with an untrusted client certificate accepted")
	}
	c, err := amqp.DialTLS(amqpsURL(b, "guest:guest@"), p.client(p.clientCert("alice", nil, nil)))
	if err != nil {
		t.Fatalf("password login with a good certificate: %v", err)
	}
	c.Close()
	c, err = dialExternal(b, p.client(p.clientCert("alice", nil, nil)))
	if err != nil {
		t.Fatalf("EXTERNAL with a good certificate: %v", err)
	}
	c.Close()
}

// With verify_none no certificate is asked for, so EXTERNAL is never
// offered.
func TestTLSVerifyNone(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p, func(c *conf.Config) { c.TLS.Verify = "verify_none" })
	addUser(t, b, "alice", "")
	if _, err := dialExternal(b, p.client(p.clientCert("alice", nil, nil))); !errors.Is(err, amqp.ErrSASL) {
		t.Fatalf("EXTERNAL with verify_none: %v, want %v", err, amqp.ErrSASL)
	}
	c, err := amqp.DialTLS(amqpsURL(b, "guest:guest@"), p.client())
	if err != nil {
		t.Fatalf("password login with verify_none: %v", err)
	}
	c.Close()
}

func TestTLSOldVersionsRefused(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	addrs := map[string]string{
		"amqps": b.n.AMQPTLSAddr().String(), "mqtts": b.n.MQTTTLSAddr().String(),
		"stomps": b.n.STOMPTLSAddr().String(), "https": b.n.HTTPSAddr().String(),
		"wss-mqtt": b.n.MQTTWSSAddr().String(), "wss-stomp": b.n.STOMPWSSAddr().String(),
		"prometheus": b.n.MetricsTLSAddr().String(),
	}
	for name, addr := range addrs {
		for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
			cfg := p.client()
			cfg.MinVersion, cfg.MaxVersion = v, v
			if c, err := tls.Dial("tcp", addr, cfg); err == nil {
				c.Close()
				t.Errorf("%s: TLS version %x accepted", name, v)
			}
		}
		cfg := p.client()
		cfg.MaxVersion = tls.VersionTLS12
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Errorf("%s: TLS 1.2 refused: %v", name, err)
			continue
		}
		c.Close()
		c, err = tls.Dial("tcp", addr, p.client())
		if err != nil {
			t.Errorf("%s: default TLS refused: %v", name, err)
			continue
		}
		if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Errorf("%s: negotiated %x, want TLS 1.3", name, v)
		}
		c.Close()
	}
	// tls.min_version 1.3 refuses 1.2.
	b13 := tlsBroker(t, p, func(c *conf.Config) { c.TLS.MinVersion = "1.3" })
	cfg := p.client()
	cfg.MaxVersion = tls.VersionTLS12
	if c, err := tls.Dial("tcp", b13.n.AMQPTLSAddr().String(), cfg); err == nil {
		c.Close()
		t.Error("TLS 1.2 accepted with min_version 1.3")
	}
}
