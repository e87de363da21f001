package test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestPolicyChangesQueueBehaviour: a policy set through the management
// API changes what AMQP clients see: max-length trims a live queue and
// caps new publishes; dead-letter-exchange dead-letters rejected
// messages; deleting the policy lifts it.
func TestPolicyChangesQueueBehaviour(t *testing.T) {
	b, base := mgmtBroker(t)
	a := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)

	if _, err := ch.QueueDeclare("pol.cap", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"1", "2", "3", "4", "5"} {
		if err := ch.Publish("", "pol.cap", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "5 messages queued", func() bool { return num(a.object("/api/queues/%2F/pol.cap")["messages"]) == 5 })

	// Invalid values are refused like RabbitMQ.
	code, body := a.do("PUT", "/api/policies/%2F/bad", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": -1}})
	if e, _ := errorBody(t, body); code != 400 || e != "bad_request" {
		t.Fatalf("negative max-length: %d %s", code, body)
	}

	a.expect(201, "PUT", "/api/policies/%2F/cap", map[string]any{"pattern": `^pol\.cap$`, "apply-to": "queues",
		"definition": map[string]any{"max-length": 2}, "priority": 0})
	q, err := ch.QueueDeclarePassive("pol.cap", true, false, false, false, nil)
	if err != nil || q.Messages != 2 {
		t.Fatalf("after a max-length 2 policy: %d messages, %v", q.Messages, err)
	}
	if err := ch.Publish("", "pol.cap", false, false, amqp.Publishing{Body: []byte("6")}); err != nil {
		t.Fatal(err)
	}
	var got []string
	waitUntil(t, "drain", func() bool {
		m, ok, err := ch.Get("pol.cap", true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(m.Body))
		}
		return !ok && len(got) >= 2
	})
	if !equalStrings(got, []string{"5", "6"}) {
		t.Fatalf("queue held %v, want the newest two", got)
	}
	if qj := a.object("/api/queues/%2F/pol.cap"); qj["policy"] != "cap" {
		t.Fatalf("queue JSON policy %v", qj["policy"])
	}
	a.expect(204, "DELETE", "/api/policies/%2F/cap", nil)
	for _, body := range []string{"a", "b", "c"} {
		if err := ch.Publish("", "pol.cap", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "3 messages once the policy is gone", func() bool {
		q, err := ch.QueueDeclarePassive("pol.cap", true, false, false, false, nil)
		return err == nil && q.Messages == 3
	})

	// dead-letter-exchange from a policy; the queue is declared after the
	// policy and picks it up at declare.
	if err := ch.ExchangeDeclare("pol.dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("pol.dead", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("pol.dead", "", "pol.dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	a.expect(201, "PUT", "/api/policies/%2F/dl", map[string]any{"pattern": `^pol\.work`, "apply-to": "queues",
		"definition": map[string]any{"dead-letter-exchange": "pol.dlx", "message-ttl": 100}})
	if _, err := ch.QueueDeclare("pol.work", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "pol.work", false, false, amqp.Publishing{Body: []byte("rejected")}); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("pol.work", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds)
	if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	// And the policy's message-ttl expires into the DLX too.
	if err := ch.Publish("", "pol.work", false, false, amqp.Publishing{Body: []byte("expired")}); err != nil {
		t.Fatal(err)
	}
	var dead []string
	var reasons []any
	waitUntil(t, "two dead-lettered messages", func() bool {
		m, ok, err := ch.Get("pol.dead", true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			dead = append(dead, string(m.Body))
			reasons = append(reasons, m.Headers["x-first-death-reason"])
		}
		return len(dead) == 2
	})
	if !equalStrings(dead, []string{"rejected", "expired"}) || reasons[0] != "rejected" || reasons[1] != "expired" {
		t.Fatalf("dead-lettered %v with reasons %v", dead, reasons)
	}
}
