package test

import (
	"context"
	"crypto/tls"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/go-stomp/stomp/v3"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// dial5TLS connects a paho.golang (MQTT 5) client over TLS.
func dial5TLS(t testing.TB, addr string, cfg *tls.Config, cp *paho.Connect) (*paho.Client, *paho.Connack, error) {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	c := paho.NewClient(paho.ClientConfig{Conn: nc})
	cp.KeepAlive = 30
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, cp)
	if err != nil {
		nc.Close()
		return nil, ack, err
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ack, nil
}

func TestTLSMQTT(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	addUser(t, b, "alice", "")
	url := "ssl://" + b.n.MQTTTLSAddr().String()
	withTLS := func(cfg *tls.Config) func(*mqtt3.ClientOptions) {
		return func(o *mqtt3.ClientOptions) { o.SetTLSConfig(cfg) }
	}

	// MQTT 3.1.1: password login without a certificate, certificate login
	// without a username; a message crosses between them.
	pw := dial3(t, url, "pw", true, withTLS(p.client()), func(o *mqtt3.ClientOptions) { o.SetUsername("guest").SetPassword("guest") })
	cert := dial3(t, url, "cert", true, withTLS(p.client(p.clientCert("alice", nil, nil))))
	cert.subscribe(t, "tls/+", 1)
	pw.publish(t, "tls/x", 1, false, "hello")
	if m := cert.receive(t); m.payload != "hello" {
		t.Fatalf("got %q", m.payload)
	}
	users := connectionUsers(t, b, p, "MQTT")
	slices.Sort(users)
	if !slices.Equal(users, []string{"alice", "guest"}) {
		t.Fatalf("MQTT connection users %v, want [alice guest]", users)
	}

	// A verified certificate naming no user is refused, as is an
	// untrusted certificate.
	if c, err := tryDial3(url, "mallory", true, withTLS(p.client(p.clientCert("mallory", nil, nil)))); err == nil {
		c.Disconnect(0)
		t.Fatal("MQTT certificate login as an unknown user succeeded")
	}
	if c, err := tryDial3(url, "rogue", true, withTLS(p.client(p.untrustedClientCert("alice")))); err == nil {
		c.Disconnect(0)
		t.Fatal("MQTT with an untrusted certificate succeeded")
	}
	// A username wins over the certificate (RabbitMQ's rule): a wrong
	// password fails even with alice's certificate.
	if c, err := tryDial3(url, "wrong", true, withTLS(p.client(p.clientCert("alice", nil, nil))),
		func(o *mqtt3.ClientOptions) { o.SetUsername("guest").SetPassword("nope") }); err == nil {
		c.Disconnect(0)
		t.Fatal("MQTT wrong password with a certificate succeeded")
	}

	// MQTT 5 with certificate login.
	c5, ack, err := dial5TLS(t, b.n.MQTTTLSAddr().String(), p.client(p.clientCert("alice", nil, nil)), &paho.Connect{ClientID: "v5", CleanStart: true})
	if err != nil {
		t.Fatalf("MQTT 5 certificate login: %v (%+v)", err, ack)
	}
	if _, err := c5.Publish(context.Background(), &paho.Publish{Topic: "tls/v5", QoS: 1, Payload: []byte("five")}); err != nil {
		t.Fatalf("MQTT 5 publish: %v", err)
	}
	if m := cert.receive(t); m.payload != "five" {
		t.Fatalf("got %q", m.payload)
	}
	if _, ack, err := dial5TLS(t, b.n.MQTTTLSAddr().String(), p.client(p.clientCert("mallory", nil, nil)), &paho.Connect{ClientID: "v5m", CleanStart: true}); err == nil {
		t.Fatalf("MQTT 5 certificate login as unknown user succeeded (%+v)", ack)
	} else if ack != nil && ack.ReasonCode != 0x86 && ack.ReasonCode != 0x87 {
		t.Fatalf("MQTT 5 refused with reason %#x, want 0x86 or 0x87", ack.ReasonCode)
	}

	// MQTT over secure WebSocket, certificate login.
	ws := dial3(t, "wss://"+b.n.MQTTWSSAddr().String()+"/ws", "wss", true, withTLS(p.client(p.clientCert("alice", nil, nil))))
	ws.publish(t, "tls/ws", 1, false, "over wss")
	if m := cert.receive(t); m.payload != "over wss" {
		t.Fatalf("got %q", m.payload)
	}
	users = connectionUsers(t, b, p, "Web MQTT")
	if !slices.Equal(users, []string{"alice"}) {
		t.Fatalf("Web MQTT connection users %v, want [alice]", users)
	}
}

// Without mqtt.cert_login a client with a certificate and no username is
// the anonymous user (with allow_anonymous on: a user of its own).
func TestTLSMQTTCertLoginOff(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p, func(c *conf.Config) {
		c.MQTT.CertLogin, c.STOMP.CertLogin = false, false
		anonMQTT(c)
		c.STOMP.AllowAnonymous = true
		c.STOMP.DefaultUser, c.STOMP.DefaultPass = testbin.AnonMQTTUser, testbin.AnonMQTTPass
	})
	addUser(t, b, "alice", "")
	dial3(t, "ssl://"+b.n.MQTTTLSAddr().String(), "anon", true, func(o *mqtt3.ClientOptions) {
		o.SetTLSConfig(p.client(p.clientCert("alice", nil, nil)))
	})
	if users := connectionUsers(t, b, p, "MQTT"); !slices.Equal(users, []string{testbin.AnonMQTTUser}) {
		t.Fatalf("users %v, want [%s]", users, testbin.AnonMQTTUser)
	}
	st := stompTLS(t, b, p.client(p.clientCert("alice", nil, nil)))
	stSync(t, st)
	if users := connectionUsers(t, b, p, "STOMP"); !slices.Equal(users, []string{testbin.AnonMQTTUser}) {
		t.Fatalf("STOMP users %v, want [%s]", users, testbin.AnonMQTTUser)
	}
}

// stompTLS connects go-stomp over TLS without a login header.
func stompTLS(t testing.TB, b *broker, cfg *tls.Config, opts ...func(*stomp.Conn) error) *stomp.Conn {
	t.Helper()
	c, err := tryStompTLS(b, cfg, opts...)
	if err != nil {
		t.Fatalf("stomp over tls: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect() })
	return c
}

func tryStompTLS(b *broker, cfg *tls.Config, opts ...func(*stomp.Conn) error) (*stomp.Conn, error) {
	nc, err := tls.Dial("tcp", b.n.STOMPTLSAddr().String(), cfg)
	if err != nil {
		return nil, err
	}
	c, err := stomp.Connect(nc, append([]func(*stomp.Conn) error{stHostOpt()}, opts...)...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func TestTLSSTOMP(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	addUser(t, b, "alice", "")

	cert := stompTLS(t, b, p.client(p.clientCert("alice", nil, nil)))
	sub, err := cert.Subscribe("/queue/tls-stomp", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	pw := stompTLS(t, b, p.client(), stomp.ConnOpt.Login("guest", "guest"))
	if err := pw.Send("/queue/tls-stomp", "text/plain", []byte("hello"), stomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	if m := stRecv(t, sub); string(m.Body) != "hello" {
		t.Fatalf("got %q", m.Body)
	}
	users := connectionUsers(t, b, p, "STOMP")
	slices.Sort(users)
	if !slices.Equal(users, []string{"alice", "guest"}) {
		t.Fatalf("STOMP users %v, want [alice guest]", users)
	}

	if c, err := tryStompTLS(b, p.client(p.clientCert("mallory", nil, nil))); err == nil {
		c.Disconnect()
		t.Fatal("STOMP certificate login as unknown user succeeded")
	}
	if c, err := tryStompTLS(b, p.client(p.untrustedClientCert("alice"))); err == nil {
		c.Disconnect()
		t.Fatal("STOMP with an untrusted certificate succeeded")
	}
	// A login header wins over the certificate.
	if c, err := tryStompTLS(b, p.client(p.clientCert("alice", nil, nil)), stomp.ConnOpt.Login("guest", "nope")); err == nil {
		c.Disconnect()
		t.Fatal("STOMP wrong passcode with a certificate succeeded")
	}

	// Web-STOMP over secure WebSocket with certificate login.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wsc, _, err := websocket.Dial(ctx, "wss://"+b.n.STOMPWSSAddr().String()+"/ws", &websocket.DialOptions{
		Subprotocols: []string{"v12.stomp"},
		HTTPClient:   httpsClient(p.client(p.clientCert("alice", nil, nil))),
	})
	if err != nil {
		t.Fatalf("dial wss: %v", err)
	}
	defer wsc.CloseNow()
	nc := &stWSConn{Conn: websocket.NetConn(context.Background(), wsc, websocket.MessageText), ws: wsc}
	wss, err := stomp.Connect(nc, stHostOpt())
	if err != nil {
		t.Fatalf("web-stomp over wss: %v", err)
	}
	defer wss.Disconnect()
	if err := wss.Send("/queue/tls-stomp", "text/plain", []byte("over wss"), stomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	if m := stRecv(t, sub); string(m.Body) != "over wss" {
		t.Fatalf("got %q", m.Body)
	}
	found := false
	for _, u := range connectionUsers(t, b, p, "") {
		found = found || u == "alice"
	}
	if n := len(connectionUsers(t, b, p, "STOMP")); n < 2 || !found {
		t.Fatalf("expected alice's Web-STOMP connection")
	}
}

func TestTLSManagementHTTPS(t *testing.T) {
	p := newPKI(t)
	b := tlsBroker(t, p)
	if b.n.HTTPAddr() != nil {
		t.Fatal("plain HTTP listener open although disabled")
	}
	code, body := httpsGet(t, p.client(), "https://"+b.n.HTTPSAddr().String()+"/api/overview")
	if code != http.StatusOK {
		t.Fatalf("GET /api/overview over HTTPS: %d %s", code, body)
	}
	for _, proto := range []string{`"amqp/ssl"`, `"mqtt/ssl"`, `"stomp/ssl"`, `"https"`} {
		if !strings.Contains(string(body), proto) {
			t.Errorf("overview listeners lack %s: %s", proto, body)
		}
	}
	code, body = httpsGet(t, p.client(), "https://"+b.n.MetricsTLSAddr().String()+"/metrics")
	if code != http.StatusOK || !strings.Contains(string(body), "rabbitmq_") {
		t.Fatalf("GET /metrics over HTTPS: %d %.200s", code, body)
	}
	// Plain HTTP to the HTTPS port gets no API answer.
	resp, err := http.Get("http://" + b.n.HTTPSAddr().String() + "/api/overview")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served on the HTTPS port")
		}
	}
}
