package test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// shortToken returns a token expiring within about ttl (exp is whole
// seconds) and the instant it expires.
func shortToken(p *idp, sub string, ttl time.Duration, scopes ...string) (string, time.Time) {
	c := p.claims(sub, ttl, scopes...)
	exp := time.Unix(c["exp"].(int64), 0)
	return p.signClaims(p.signingKey(), c), exp
}

// TestOAuth2ExpiryClosesConnections: connections of a token user stay open
// until the token's exp, then each protocol closes them with its error:
// AMQP 320 "credential expired" (as RabbitMQ), MQTT 5 DISCONNECT 0xA0,
// MQTT 3.1.1 a closed connection, STOMP an ERROR frame.
func TestOAuth2ExpiryClosesConnections(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	tok, exp := shortToken(p, "app", 2*time.Second, appScopes...)
	if time.Until(exp) < 700*time.Millisecond {
		tok, exp = shortToken(p, "app", 3*time.Second, appScopes...)
	}
	type closed struct {
		proto string
		at    time.Time
		what  string
	}
	results := make(chan closed, 4)

	c := dial(t, "amqp://x:"+tok+"@"+b.Addr+"/")
	amqpClosed := c.NotifyClose(make(chan *amqp.Error, 1))
	ch := newChannel(t, c)
	if _, err := ch.QueueDeclare("app.exp", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	go func() {
		e := <-amqpClosed
		what := "nil"
		if e != nil {
			what = fmt.Sprintf("%d %s", e.Code, e.Reason)
		}
		results <- closed{"amqp", time.Now(), what}
	}()

	m5, _ := dial5(t, b.n.MQTTAddr().String(), &paho.Connect{ClientID: "exp5", CleanStart: true,
		Username: "x", UsernameFlag: true, Password: []byte(tok), PasswordFlag: true})
	go func() {
		select {
		case d := <-m5.disc:
			results <- closed{"mqtt5", time.Now(), fmt.Sprintf("disconnect 0x%02x", d.ReasonCode)}
		case <-time.After(10 * time.Second):
			results <- closed{"mqtt5", time.Now(), "timeout"}
		}
	}()

	lost := make(chan error, 1)
	m3 := dial3(t, "tcp://"+b.n.MQTTAddr().String(), "exp3", true, func(o *mqtt3.ClientOptions) {
		o.SetUsername("x").SetPassword(tok).SetConnectionLostHandler(func(_ mqtt3.Client, err error) { lost <- err })
	})
	_ = m3
	go func() {
		select {
		case <-lost:
			results <- closed{"mqtt3", time.Now(), "connection lost"}
		case <-time.After(10 * time.Second):
			results <- closed{"mqtt3", time.Now(), "timeout"}
		}
	}()

	st := stDialRaw(t, b)
	st.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:x\npasscode:" + tok + "\n\n\x00")
	if f := st.read(); f.Command != "CONNECTED" {
		t.Fatalf("STOMP CONNECT: %s %q", f.Command, f.Body)
	}
	go func() {
		_ = st.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		what := "read error"
		for {
			f, err := st.r.Read()
			if err != nil {
				break
			}
			if f != nil { // nil: a heart-beat
				what = f.Command + " " + f.Header.Get("message")
				break
			}
		}
		results <- closed{"stomp", time.Now(), what}
	}()

	want := map[string]string{
		"amqp":  "320 CONNECTION_FORCED - credential expired",
		"mqtt5": "disconnect 0xa0",
		"mqtt3": "connection lost",
		"stomp": "ERROR credential expired",
	}
	for range want {
		r := <-results
		if r.what != want[r.proto] {
			t.Errorf("%s: closed with %q, want %q", r.proto, r.what, want[r.proto])
		}
		// Not before the token expired (the broker's clock is ours), and
		// promptly after.
		if r.at.Before(exp.Add(-50*time.Millisecond)) || r.at.After(exp.Add(3*time.Second)) {
			t.Errorf("%s: closed at %s, token expired at %s", r.proto, r.at.Format(time.StampMilli), exp.Format(time.StampMilli))
		}
	}
}

// TestOAuth2UpdateSecret: connection.update-secret with a valid token keeps
// the connection past the first token's expiry and applies the new
// token's scopes at once; an expired, a wrongly signed and another user's
// token are refused with 530 NOT_ALLOWED, closing the connection, as
// RabbitMQ does.
func TestOAuth2UpdateSecret(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	scopesA := []string{"rabbitmq.configure:%2F/app.*", "rabbitmq.read:%2F/app.*", "rabbitmq.write:%2F/app.*", "rabbitmq.write:%2F/amq.topic/*"}
	scopesB := scopesA[:3] // no more publishing to amq.topic
	tokA, expA := shortToken(p, "app", 2*time.Second, scopesA...)
	c := dial(t, "amqp://x:"+tokA+"@"+b.Addr+"/")
	connClosed := c.NotifyClose(make(chan *amqp.Error, 1))
	ch := newChannel(t, c)
	must(t, ch.Confirm(false))
	publish := func() error {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.topic", "k", false, false, amqp.Publishing{Body: []byte("x")})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if ok, err := dc.WaitContext(ctx); !ok {
			return errors.Join(errors.New("nacked or closed"), err)
		}
		return nil
	}
	if err := publish(); err != nil {
		t.Fatalf("publish with the first token: %v", err)
	}
	if err := c.UpdateSecret(p.token("app", time.Hour, scopesB...), "refresh"); err != nil {
		t.Fatalf("update-secret with a valid token: %v", err)
	}
	time.Sleep(time.Until(expA) + 1200*time.Millisecond)
	select {
	case e := <-connClosed:
		t.Fatalf("connection closed after a refresh, when the first token expired: %v", e)
	default:
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	_ = ch.PublishWithContext(context.Background(), "amq.topic", "k", false, false, amqp.Publishing{Body: []byte("x")})
	channelClosedBy(t, chClosed, 403, "ACCESS_REFUSED - write access to exchange 'amq.topic' in vhost '/' refused for user 'app'")
	ch2 := newChannel(t, c)
	if _, err := ch2.QueueDeclare("app.still", false, true, false, false, nil); err != nil {
		t.Fatalf("the refreshed token's own scopes: %v", err)
	}

	// A consumer whose queue the new token may not read is cancelled, as
	// RabbitMQ does; one it may read keeps consuming.
	{
		c := dial(t, "amqp://x:"+p.token("app", time.Hour, scopesA...)+"@"+b.Addr+"/")
		ch := newChannel(t, c)
		for _, q := range []string{"app.keep", "app.lose"} {
			if _, err := ch.QueueDeclare(q, false, true, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ch.Consume(q, q, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		cancelled := ch.NotifyCancel(make(chan string, 2))
		narrow := []string{"rabbitmq.configure:%2F/app.*", "rabbitmq.write:%2F/app.*", "rabbitmq.read:%2F/app.keep"}
		if err := c.UpdateSecret(p.token("app", time.Hour, narrow...), "narrower"); err != nil {
			t.Fatal(err)
		}
		select {
		case tag := <-cancelled:
			if tag != "app.lose" {
				t.Fatalf("cancelled %q, want app.lose", tag)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the consumer the new token may not read was not cancelled")
		}
		select {
		case tag := <-cancelled:
			t.Fatalf("also cancelled %q", tag)
		case <-time.After(200 * time.Millisecond):
		}
	}

	refuse := func(name, secret string) {
		t.Helper()
		c := dial(t, "amqp://x:"+p.token("app", time.Hour, scopesA...)+"@"+b.Addr+"/")
		closed := c.NotifyClose(make(chan *amqp.Error, 1))
		err := c.UpdateSecret(secret, name)
		if err == nil {
			t.Fatalf("%s: update-secret accepted", name)
		}
		select {
		case e := <-closed:
			if e == nil || e.Code != 530 || e.Reason != "NOT_ALLOWED - New secret was refused by one of the backends" {
				t.Fatalf("%s: connection closed with %v", name, e)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: connection not closed", name)
		}
	}
	refuse("expired", p.token("app", -time.Minute, scopesA...))
	refuse("wrongly signed", p.forged("app", time.Hour, scopesA...))
	refuse("another user", p.token("mallory", time.Hour, scopesA...))
	refuse("garbage", "not a token")
}

// TestOAuth2KeyRotation: the provider starts signing with a new key; the
// broker fetches the JWKS again on the unknown kid, once, and accepts the
// new tokens over AMQP and the HTTP API without a restart.
func TestOAuth2KeyRotation(t *testing.T) {
	p := newIDP(t)
	b, base := oauthBroker(t, p)
	old := p.token("app", time.Hour, appScopes...)
	dial(t, "amqp://x:"+old+"@"+b.Addr+"/")
	hits := p.jwksHits.Load()
	p.rotate("key-2")
	time.Sleep(20 * time.Millisecond) // past oauth2.min_refresh_interval
	fresh := p.token("app", time.Hour, appScopes...)
	if !strings.Contains(string(mustDecodeHeader(t, fresh)), `"kid":"key-2"`) {
		t.Fatalf("token not signed with the new key")
	}
	dial(t, "amqp://x:"+fresh+"@"+b.Addr+"/")
	apiClient{t: t, base: base, token: fresh}.expect(200, "GET", "/api/whoami", nil)
	dial(t, "amqp://x:"+old+"@"+b.Addr+"/") // the old key is still published
	if n := p.jwksHits.Load() - hits; n != 1 {
		t.Fatalf("JWKS fetched %d times after the rotation, want 1", n)
	}
}

func mustDecodeHeader(t testing.TB, tok string) []byte {
	h, _, _ := strings.Cut(tok, ".")
	data, err := b64d(h)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestOAuth2BadInput: malformed tokens, alg none, a 1 MiB token on every
// protocol and a JWKS that hangs get a clear refusal; none crashes the
// broker or holds up other logins.
func TestOAuth2BadInput(t *testing.T) {
	p := newIDP(t)
	// Many refusals from one address here: no failed-login limit (see
	// TestOAuth2FailedTokensRateLimited).
	// A fetch timeout long enough to tell a login that waited for the
	// hanging JWKS from one that did not.
	b, base := oauthBroker(t, p, func(c *conf.Config) { c.Auth.FailedLoginLimit, c.OAuth2.FetchTimeout = -1, 2*time.Second })
	good := p.token("app", time.Hour, appScopes...)
	huge := strings.Repeat("A", 1<<20)
	bad := map[string]string{
		"empty parts": "..",
		"not base64":  "!!!.@@@.###",
		"not json":    b64e("hello") + "." + b64e("world") + ".sig",
		"alg none":    noneAlgToken(p.claims("app", time.Hour, appScopes...)),
		"hs256 forged with the public key as secret": hs256Token(p),
		"two dots only":   "eyJhbGciOiJSUzI1NiJ9..",
		"nested garbage":  b64e(`{"alg":"RS256","kid":{"x":1}}`) + "." + b64e(`{}`) + ".AAAA",
		"huge claims":     b64e(`{"alg":"RS256","kid":"key-1"}`) + "." + b64e(`{"scope":"`+strings.Repeat("x ", 20000)+`"}`) + ".AAAA",
		"unicode garbage": "é.ü.ß",
	}
	for name, tok := range bad {
		t.Run("amqp "+name, func(t *testing.T) {
			_, err := amqp.Dial(tokenURL(b, tok))
			// 501: a start-ok over the handshake's 4096-byte frame limit.
			if code := amqpCode(err); code != 403 && !(code == 501 && len(tok) > 4000) {
				t.Fatalf("got %v, want 403", err)
			}
		})
		t.Run("http "+name, func(t *testing.T) {
			apiClient{t: t, base: base, token: tok}.expect(401, "GET", "/api/whoami", nil)
		})
	}
	t.Run("1 MiB token", func(t *testing.T) {
		// HTTP: the server's header limit answers first (431), or the
		// token's size limit (401).
		req, _ := http.NewRequest("GET", base+"/api/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+huge)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("HTTP: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 431 && resp.StatusCode != 401 {
			t.Fatalf("HTTP: status %d", resp.StatusCode)
		}
		// AMQP: larger than the handshake's frame limit, as in RabbitMQ
		// (initial frame_max 4096): the connection is refused.
		done := make(chan error, 1)
		go func() { _, err := amqp.Dial("amqp://x:" + huge + "@" + b.Addr + "/"); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("AMQP: a 1 MiB token was accepted")
			}
		case <-time.After(15 * time.Second):
			t.Fatal("AMQP: a 1 MiB token hangs the handshake")
		}
		// MQTT 5: a password holds at most 65535 bytes; a CONNECT that
		// large is past mqtt.max_packet_size_unauthenticated (16 KiB) and
		// refused before it is read: 0x95 Packet too large.
		_, ack, err := tryDial5(b.n.MQTTAddr().String(), &paho.Connect{ClientID: "huge", CleanStart: true,
			Password: []byte(huge[:65535]), PasswordFlag: true})
		if err == nil || ack == nil || ack.ReasonCode != 0x95 {
			t.Fatalf("MQTT 5: %v %+v", err, ack)
		}
		// STOMP: past stomp.max_header_length, an ERROR.
		st := stDialRaw(t, b)
		st.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:x\npasscode:" + huge + "\n\n\x00")
		if f := st.read(); f.Command != "ERROR" {
			t.Fatalf("STOMP: %s", f.Command)
		}
		// An update-secret with it: a frame larger than frame_max is a
		// connection error, not a crash.
		c, err := amqp.Dial("amqp://x:" + good + "@" + b.Addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.UpdateSecret(huge, "huge"); err == nil {
			t.Fatal("update-secret with a 1 MiB token accepted")
		}
	})
	t.Run("a hanging JWKS holds up no other login", func(t *testing.T) {
		p.rotate("key-3") // tokens now name a kid the broker has not seen
		p.setJWKSDelay(30 * time.Second)
		defer p.setJWKSDelay(0)
		unknown := p.token("app", time.Hour, appScopes...)
		k1 := p.keys[len(p.keys)-1] // key-1, known to the broker
		known := p.signClaims(k1, p.claims("app", time.Hour, appScopes...))
		start := time.Now()
		var wg sync.WaitGroup
		var unknownErr error
		var unknownTook time.Duration
		for i := 0; i < 3; i++ { // several logins waiting on the same fetch
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := amqp.Dial("amqp://x:" + unknown + "@" + b.Addr + "/")
				if i == 0 {
					unknownErr, unknownTook = err, time.Since(start)
				}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		for name, url := range map[string]string{"guest": b.URL, "known key": "amqp://x:" + known + "@" + b.Addr + "/"} {
			t0 := time.Now()
			c, err := amqp.Dial(url)
			if err != nil {
				t.Fatalf("%s login during a hanging JWKS fetch: %v", name, err)
			}
			c.Close()
			if d := time.Since(t0); d > time.Second {
				t.Errorf("%s login took %s during a hanging JWKS fetch", name, d)
			}
		}
		wg.Wait()
		if amqpCode(unknownErr) != 403 {
			t.Fatalf("unknown-kid login during a hanging JWKS: %v, want 403", unknownErr)
		}
		// It waited for the fetch, and gave up at oauth2.fetch_timeout (2s).
		if unknownTook < 1500*time.Millisecond || unknownTook > 5*time.Second {
			t.Fatalf("unknown-kid login took %s, want about the 2s fetch timeout", unknownTook)
		}
	})
	t.Run("still serving", func(t *testing.T) {
		dial(t, "amqp://x:"+good+"@"+b.Addr+"/")
		c := dial(t, b.URL)
		if c.IsClosed() {
			t.Fatal("guest refused")
		}
	})
}

// hs256Token is an HS256 token whose "secret" is the provider's public key
// (the algorithm-confusion attack); no HS256 key is configured, so it must
// be refused.
func hs256Token(p *idp) string {
	k := p.signingKey()
	pub, _ := k.public().MarshalJSON()
	return p.signClaims(idpKey{k.kid, "HS256", pub}, p.claims("app", time.Hour, appScopes...))
}

func b64e(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func b64d(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

// tokenURL is an AMQP URL with tok as the password, escaped.
func tokenURL(b *broker, tok string) string {
	return (&url.URL{Scheme: "amqp", User: url.UserPassword("x", tok), Host: b.Addr, Path: "/"}).String()
}

// TestOAuth2FailedTokensRateLimited: refused tokens count against
// auth.failed_login_limit like wrong passwords; once blocked, even a good
// token from that address is refused until the back-off ends.
func TestOAuth2FailedTokensRateLimited(t *testing.T) {
	p := newIDP(t)
	auditFile := filepath.Join(t.TempDir(), "audit.log")
	b, _ := oauthBroker(t, p, func(c *conf.Config) {
		c.Auth.FailedLoginLimit, c.Auth.FailedLoginBackoff = 3, time.Minute
		c.Audit.File = auditFile
	})
	for i := 0; i < 3; i++ {
		if _, err := amqp.Dial(tokenURL(b, p.forged("app", time.Hour, appScopes...))); amqpCode(err) != 403 {
			t.Fatalf("forged token %d: %v", i, err)
		}
	}
	if _, err := amqp.Dial(tokenURL(b, p.token("app", time.Hour, appScopes...))); amqpCode(err) != 403 {
		t.Fatalf("good token from a blocked address: %v, want 403", err)
	}
	data, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "token refused (bad_signature)"); n != 3 {
		t.Errorf("%d bad_signature refusals in the audit log, want 3", n)
	}
	if !strings.Contains(string(data), `"msg":"authentication.blocked"`) {
		t.Errorf("no authentication.blocked record:\n%s", data)
	}
}
