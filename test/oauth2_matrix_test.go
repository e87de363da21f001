package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// appScopes are the scopes of the matrix's token user "app": resources
// named app.* (and the per-session queues MQTT and STOMP declare) on "/",
// and on amq.topic the routing keys allowed.*; tag management for the
// HTTP API. The same grant is checked over every protocol.
var appScopes = []string{
	"rabbitmq.tag:management",
	"rabbitmq.configure:%2F/app.*", "rabbitmq.write:%2F/app.*", "rabbitmq.read:%2F/app.*",
	"rabbitmq.configure:%2F/mqtt-subscription-*", "rabbitmq.write:%2F/mqtt-subscription-*", "rabbitmq.read:%2F/mqtt-subscription-*",
	"rabbitmq.configure:%2F/stomp-subscription-*", "rabbitmq.write:%2F/stomp-subscription-*", "rabbitmq.read:%2F/stomp-subscription-*",
	"rabbitmq.write:%2F/amq.topic/allowed.*", "rabbitmq.read:%2F/amq.topic/allowed.*",
	"other.configure:*/*", // another resource server's: ignored
}

func TestOAuth2MatrixAMQP(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	tok := p.token("app", time.Hour, appScopes...)
	// The token is the password of PLAIN; the user name is not looked at.
	c := dial(t, "amqp://whoever:"+tok+"@"+b.Addr+"/")
	ch := newChannel(t, c)
	const user = "user 'app'"

	t.Run("declare allowed", func(t *testing.T) {
		if _, err := ch.QueueDeclare("app.q", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("declare denied", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 403, "ACCESS_REFUSED - configure access to queue 'other.q' in vhost '/' refused for "+user, func() error {
			_, err := ch.QueueDeclare("other.q", false, true, false, false, nil)
			return err
		})
	})
	t.Run("bind allowed", func(t *testing.T) {
		if err := ch.QueueBind("app.q", "allowed.#", "amq.topic", false, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bind denied by topic scope", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 403, "ACCESS_REFUSED - read access to topic 'denied.#' in exchange 'amq.topic' in vhost '/' refused for "+user, func() error {
			return ch.QueueBind("app.q", "denied.#", "amq.topic", false, nil)
		})
	})
	t.Run("publish allowed and consumed", func(t *testing.T) {
		ch := newChannel(t, c)
		must(t, ch.Confirm(false))
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.topic", "allowed.x", false, false, amqp.Publishing{Body: []byte("ok")})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("not confirmed: %v", err)
		}
		ds, err := ch.Consume("app.q", "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := receive(t, ds); string(d.Body) != "ok" {
			t.Fatalf("got %q", d.Body)
		}
	})
	t.Run("publish denied by topic scope", func(t *testing.T) {
		ch := newChannel(t, c)
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		_ = ch.PublishWithContext(context.Background(), "amq.topic", "denied.x", false, false, amqp.Publishing{Body: []byte("no")})
		channelClosedBy(t, closed, 403, "ACCESS_REFUSED - write access to topic 'denied.x' in exchange 'amq.topic' in vhost '/' refused for "+user)
	})
	t.Run("publish denied by exchange", func(t *testing.T) {
		ch := newChannel(t, c)
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		_ = ch.PublishWithContext(context.Background(), "amq.direct", "k", false, false, amqp.Publishing{Body: []byte("no")})
		channelClosedBy(t, closed, 403, "ACCESS_REFUSED - write access to exchange 'amq.direct' in vhost '/' refused for "+user)
	})
	t.Run("consume denied", func(t *testing.T) {
		_, gch := channel(t, b.URL)
		if _, err := gch.QueueDeclare("guests", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		ch := newChannel(t, c)
		channelError(t, c, ch, 403, "ACCESS_REFUSED - read access to queue 'guests' in vhost '/' refused for "+user, func() error {
			_, err := ch.Consume("guests", "", true, false, false, false, nil)
			return err
		})
	})
	t.Run("vhost without scope", func(t *testing.T) {
		admin := apiClient{t: t, base: "http://" + b.n.HTTPAddr().String(), user: "guest", pass: "guest"}
		admin.expect(201, "PUT", "/api/vhosts/elsewhere", nil)
		_, err := amqp.Dial("amqp://x:" + tok + "@" + b.Addr + "/elsewhere")
		wantAMQPError(t, err, 530, "NOT_ALLOWED - access to vhost 'elsewhere' refused for "+user)
	})
	t.Run("refused tokens", func(t *testing.T) {
		for name, bad := range map[string]string{
			"expired":   p.token("app", -time.Minute, appScopes...),
			"forged":    p.forged("app", time.Hour, appScopes...),
			"no scope":  p.token("app", time.Hour, "openid", "other.read:*/*"),
			"malformed": "eyJhbGciOiJSUzI1NiJ9.e30.AAAA",
		} {
			_, err := amqp.Dial("amqp://x:" + bad + "@" + b.Addr + "/")
			if amqpCode(err) != 403 {
				t.Errorf("%s token: %v, want 403 ACCESS_REFUSED", name, err)
			}
		}
	})
	t.Run("internal users keep working", func(t *testing.T) {
		c := dial(t, b.URL)
		if c.IsClosed() {
			t.Fatal("guest refused")
		}
	})
}

func TestOAuth2MatrixMQTT5(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	tok := p.token("app", time.Hour, appScopes...)
	// MQTT 5 allows a password without a user name.
	c, _ := dial5(t, b.n.MQTTAddr().String(), &paho.Connect{ClientID: "m5", CleanStart: true, Password: []byte(tok), PasswordFlag: true})
	for _, tt := range []struct {
		filter string
		code   byte
	}{{"allowed/#", 1}, {"denied/#", 0x87}, {"#", 0x87}} {
		t.Run("subscribe "+tt.filter, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: tt.filter, QoS: 1}}})
			if sa == nil {
				t.Fatalf("no SUBACK: %v", err)
			}
			if len(sa.Reasons) != 1 || sa.Reasons[0] != tt.code {
				t.Fatalf("SUBACK %v, want 0x%02x", sa.Reasons, tt.code)
			}
		})
	}
	for _, tt := range []struct {
		topic string
		code  byte
	}{{"allowed/x", 0}, {"denied/x", 0x87}} {
		t.Run("publish "+tt.topic, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := c.Publish(ctx, &paho.Publish{Topic: tt.topic, QoS: 1, Payload: []byte("x")})
			if r == nil {
				t.Fatalf("no PUBACK: %v", err)
			}
			if got := r.ReasonCode; (tt.code == 0 && got >= 0x80) || (tt.code != 0 && got != tt.code) {
				t.Fatalf("PUBACK reason 0x%02x, want 0x%02x", got, tt.code)
			}
		})
	}
	if m := c.receive(t); m.Topic != "allowed/x" {
		t.Fatalf("received %s", m.Topic)
	}
	t.Run("refused tokens", func(t *testing.T) {
		for name, bad := range map[string]string{
			"expired": p.token("app", -time.Minute, appScopes...),
			"forged":  p.forged("app", time.Hour, appScopes...),
		} {
			_, ack, err := tryDial5(b.n.MQTTAddr().String(), &paho.Connect{ClientID: "bad", CleanStart: true,
				Username: "app", UsernameFlag: true, Password: []byte(bad), PasswordFlag: true})
			if err == nil || ack == nil || ack.ReasonCode != 0x86 {
				t.Errorf("%s token: %v %+v, want CONNACK 0x86", name, err, ack)
			}
		}
	})
}

func TestOAuth2MatrixMQTT3(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	tok := p.token("app", time.Hour, appScopes...)
	url := "tcp://" + b.n.MQTTAddr().String()
	c := dial3(t, url, "m3", true, func(o *mqtt3.ClientOptions) { o.SetUsername("any").SetPassword(tok) })
	st := c.Subscribe("denied/#", 1, nil)
	st.WaitTimeout(5 * time.Second)
	if code := st.(*mqtt3.SubscribeToken).Result()["denied/#"]; code != 0x80 {
		t.Fatalf("denied subscribe: SUBACK 0x%02x, want 0x80", code)
	}
	c.subscribe(t, "allowed/#", 1)
	c.publish(t, "allowed/y", 1, false, "ok")
	if m := c.receive(t); m.topic != "allowed/y" {
		t.Fatalf("got %v", m)
	}
	if _, err := tryDial3(url, "bad3", true, func(o *mqtt3.ClientOptions) {
		o.SetUsername("any").SetPassword(p.forged("app", time.Hour, appScopes...))
	}); err == nil {
		t.Fatal("forged token accepted over MQTT 3.1.1")
	}
}

func TestOAuth2MatrixSTOMP(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	tok := p.token("app", time.Hour, appScopes...)
	login := func(t *testing.T) *stRaw {
		c := stDialRaw(t, b)
		c.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:any\npasscode:" + tok + "\n\n\x00")
		if f := c.read(); f.Command != "CONNECTED" {
			t.Fatalf("CONNECT: %s %v %q", f.Command, f.Header, f.Body)
		}
		return c
	}
	t.Run("allowed", func(t *testing.T) {
		c := login(t)
		c.write("SUBSCRIBE\nid:0\ndestination:/topic/allowed.#\nreceipt:r1\n\n\x00")
		if f := c.read(); f.Command != "RECEIPT" {
			t.Fatalf("SUBSCRIBE: %s %q", f.Command, f.Body)
		}
		c.write("SEND\ndestination:/topic/allowed.x\nreceipt:r2\n\nhi\x00")
		got := map[string]bool{}
		for i := 0; i < 2; i++ {
			got[c.read().Command] = true
		}
		if !got["RECEIPT"] || !got["MESSAGE"] {
			t.Fatalf("SEND: got %v, want RECEIPT and MESSAGE", got)
		}
	})
	for _, tt := range []struct{ name, frame, text string }{
		{"send denied", "SEND\ndestination:/topic/denied.x\n\nno\x00", "write access to topic 'denied.x' in exchange 'amq.topic' in vhost '/' refused for user 'app'"},
		{"send to exchange denied", "SEND\ndestination:/exchange/amq.direct/k\n\nno\x00", "write access to exchange 'amq.direct' in vhost '/' refused for user 'app'"},
		{"subscribe denied", "SUBSCRIBE\nid:1\ndestination:/topic/denied.#\n\n\x00", "read access to topic 'denied.#' in exchange 'amq.topic' in vhost '/' refused for user 'app'"},
		{"queue denied", "SEND\ndestination:/queue/other\n\nno\x00", "configure access to queue 'other' in vhost '/' refused for user 'app'"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := login(t)
			c.write(tt.frame)
			if f := c.expectError("access_refused"); !strings.Contains(string(f.Body), tt.text) {
				t.Fatalf("ERROR body %q, want %q", f.Body, tt.text)
			}
		})
	}
	t.Run("refused token", func(t *testing.T) {
		c := stDialRaw(t, b)
		c.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:any\npasscode:" + p.token("app", -time.Minute, appScopes...) + "\n\n\x00")
		c.expectError("Bad CONNECT")
	})
}

func TestOAuth2MatrixHTTP(t *testing.T) {
	p := newIDP(t)
	auditFile := filepath.Join(t.TempDir(), "audit.log")
	b, base := oauthBroker(t, p, func(c *conf.Config) {
		c.Audit.File = auditFile
		c.OAuth2.ExtraScopesSource = "realm_access.roles" // Keycloak's roles claim
		c.OAuth2.ScopeAliases = map[string]string{"ops": "rabbitmq.tag:administrator rabbitmq.read:*/*"}
	})
	_ = b
	app := apiClient{t: t, base: base, token: p.token("app", time.Hour, appScopes...)}
	admin := apiClient{t: t, base: base, token: p.token("root", time.Hour, "rabbitmq.tag:administrator", "rabbitmq.configure:*/*", "rabbitmq.write:*/*", "rabbitmq.read:*/*")}
	pub := func(key string) map[string]any {
		return map[string]any{"properties": map[string]any{}, "routing_key": key, "payload": "x", "payload_encoding": "string"}
	}
	t.Run("whoami", func(t *testing.T) {
		m := app.object("/api/whoami")
		if m["name"] != "app" || strings.Join(toStrings(m["tags"]), ",") != "management" {
			t.Fatalf("whoami %v", m)
		}
	})
	t.Run("declare allowed", func(t *testing.T) { app.expect(201, "PUT", "/api/queues/%2F/app.h", map[string]any{"durable": false}) })
	t.Run("declare denied", func(t *testing.T) {
		app.expect(401, "PUT", "/api/queues/%2F/other.h", map[string]any{"durable": false})
	})
	t.Run("publish allowed", func(t *testing.T) { app.expect(200, "POST", "/api/exchanges/%2F/amq.topic/publish", pub("allowed.x")) })
	t.Run("publish denied", func(t *testing.T) {
		data := app.expect(400, "POST", "/api/exchanges/%2F/amq.topic/publish", pub("denied.x"))
		if !strings.Contains(string(data), "write access to topic 'denied.x' in exchange 'amq.topic'") {
			t.Fatalf("body %s", data)
		}
	})
	t.Run("bind allowed", func(t *testing.T) {
		app.expect(201, "POST", "/api/bindings/%2F/e/amq.topic/q/app.h", map[string]any{"routing_key": "allowed.#"})
	})
	t.Run("bind denied", func(t *testing.T) {
		app.expect(401, "POST", "/api/bindings/%2F/e/amq.topic/q/app.h", map[string]any{"routing_key": "denied.#"})
	})
	t.Run("administrator only", func(t *testing.T) {
		app.expect(401, "GET", "/api/users", nil)
		admin.expect(200, "GET", "/api/users", nil)
	})
	t.Run("role from extra_scopes_source, through an alias", func(t *testing.T) {
		c := p.claims("operator", time.Hour)
		delete(c, "scope")
		c["realm_access"] = map[string]any{"roles": []string{"ops", "offline_access"}}
		ops := apiClient{t: t, base: base, token: p.signClaims(p.signingKey(), c)}
		ops.expect(200, "GET", "/api/users", nil)
		if m := ops.object("/api/whoami"); m["name"] != "operator" || strings.Join(toStrings(m["tags"]), ",") != "administrator" {
			t.Fatalf("whoami %v", m)
		}
	})
	t.Run("no management tag", func(t *testing.T) {
		plain := apiClient{t: t, base: base, token: p.token("svc", time.Hour, "rabbitmq.read:*/*")}
		_, reason := errorBody(t, plain.expect(401, "GET", "/api/whoami", nil))
		if reason != "Not management user" {
			t.Fatalf("reason %q", reason)
		}
	})
	t.Run("refused tokens", func(t *testing.T) {
		for reason, tok := range map[string]string{
			"expired":       p.token("app", -time.Minute, appScopes...),
			"bad_signature": p.forged("app", time.Hour, appScopes...),
			"bad_algorithm": noneAlgToken(p.claims("app", time.Hour, appScopes...)),
		} {
			_, got := errorBody(t, apiClient{t: t, base: base, token: tok}.expect(401, "GET", "/api/whoami", nil))
			if !strings.Contains(got, "("+reason+")") {
				t.Errorf("%s: reason %q", reason, got)
			}
		}
	})
	t.Run("audit", func(t *testing.T) {
		data, err := os.ReadFile(auditFile)
		if err != nil {
			t.Fatal(err)
		}
		log := string(data)
		for _, want := range []string{
			`"msg":"authentication.success","log":"audit","user":"app"`, `"backend":"oauth2"`,
			`"reason":"auth: token refused (expired)`, `"reason":"auth: token refused (bad_signature)`,
			`"backend":"oauth2","token_error":"bad_algorithm"`,
			`"msg":"authorization.denied","log":"audit","user":"app","vhost":"/","backend":"oauth2","perm":"configure","kind":"queue","name":"other.h"`,
		} {
			if !strings.Contains(log, want) {
				t.Errorf("audit log lacks %s in\n%s", want, log)
			}
		}
	})
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestOAuth2STOMPPasscodeOnly: a STOMP CONNECT with a token as passcode
// and no login header logs in as the token's user, not the default user.
func TestOAuth2STOMPPasscodeOnly(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p)
	c := stDialRaw(t, b)
	c.write("CONNECT\naccept-version:1.2\nhost:/\npasscode:" + p.token("app", time.Hour, appScopes...) + "\n\n\x00")
	if f := c.read(); f.Command != "CONNECTED" {
		t.Fatalf("CONNECT: %s %q", f.Command, f.Body)
	}
	c.write("SEND\ndestination:/queue/guests-only\n\nno\x00")
	if f := c.expectError("access_refused"); !strings.Contains(string(f.Body), "refused for user 'app'") {
		t.Fatalf("ERROR %q: not the token's user", f.Body)
	}
}

// TestOAuth2VHostCreatorGetsNoDatabasePermissions: an administrator token
// named like a database user creates a vhost; the database user gets no
// permission there (its permissions are its own, the token's are scopes).
func TestOAuth2VHostCreatorGetsNoDatabasePermissions(t *testing.T) {
	p := newIDP(t)
	_, base := oauthBroker(t, p)
	admin := apiClient{t: t, base: base, token: p.token("guest", time.Hour, "rabbitmq.tag:administrator", "rabbitmq.configure:*/*")}
	admin.expect(201, "PUT", "/api/vhosts/made-by-token", nil)
	guest := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	guest.expect(404, "GET", "/api/permissions/made-by-token/guest", nil)
}

// TestOAuth2CLI: tridentctl --token sends the token as Bearer.
func TestOAuth2CLI(t *testing.T) {
	p := newIDP(t)
	_, base := oauthBroker(t, p)
	bin := tridentctl(t)
	run := func(token string, args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"--url", base, "--token", token}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	admin := p.token("root", time.Hour, "rabbitmq.tag:administrator", "rabbitmq.configure:*/*", "rabbitmq.write:*/*", "rabbitmq.read:*/*")
	if out, err := run(admin, "declare", "queue", "from-cli"); err != nil {
		t.Fatalf("declare with a token: %v\n%s", err, out)
	}
	if out, err := run(admin, "list", "queues"); err != nil || !strings.Contains(out, "from-cli") {
		t.Fatalf("list with a token: %v\n%s", err, out)
	}
	if out, err := run(p.forged("root", time.Hour, "rabbitmq.tag:administrator"), "list", "queues"); err == nil || !strings.Contains(out, "bad_signature") {
		t.Fatalf("forged token: %v\n%s", err, out)
	}
}

// TestOAuth2RegexScopes: with oauth2.scope_pattern_syntax regex the parts
// of a scope are expressions matched against the whole name.
func TestOAuth2RegexScopes(t *testing.T) {
	p := newIDP(t)
	b, _ := oauthBroker(t, p, func(c *conf.Config) { c.OAuth2.ScopePatternSyntax = "regex" })
	// The vhost "/" as a regex without a "/": \x2f.
	tok := p.token("app", time.Hour, `rabbitmq.configure:\x2f/app\.q[0-9]+`)
	c := dial(t, "amqp://x:"+tok+"@"+b.Addr+"/")
	ch := newChannel(t, c)
	if _, err := ch.QueueDeclare("app.q12", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch2 := newChannel(t, c)
	channelError(t, c, ch2, 403, "ACCESS_REFUSED - configure access to queue 'app.q12x' in vhost '/' refused for user 'app'", func() error {
		_, err := ch2.QueueDeclare("app.q12x", false, true, false, false, nil)
		return err
	})
}

// TestOAuth2LargeTokenInitialFrameMax: a token longer than the 4096-byte
// handshake frame is refused by default, as RabbitMQ does, and accepted
// once amqp.initial_frame_max is raised.
func TestOAuth2LargeTokenInitialFrameMax(t *testing.T) {
	p := newIDP(t)
	scopes := append([]string{}, appScopes...)
	for i := 0; len(strings.Join(scopes, " ")) < 9000; i++ {
		scopes = append(scopes, "rabbitmq.read:%2F/padding-queue-"+strings.Repeat("x", 40)+string(rune('a'+i%26)))
	}
	tok := p.token("app", time.Hour, scopes...)
	if len(tok) < 10000 {
		t.Fatalf("token is only %d bytes", len(tok))
	}
	small, _ := oauthBroker(t, p)
	// The broker sends 501 FRAME_ERROR; amqp091-go reports a close during
	// the handshake as its ErrCredentials (403).
	if _, err := amqp.Dial(tokenURL(small, tok)); amqpCode(err) != 501 && amqpCode(err) != 403 {
		t.Fatalf("default initial_frame_max: %v, want a refusal", err)
	}
	large, _ := oauthBroker(t, p, func(c *conf.Config) { c.AMQP.InitialFrameMax = 65536 })
	dial(t, tokenURL(large, tok))
}
