package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// restrictedVHost starts a broker with AMQP, STOMP and the API, a vhost
// "va" holding private.q bound from the fanout private.x (the admin's),
// and a user u1 (tag management) whose configure, write and read
// permissions in va cover only names starting "u1.".
func restrictedVHost(t *testing.T) (*broker, apiClient, apiClient) {
	t.Helper()
	b, base := mgmtBroker(t, func(c *conf.Config) { c.STOMP.Listen = "127.0.0.1:0" })
	admin := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	admin.expect(201, "PUT", "/api/vhosts/va", nil)
	admin.expect(204, "PUT", "/api/permissions/va/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})
	admin.expect(201, "PUT", "/api/queues/va/private.q", map[string]any{"durable": true})
	admin.expect(201, "PUT", "/api/exchanges/va/private.x", map[string]any{"type": "fanout", "durable": true})
	admin.expect(201, "POST", "/api/bindings/va/e/private.x/q/private.q", map[string]any{"routing_key": ""})
	admin.expect(201, "PUT", "/api/users/u1", map[string]any{"password": "u1", "tags": "management"})
	admin.expect(201, "PUT", "/api/permissions/va/u1", map[string]any{"configure": `^u1\.`, "write": `^u1\.`, "read": `^u1\.`})
	return b, admin, admin.as("u1", "u1")
}

// privateCount is the number of messages in va's private.q.
func privateCount(t *testing.T, admin apiClient) float64 {
	t.Helper()
	return num(admin.object("/api/queues/va/private.q")["messages"])
}

// TestSecurityF4DeadLetterPermission: declaring a queue with a dead-letter
// exchange needs write on that exchange (and read on the queue), over
// AMQP, the HTTP API and STOMP alike (the core's one check), so a user
// cannot route into a queue it may not write by dead-lettering; the queue
// is not declared at all.
func TestSecurityF4DeadLetterPermission(t *testing.T) {
	b, admin, u1 := restrictedVHost(t)
	url := "amqp://u1:u1@" + b.Addr + "/va"

	// AMQP: the probe's exact declaration, and a named DLX.
	for _, dlx := range []string{"", "private.x"} {
		c := dial(t, url)
		ch := newChannel(t, c)
		_, err := ch.QueueDeclare("u1.dlq", false, false, false, false, amqp.Table{
			"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "private.q", "x-message-ttl": int32(0)})
		if amqpCode(err) != amqp.AccessRefused {
			t.Fatalf("AMQP declare with x-dead-letter-exchange %q: %v, want 403", dlx, err)
		}
		if !strings.Contains(err.Error(), "write access to exchange") {
			t.Fatalf("AMQP refusal does not name the exchange write: %v", err)
		}
	}
	// A DLX the user may write is fine; the queue then dead-letters there.
	c := dial(t, url)
	ch := newChannel(t, c)
	if err := ch.ExchangeDeclare("u1.dlx", "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("u1.ok", false, false, false, false, amqp.Table{"x-dead-letter-exchange": "u1.dlx"}); err != nil {
		t.Fatalf("declare with an allowed DLX: %v", err)
	}

	// HTTP API.
	u1.expect(401, "PUT", "/api/queues/va/u1.dlq", map[string]any{"arguments": map[string]any{
		"x-dead-letter-exchange": "private.x", "x-message-ttl": 0}})
	u1.expect(401, "PUT", "/api/queues/va/u1.dlq", map[string]any{"arguments": map[string]any{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "private.q"}})
	u1.expect(201, "PUT", "/api/queues/va/u1.api", map[string]any{"arguments": map[string]any{"x-dead-letter-exchange": "u1.dlx"}})

	// STOMP: a SUBSCRIBE and a SEND declaring /queue/u1.dlq with the DLX
	// as a header.
	for _, verb := range []string{"SUBSCRIBE", "SEND"} {
		sc := stDial(t, b, stomp.ConnOpt.Login("u1", "u1"), stomp.ConnOpt.Host("va"))
		var err error
		dlx := stomp.SubscribeOpt.Header("x-dead-letter-exchange", "private.x")
		if verb == "SUBSCRIBE" {
			var sub *stomp.Subscription
			sub, err = sc.Subscribe("/queue/u1.dlq", stomp.AckAuto, dlx, stomp.SubscribeOpt.Header("x-message-ttl", "0"))
			if err == nil {
				select {
				case m := <-sub.C:
					if m.Err != nil {
						err = m.Err
					}
				case <-time.After(5 * time.Second):
				}
			}
		} else {
			err = sc.Send("/queue/u1.dlq", "text/plain", []byte("x"), stomp.SendOpt.Receipt,
				stomp.SendOpt.Header("x-dead-letter-exchange", "private.x"))
		}
		if err == nil || !strings.Contains(strings.ReplaceAll(strings.ToLower(err.Error()), "_", " "), "access refused") {
			t.Fatalf("STOMP %s with x-dead-letter-exchange private.x: %v, want an access refused ERROR", verb, err)
		}
	}

	admin.expect(404, "GET", "/api/queues/va/u1.dlq", nil)
	if n := privateCount(t, admin); n != 0 {
		t.Fatalf("private.q holds %v messages", n)
	}
}

// TestSecurityF6AlternateExchangePermission: declaring an exchange with an
// alternate exchange needs write on it (and read on the exchange) over the
// HTTP API as over AMQP; refused, nothing is declared and nothing reaches
// private.q.
func TestSecurityF6AlternateExchangePermission(t *testing.T) {
	b, admin, u1 := restrictedVHost(t)
	u1.expect(401, "PUT", "/api/exchanges/va/u1.ae", map[string]any{"type": "fanout", "arguments": map[string]any{"alternate-exchange": "private.x"}})
	admin.expect(404, "GET", "/api/exchanges/va/u1.ae", nil)

	c := dial(t, "amqp://u1:u1@"+b.Addr+"/va")
	ch := newChannel(t, c)
	err := ch.ExchangeDeclare("u1.ae", "fanout", false, false, false, false, amqp.Table{"alternate-exchange": "private.x"})
	if amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("AMQP exchange.declare with alternate-exchange private.x: %v, want 403", err)
	}
	// Allowed alternate exchange: fine, and routes.
	u1.expect(201, "PUT", "/api/exchanges/va/u1.ae2", map[string]any{"type": "direct", "arguments": map[string]any{"alternate-exchange": "u1.x"}})

	// Whatever u1 publishes to its own exchanges, private.q stays empty.
	ch = newChannel(t, dial(t, "amqp://u1:u1@"+b.Addr+"/va"))
	if err := ch.PublishWithContext(context.Background(), "u1.ae2", "nowhere", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := privateCount(t, admin); n != 0 {
		t.Fatalf("private.q holds %v messages", n)
	}
}

// TestSecurityF15Names: queue, exchange and vhost names are at most 255
// bytes of UTF-8 without NUL on every path (the API here; AMQP's short
// strings cannot carry more than 255 bytes).
func TestSecurityF15Names(t *testing.T) {
	b, admin, _ := restrictedVHost(t)
	long := strings.Repeat("q", 300)
	admin.expect(400, "PUT", "/api/queues/va/"+long, map[string]any{})
	admin.expect(400, "PUT", "/api/queues/va/nul%00name", map[string]any{})
	admin.expect(400, "PUT", "/api/queues/va/bad%FFname", map[string]any{})
	admin.expect(400, "PUT", "/api/exchanges/va/"+long, map[string]any{"type": "direct"})
	admin.expect(400, "PUT", "/api/exchanges/va/nul%00name", map[string]any{"type": "direct"})
	if code, _ := admin.do("PUT", "/api/vhosts/"+long, nil); code < 400 {
		t.Fatalf("PUT vhost with a 300-byte name: %d", code)
	}
	if code, _ := admin.do("PUT", "/api/vhosts/nul%00v", nil); code < 400 {
		t.Fatalf("PUT vhost with a NUL: %d", code)
	}
	// Over AMQP: a NUL in a queue name is refused with 406.
	ch := newChannel(t, dial(t, b.URL))
	if _, err := ch.QueueDeclare("nul\x00q", false, false, false, false, nil); amqpCode(err) != amqp.PreconditionFailed {
		t.Fatalf("AMQP queue name with NUL: %v", err)
	}
	admin.expect(201, "PUT", "/api/queues/va/"+strings.Repeat("%C3%A9", 127), map[string]any{})
}

// TestSecurityAlivenessPermission: the aliveness test declares, publishes
// and gets on the user's behalf, so it needs the user's permissions on the
// queue aliveness-test and the default exchange, as RabbitMQ's (which runs
// it on the user's own channel).
func TestSecurityAlivenessPermission(t *testing.T) {
	_, admin, u1 := restrictedVHost(t)
	u1.expect(401, "GET", "/api/aliveness-test/va", nil)
	admin.expect(404, "GET", "/api/queues/va/aliveness-test", nil)
	admin.expect(200, "GET", "/api/aliveness-test/va", nil)
}
