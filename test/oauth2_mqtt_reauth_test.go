package test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// tokenAuther is a paho AuthHandler for single-step OAUTH2-JWT
// authentication: the server never asks to continue.
type tokenAuther struct{}

func (tokenAuther) Authenticate(a *paho.Auth) *paho.Auth { return &paho.Auth{ReasonCode: 0x00} }
func (tokenAuther) Authenticated()                       {}

func dialTokenAuth(t *testing.T, addr, id, method, token string) (*client5, *paho.Connack, error) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &client5{msgs: make(chan *paho.Publish, 100), disc: make(chan *paho.Disconnect, 1)}
	c.Client = paho.NewClient(paho.ClientConfig{Conn: nc, AuthHandler: tokenAuther{},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			c.msgs <- r.Packet
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case c.disc <- d:
			default:
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{AuthMethod: method, AuthData: []byte(token)}})
	if err != nil {
		nc.Close()
		return nil, ack, err
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ack, nil
}

// TestOAuth2MQTT5Reauth: MQTT 5 enhanced authentication with method
// OAUTH2-JWT (a Trident extension): CONNECT carries the token; AUTH 0x19
// with a fresh token keeps the connection past the first token's expiry
// and applies the new scopes; a refused token ends the connection with
// DISCONNECT 0x87; any other method is refused with CONNACK 0x8C, as
// RabbitMQ refuses every method.
func TestOAuth2MQTT5Reauth(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	addr := b.n.MQTTAddr().String()
	reauth := func(c *client5, token string) *paho.AuthResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.Authenticate(ctx, &paho.Auth{ReasonCode: 0x19, Properties: &paho.AuthProperties{AuthMethod: "OAUTH2-JWT", AuthData: []byte(token)}})
		if err != nil {
			t.Fatalf("AUTH: %v", err)
		}
		return r
	}
	puback := func(c *client5, topic string) byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x")})
		if r == nil {
			t.Fatalf("no PUBACK: %v", err)
		}
		return r.ReasonCode
	}

	tokA, expA := shortToken(p, "app", 2*time.Second, appScopes...)
	c, ack, err := dialTokenAuth(t, addr, "reauth", "OAUTH2-JWT", tokA)
	if err != nil {
		t.Fatalf("CONNECT with OAUTH2-JWT: %v %+v", err, ack)
	}
	if ack.Properties == nil || ack.Properties.AuthMethod != "OAUTH2-JWT" {
		t.Fatalf("CONNACK does not echo the method: %+v", ack.Properties)
	}
	if code := puback(c, "allowed/a"); code >= 0x80 {
		t.Fatalf("publish with the first token: 0x%02x", code)
	}
	// The new token may no longer publish on allowed.*.
	var scopesB []string
	for _, s := range appScopes {
		if s != "rabbitmq.write:%2F/amq.topic/allowed.*" {
			scopesB = append(scopesB, s)
		}
	}
	if r := reauth(c, p.token("app", time.Hour, scopesB...)); !r.Success || r.ReasonCode != 0 {
		t.Fatalf("re-authentication: %+v", r)
	}
	time.Sleep(time.Until(expA) + 1200*time.Millisecond)
	select {
	case d := <-c.disc:
		t.Fatalf("disconnected after re-authentication when the first token expired: 0x%02x", d.ReasonCode)
	default:
	}
	if code := puback(c, "allowed/a"); code != 0x87 {
		t.Fatalf("publish after re-authentication with narrower scopes: 0x%02x, want 0x87", code)
	}
	// A forged token: DISCONNECT 0x87.
	if r := reauth(c, p.forged("app", time.Hour, appScopes...)); r.Success || r.ReasonCode != 0x87 {
		t.Fatalf("re-authentication with a forged token: %+v, want DISCONNECT 0x87", r)
	}

	// Another user's token is refused too.
	c2, _, err := dialTokenAuth(t, addr, "reauth2", "OAUTH2-JWT", p.token("app", time.Hour, appScopes...))
	if err != nil {
		t.Fatal(err)
	}
	if r := reauth(c2, p.token("mallory", time.Hour, appScopes...)); r.Success || r.ReasonCode != 0x87 {
		t.Fatalf("re-authentication as another user: %+v", r)
	}

	// A bad token at CONNECT, and an unknown method.
	if _, ack, err := dialTokenAuth(t, addr, "bad", "OAUTH2-JWT", p.token("app", -time.Minute, appScopes...)); err == nil || ack == nil || ack.ReasonCode != 0x86 {
		t.Fatalf("expired token at CONNECT: %v %+v, want 0x86", err, ack)
	}
	if _, ack, err := dialTokenAuth(t, addr, "scram", "SCRAM-SHA-1", "x"); err == nil || ack == nil || ack.ReasonCode != 0x8C {
		t.Fatalf("unknown method: %v %+v, want 0x8C", err, ack)
	}
}

// TestOAuth2MQTT5ReauthShorter: AUTH 0x19 with a token that expires
// sooner than the one CONNECT carried moves the connection's expiry
// forward (the connection keeps its expiry watch to reset): the client
// gets DISCONNECT 0xA0 when the new token expires.
func TestOAuth2MQTT5ReauthShorter(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	c, ack, err := dialTokenAuth(t, b.n.MQTTAddr().String(), "reauth-short", "OAUTH2-JWT", p.token("app", time.Hour, appScopes...))
	if err != nil {
		t.Fatalf("CONNECT with OAUTH2-JWT: %v %+v", err, ack)
	}
	tok, exp := shortToken(p, "app", 2*time.Second, appScopes...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Authenticate(ctx, &paho.Auth{ReasonCode: 0x19, Properties: &paho.AuthProperties{AuthMethod: "OAUTH2-JWT", AuthData: []byte(tok)}})
	if err != nil || !r.Success {
		t.Fatalf("re-authentication: %+v %v", r, err)
	}
	select {
	case d := <-c.disc:
		if d.ReasonCode != 0xA0 {
			t.Fatalf("DISCONNECT 0x%02x, want 0xA0", d.ReasonCode)
		}
	case <-time.After(time.Until(exp) + 5*time.Second):
		t.Fatal("still connected after the shorter token expired")
	}
}
