package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// permBroker starts a node with every front end and the HTTP API and a
// restricted user bob (tag management) set up through the API: full
// configure/read on "/", write on everything but amq.direct, and topic
// permissions on amq.topic allowing routing keys "allowed.*" for publish,
// "dev.<client id>.*" too (MQTT), and binding keys "allowed.*".
func permBroker(t *testing.T) (*broker, apiClient) {
	t.Helper()
	b, base := mgmtBroker(t, func(c *conf.Config) {
		c.MQTT.Listen = "127.0.0.1:0"
		c.STOMP.Listen = "127.0.0.1:0"
	})
	admin := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	admin.expect(201, "PUT", "/api/users/bob", map[string]any{"password": "bob", "tags": "management"})
	admin.expect(201, "PUT", "/api/permissions/%2F/bob", map[string]any{"configure": ".*", "write": "^(?:[^a]|a[^m]|amq\\.[^d]).*|^$", "read": ".*"})
	admin.expect(201, "PUT", "/api/topic-permissions/%2F/bob", map[string]any{"exchange": "amq.topic",
		"write": `^allowed\.|^dev\.{client_id}\.|^user\.{username}$`, "read": `^allowed\.`})
	return b, admin.as("bob", "bob")
}

func TestPermMatrixTopicPermissionsAPI(t *testing.T) {
	_, bob := permBroker(t)
	admin := bob.as("guest", "guest")
	var list []map[string]string
	if err := json.Unmarshal(admin.expect(200, "GET", "/api/topic-permissions", nil), &list); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user": "bob", "vhost": "/", "exchange": "amq.topic",
		"write": `^allowed\.|^dev\.{client_id}\.|^user\.{username}$`, "read": `^allowed\.`}
	if len(list) != 1 || fmt.Sprint(list[0]) != fmt.Sprint(want) {
		t.Fatalf("GET /api/topic-permissions = %v, want [%v]", list, want)
	}
	for _, p := range []string{"/api/topic-permissions/%2F/bob", "/api/users/bob/topic-permissions", "/api/vhosts/%2F/topic-permissions"} {
		if err := json.Unmarshal(admin.expect(200, "GET", p, nil), &list); err != nil || len(list) != 1 {
			t.Fatalf("GET %s = %v %v", p, list, err)
		}
	}
	var defs struct {
		TopicPermissions []map[string]string `json:"topic_permissions"`
	}
	if err := json.Unmarshal(admin.expect(200, "GET", "/api/definitions", nil), &defs); err != nil {
		t.Fatal(err)
	}
	if len(defs.TopicPermissions) != 1 || fmt.Sprint(defs.TopicPermissions[0]) != fmt.Sprint(want) {
		t.Fatalf("definitions topic_permissions = %v", defs.TopicPermissions)
	}
	// Updating answers 204, a bad expression 400, a non-administrator 401.
	admin.expect(204, "PUT", "/api/topic-permissions/%2F/bob", map[string]any{"exchange": "amq.topic", "write": want["write"], "read": want["read"]})
	admin.expect(400, "PUT", "/api/topic-permissions/%2F/bob", map[string]any{"exchange": "amq.topic", "write": "(", "read": ""})
	bob.expect(401, "PUT", "/api/topic-permissions/%2F/bob", map[string]any{"exchange": "amq.topic", "write": ".*", "read": ".*"})
	// Import into a fresh definitions round trip: delete, then import.
	admin.expect(204, "DELETE", "/api/topic-permissions/%2F/bob", nil)
	admin.expect(404, "GET", "/api/topic-permissions/%2F/bob", nil)
	admin.expect(204, "POST", "/api/definitions", map[string]any{"topic_permissions": []any{want}})
	if err := json.Unmarshal(admin.expect(200, "GET", "/api/topic-permissions/%2F/bob", nil), &list); err != nil || len(list) != 1 {
		t.Fatalf("after import: %v %v", list, err)
	}
}

func TestPermMatrixAMQP(t *testing.T) {
	b, _ := permBroker(t)
	c := dial(t, "amqp://bob:bob@"+b.Addr+"/")
	ch := newChannel(t, c)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const denied = "ACCESS_REFUSED - write access to topic 'denied.x' in exchange 'amq.topic' in vhost '/' refused for user 'bob'"

	t.Run("bind allowed", func(t *testing.T) {
		if err := ch.QueueBind(q.Name, "allowed.#", "amq.topic", false, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bind denied", func(t *testing.T) {
		ch := newChannel(t, c)
		channelError(t, c, ch, 403, "ACCESS_REFUSED - read access to topic 'denied.#' in exchange 'amq.topic' in vhost '/' refused for user 'bob'", func() error {
			return ch.QueueBind(q.Name, "denied.#", "amq.topic", false, nil)
		})
	})
	t.Run("publish allowed", func(t *testing.T) {
		ch := newChannel(t, c)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"allowed.x", "user.bob"} {
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.topic", key, false, false, amqp.Publishing{Body: []byte("ok")})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
				t.Fatalf("%s not confirmed: %v", key, err)
			}
		}
		if _, ok, err := ch.Get(q.Name, true); !ok || err != nil {
			t.Fatalf("allowed message not routed: %v %v", ok, err)
		}
	})
	t.Run("publish denied", func(t *testing.T) {
		ch := newChannel(t, c)
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		_ = ch.PublishWithContext(context.Background(), "amq.topic", "denied.x", false, false, amqp.Publishing{Body: []byte("no")})
		channelClosedBy(t, closed, 403, denied)
	})
	t.Run("publish denied by exchange permission", func(t *testing.T) {
		ch := newChannel(t, c)
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		_ = ch.PublishWithContext(context.Background(), "amq.direct", "k", false, false, amqp.Publishing{Body: []byte("no")})
		channelClosedBy(t, closed, 403, "ACCESS_REFUSED - write access to exchange 'amq.direct' in vhost '/' refused for user 'bob'")
	})
	t.Run("non-topic exchange ignores topic permissions", func(t *testing.T) {
		ch := newChannel(t, c)
		if err := ch.ExchangeDeclare("bob.fan", "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "denied.#", "bob.fan", false, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("permission change applies to an open channel", func(t *testing.T) {
		ch := newChannel(t, c)
		if err := b.n.Users().SetTopicPermissions("bob", "/", "amq.topic", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "denied.#", "amq.topic", false, nil); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPermMatrixMQTT5(t *testing.T) {
	b, _ := permBroker(t)
	c, _ := dial5(t, b.n.MQTTAddr().String(), &paho.Connect{ClientID: "c1", CleanStart: true,
		Username: "bob", UsernameFlag: true, Password: []byte("bob"), PasswordFlag: true})
	tests := []struct {
		topic string
		code  byte
	}{
		{"allowed/x", 0},
		{"dev/c1/temp", 0}, // {client_id}
		{"user/bob", 0},    // {username}
		{"denied/x", 0x87},
		{"dev/c2/temp", 0x87},
	}
	for _, tt := range tests {
		t.Run("publish "+tt.topic, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// paho returns the PUBACK with an error for a failure code.
			r, err := c.Publish(ctx, &paho.Publish{Topic: tt.topic, QoS: 1, Payload: []byte("x")})
			if r == nil {
				t.Fatalf("no PUBACK: %v", err)
			}
			// 0x10 "no matching subscribers" is a success too.
			if got := r.ReasonCode; (tt.code == 0 && got >= 0x80) || (tt.code != 0 && got != tt.code) {
				t.Fatalf("PUBACK reason 0x%02x, want 0x%02x", got, tt.code)
			}
		})
	}
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
	// The connection survived every refusal.
	c.publish(t, &paho.Publish{Topic: "allowed/y", QoS: 1, Payload: []byte("still here")})
	if m := c.receive(t); m.Topic != "allowed/y" {
		t.Fatalf("received %s", m.Topic)
	}
}

func TestPermMatrixMQTT3(t *testing.T) {
	b, _ := permBroker(t)
	url := "tcp://" + b.n.MQTTAddr().String()
	auth := func(o *mqtt3.ClientOptions) { o.SetUsername("bob").SetPassword("bob") }
	c := dial3(t, url, "c3", true, auth)

	t.Run("subscribe", func(t *testing.T) {
		tok := c.SubscribeMultiple(map[string]byte{"allowed/#": 1}, nil)
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("allowed: %v", tok.Error())
		}
		tok = c.Subscribe("denied/#", 1, nil)
		tok.WaitTimeout(5 * time.Second)
		st := tok.(*mqtt3.SubscribeToken)
		if code := st.Result()["denied/#"]; code != 0x80 {
			t.Fatalf("denied: SUBACK code 0x%02x, want 0x80", code)
		}
	})
	t.Run("publish allowed", func(t *testing.T) {
		c.publish(t, "allowed/x", 1, false, "ok")
		if m := c.receive(t); m.topic != "allowed/x" {
			t.Fatalf("got %v", m)
		}
	})
	t.Run("publish denied closes the connection", func(t *testing.T) {
		// MQTT 3 has no negative PUBACK: the server disconnects, as RabbitMQ.
		tok := c.Publish("denied/x", 1, false, "no")
		tok.WaitTimeout(2 * time.Second)
		deadline := time.Now().Add(5 * time.Second)
		for c.IsConnectionOpen() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if c.IsConnectionOpen() {
			t.Fatal("connection still open after a denied publish")
		}
	})
}

func TestPermMatrixSTOMP(t *testing.T) {
	b, _ := permBroker(t)
	login := func(t *testing.T) *stRaw {
		c := stDialRaw(t, b)
		c.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:bob\npasscode:bob\n\n\x00")
		if f := c.read(); f.Command != "CONNECTED" {
			t.Fatalf("CONNECT: %s %v", f.Command, f.Header)
		}
		return c
	}
	receipt := func(t *testing.T, c *stRaw, frame string) {
		t.Helper()
		c.write(frame)
		if f := c.read(); f.Command != "RECEIPT" {
			t.Fatalf("%q: got %s %v %q", frame, f.Command, f.Header, f.Body)
		}
	}
	refused := func(t *testing.T, frame, text string) {
		t.Helper()
		c := login(t)
		c.write(frame)
		f := c.expectError("access_refused")
		if !strings.Contains(string(f.Body), text) {
			t.Fatalf("ERROR body %q, want %q", f.Body, text)
		}
	}
	t.Run("allowed", func(t *testing.T) {
		c := login(t)
		receipt(t, c, "SUBSCRIBE\nid:0\ndestination:/topic/allowed.#\nreceipt:r1\n\n\x00")
		for _, dest := range []string{"/topic/allowed.x", "/exchange/amq.topic/allowed.y"} {
			c.write("SEND\ndestination:" + dest + "\nreceipt:r2\n\nhi\x00")
			got := map[string]bool{}
			for i := 0; i < 2; i++ { // the RECEIPT and the MESSAGE, in any order
				f := c.read()
				got[f.Command] = true
				if f.Command == "MESSAGE" && string(f.Body) != "hi" {
					t.Fatalf("MESSAGE %q", f.Body)
				}
			}
			if !got["RECEIPT"] || !got["MESSAGE"] {
				t.Fatalf("SEND to %s: got %v, want RECEIPT and MESSAGE", dest, got)
			}
		}
	})
	t.Run("send denied", func(t *testing.T) {
		refused(t, "SEND\ndestination:/topic/denied.x\n\nno\x00",
			"write access to topic 'denied.x' in exchange 'amq.topic' in vhost '/' refused for user 'bob'")
	})
	t.Run("send to exchange denied", func(t *testing.T) {
		refused(t, "SEND\ndestination:/exchange/amq.topic/denied.x\n\nno\x00",
			"write access to topic 'denied.x' in exchange 'amq.topic'")
	})
	t.Run("send denied by exchange permission", func(t *testing.T) {
		refused(t, "SEND\ndestination:/exchange/amq.direct/k\n\nno\x00",
			"write access to exchange 'amq.direct' in vhost '/' refused for user 'bob'")
	})
	t.Run("subscribe denied", func(t *testing.T) {
		refused(t, "SUBSCRIBE\nid:1\ndestination:/topic/denied.#\n\n\x00",
			"read access to topic 'denied.#' in exchange 'amq.topic' in vhost '/' refused for user 'bob'")
	})
	t.Run("subscribe to exchange denied", func(t *testing.T) {
		refused(t, "SUBSCRIBE\nid:1\ndestination:/exchange/amq.topic/denied.#\n\n\x00",
			"read access to topic 'denied.#' in exchange 'amq.topic'")
	})
}

func TestPermMatrixHTTP(t *testing.T) {
	b, bob := permBroker(t)
	_ = b
	pub := func(key string) map[string]any {
		return map[string]any{"properties": map[string]any{}, "routing_key": key, "payload": "x", "payload_encoding": "string"}
	}
	bob.expect(201, "PUT", "/api/queues/%2F/bobq", map[string]any{"auto_delete": false, "durable": false})
	t.Run("publish allowed", func(t *testing.T) {
		bob.expect(200, "POST", "/api/exchanges/%2F/amq.topic/publish", pub("allowed.x"))
	})
	t.Run("publish denied", func(t *testing.T) {
		// Publish refusals are 400 with the AMQP text, as for exchange
		// permissions (see TestMgmtPermissions).
		data := bob.expect(400, "POST", "/api/exchanges/%2F/amq.topic/publish", pub("denied.x"))
		if !strings.Contains(string(data), "write access to topic 'denied.x' in exchange 'amq.topic'") {
			t.Fatalf("body %s", data)
		}
	})
	t.Run("bind allowed", func(t *testing.T) {
		bob.expect(201, "POST", "/api/bindings/%2F/e/amq.topic/q/bobq", map[string]any{"routing_key": "allowed.#"})
	})
	t.Run("bind denied", func(t *testing.T) {
		bob.expect(401, "POST", "/api/bindings/%2F/e/amq.topic/q/bobq", map[string]any{"routing_key": "denied.#"})
	})
	t.Run("bad password", func(t *testing.T) {
		bob.as("bob", "wrong").expect(401, "GET", "/api/whoami", nil)
	})
}

// TestLoginRateLimitAllProtocols: after auth.failed_login_limit failures
// from 127.0.0.1 (over any protocol), every protocol refuses even the right
// password until the back-off ends.
func TestLoginRateLimitAllProtocols(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) {
		c.MQTT.Listen = "127.0.0.1:0"
		c.STOMP.Listen = "127.0.0.1:0"
		c.Auth.FailedLoginLimit = 3
		c.Auth.FailedLoginBackoff = time.Hour
	})
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(200, "GET", "/api/whoami", nil)
	if _, err := amqp.Dial("amqp://guest:bad@" + b.Addr + "/"); err == nil {
		t.Fatal("bad AMQP password accepted")
	}
	api.as("guest", "bad").expect(401, "GET", "/api/whoami", nil)
	if _, _, err := tryDial5(b.n.MQTTAddr().String(), &paho.Connect{ClientID: "x", CleanStart: true,
		Username: "guest", UsernameFlag: true, Password: []byte("bad"), PasswordFlag: true}); err == nil {
		t.Fatal("bad MQTT password accepted")
	}
	// Now blocked everywhere, with the right password too.
	api.expect(401, "GET", "/api/whoami", nil)
	if _, err := amqp.Dial(b.URL); err == nil {
		t.Fatal("AMQP login accepted while blocked")
	}
	_, ack, err := tryDial5(b.n.MQTTAddr().String(), &paho.Connect{ClientID: "y", CleanStart: true,
		Username: "guest", UsernameFlag: true, Password: []byte("guest"), PasswordFlag: true})
	if err == nil || ack == nil || ack.ReasonCode != 0x86 {
		t.Fatalf("MQTT login while blocked: err %v, ack %+v; want reason 0x86", err, ack)
	}
	nc, err := net.Dial("tcp", stAddr(b))
	if err != nil {
		t.Fatal(err)
	}
	c := &stRaw{t: t, nc: nc, r: stFrameReader(nc)}
	defer nc.Close()
	c.write("CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
	c.expectError("Bad CONNECT")
}

// TestPermMatrixMQTTResourcePermissions: ordinary (resource) permissions
// apply to MQTT as to AMQP: write on the MQTT exchange to publish, read to
// subscribe, vhost access to connect.
func TestPermMatrixMQTTResourcePermissions(t *testing.T) {
	b, bob := permBroker(t)
	admin := bob.as("guest", "guest")
	admin.expect(201, "PUT", "/api/users/nowrite", map[string]any{"password": "p", "tags": ""})
	admin.expect(201, "PUT", "/api/permissions/%2F/nowrite", map[string]any{"configure": ".*", "write": "^mqtt-subscription-", "read": ".*"})
	admin.expect(201, "PUT", "/api/users/noread", map[string]any{"password": "p", "tags": ""})
	admin.expect(201, "PUT", "/api/permissions/%2F/noread", map[string]any{"configure": ".*", "write": ".*", "read": "^$"})
	admin.expect(201, "PUT", "/api/users/novhost", map[string]any{"password": "p", "tags": ""})
	addr := b.n.MQTTAddr().String()
	login := func(user, id string) *paho.Connect {
		return &paho.Connect{ClientID: id, CleanStart: true, Username: user, UsernameFlag: true, Password: []byte("p"), PasswordFlag: true}
	}

	t.Run("publish without write permission", func(t *testing.T) {
		c, _ := dial5(t, addr, login("nowrite", "nw"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.Publish(ctx, &paho.Publish{Topic: "allowed/x", QoS: 1, Payload: []byte("x")})
		if r == nil || r.ReasonCode != 0x87 {
			t.Fatalf("PUBACK %+v (%v), want reason 0x87", r, err)
		}
	})
	t.Run("subscribe without read permission", func(t *testing.T) {
		c, _ := dial5(t, addr, login("noread", "nr"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "allowed/#", QoS: 1}}})
		if sa == nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 0x87 {
			t.Fatalf("SUBACK %+v (%v), want 0x87", sa, err)
		}
	})
	t.Run("connect without vhost access", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c := paho.NewClient(paho.ClientConfig{Conn: nc})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ca, err := c.Connect(ctx, login("novhost", "nv"))
		if ca == nil || ca.ReasonCode != 0x87 {
			t.Fatalf("CONNACK %+v (%v), want 0x87 not authorized", ca, err)
		}
	})
}
