package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// Retry with back-off (x-retry-delays, policy retry-delays) with real
// clients of every protocol.

// retryQueue declares queue q with the given retry delays, dead-lettering
// to a fanout "rdlx" bound to queue "rdead".
func retryQueue(t *testing.T, ch *amqp.Channel, q string, delays any, extra amqp.Table) {
	t.Helper()
	if err := ch.ExchangeDeclare("rdlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("rdead", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("rdead", "", "rdlx", false, nil); err != nil {
		t.Fatal(err)
	}
	args := amqp.Table{"x-dead-letter-exchange": "rdlx"}
	if delays != nil {
		args["x-retry-delays"] = delays
	}
	for k, v := range extra {
		args[k] = v
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
}

func retryCount(d amqp.Delivery) int64 {
	switch n := d.Headers["x-retry-count"].(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	}
	return -1
}

func TestRetryAMQPNackRejectThenDeadLetter(t *testing.T) {
	for _, kind := range []string{"classic", "quorum"} {
		t.Run(kind, func(t *testing.T) { testRetryAMQP(t, kind) })
	}
}

func testRetryAMQP(t *testing.T, kind string) {
	b := startBroker(t)
	_, ch := channel(t, b.URL)
	retryQueue(t, ch, "rq", "200ms,400ms", amqp.Table{"x-queue-type": kind})
	if err := ch.PublishWithContext(context.Background(), "", "rq", false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, Body: []byte("job")}); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("rq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds)
	if retryCount(d) != -1 {
		t.Fatalf("a first delivery carries x-retry-count %v", d.Headers["x-retry-count"])
	}
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
		at := time.Now()
		if i == 0 {
			err = d.Nack(false, false)
		} else {
			err = d.Reject(false)
		}
		if err != nil {
			t.Fatal(err)
		}
		d = receive(t, ds)
		if el := time.Since(at); el < want {
			t.Fatalf("retry %d after %v, before its delay %v", i+1, el, want)
		}
		if retryCount(d) != int64(i+1) || string(d.Body) != "job" {
			t.Fatalf("retry %d: %q x-retry-count %v", i+1, d.Body, d.Headers["x-retry-count"])
		}
	}
	if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	dead, err := ch.Consume("rdead", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	dl := receive(t, dead)
	deaths, _ := dl.Headers["x-death"].([]any)
	if len(deaths) != 1 || deaths[0].(amqp.Table)["reason"] != "rejected" || deaths[0].(amqp.Table)["queue"] != "rq" {
		t.Fatalf("x-death of the dead letter: %v", dl.Headers["x-death"])
	}
	noDelivery(t, ds, 600*time.Millisecond)

	// A malformed value: 406 naming the argument.
	_, ch2 := channel(t, b.URL)
	_, err = ch2.QueueDeclare("rq-bad", false, false, false, false, amqp.Table{"x-retry-delays": "1s,then"})
	if amqpCode(err) != amqp.PreconditionFailed || !strings.Contains(err.Error(), "x-retry-delays") {
		t.Fatalf("malformed x-retry-delays: %v", err)
	}
}

// A delivery whose channel dies unacknowledged comes back after the delay,
// counted; nack with requeue stays an immediate requeue.
func TestRetryAMQPChannelDies(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)
	retryQueue(t, ch, "rq2", "300ms", nil)
	if err := ch.PublishWithContext(context.Background(), "", "rq2", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	conn2, ch2 := channel(t, b.URL)
	ds2, err := ch2.Consume("rq2", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds2)
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	d = receive(t, ds2)
	if !d.Redelivered || retryCount(d) != -1 {
		t.Fatalf("nack with requeue: redelivered %v, x-retry-count %v", d.Redelivered, d.Headers["x-retry-count"])
	}
	at := time.Now()
	conn2.Close() // unacknowledged
	ds, err := ch.Consume("rq2", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d = receive(t, ds)
	if time.Since(at) < 300*time.Millisecond || retryCount(d) != 1 {
		t.Fatalf("after its channel died: back after %v with x-retry-count %v", time.Since(at), d.Headers["x-retry-count"])
	}

	// The vhost counts the messages waiting for a retry.
	retryQueue(t, ch, "rq-slow", "60s", nil)
	if err := ch.PublishWithContext(context.Background(), "", "rq-slow", false, false, amqp.Publishing{Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	g, ok, err := ch.Get("rq-slow", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := g.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "messages_retrying 1", func() bool { return num(api.object("/api/vhosts/%2F")["messages_retrying"]) == 1 })
}

func TestRetrySTOMPNack(t *testing.T) {
	b := stBroker(t)
	_, ch := channel(t, b.URL)
	retryQueue(t, ch, "srq", "250ms", nil)
	c := stDial(t, b, stHostOpt())
	sub, err := c.Subscribe("/amq/queue/srq", stomp.AckClientIndividual)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", "srq", false, false, amqp.Publishing{Body: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	m := stRecv(t, sub)
	at := time.Now()
	if err := c.Nack(m); err != nil {
		t.Fatal(err)
	}
	stNone(t, sub, 150*time.Millisecond)
	m = stRecv(t, sub)
	if time.Since(at) < 250*time.Millisecond || m.Header.Get("x-retry-count") != "1" {
		t.Fatalf("after NACK: back after %v, x-retry-count %q", time.Since(at), m.Header.Get("x-retry-count"))
	}
	// Past the last delay a NACK dead-letters it.
	if err := c.Nack(m); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead letter", func() bool {
		q, err := ch.QueueDeclarePassive("rdead", true, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
}

// An MQTT 5 PUBACK with an error reason code rejects the message of a
// queue with retry delays (here from a policy on the session's queue).
func TestRetryMQTT5PubackError(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) {
		c.MQTT.Listen = "127.0.0.1:0"
		anonMQTT(c)
	})
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	api.expect(201, "PUT", "/api/policies/%2F/mqtt-retry", map[string]any{"pattern": "^mqtt-subscription-", "apply-to": "queues",
		"definition": map[string]any{"retry-delays": "300ms"}})
	r, _ := dialRaw5(t, b.mqttAddr(), "retry5")
	r.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.SubOptions{{Topic: "r/x", QoS: 1}}})
	r.expect(packets.SUBACK)
	_, ch := channel(t, b.URL)
	if err := ch.PublishWithContext(context.Background(), "amq.topic", "r.x", false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, Body: []byte("m5")}); err != nil { // persistent: delivered at QoS 1
		t.Fatal(err)
	}
	p := r.expect(packets.PUBLISH).Content.(*packets.Publish)
	at := time.Now()
	r.send(&packets.Puback{PacketID: p.PacketID, ReasonCode: 0x80, Properties: &packets.Properties{}})
	p2 := r.expect(packets.PUBLISH).Content.(*packets.Publish)
	if string(p2.Payload) != "m5" || time.Since(at) < 300*time.Millisecond {
		t.Fatalf("after PUBACK 0x80: %q after %v", p2.Payload, time.Since(at))
	}
	r.send(&packets.Puback{PacketID: p2.PacketID, Properties: &packets.Properties{}})
	r.quiet(500 * time.Millisecond)
}

// A persistent message waiting for its retry survives kill -9.
func TestRetrySurvivesKill(t *testing.T) {
	p := testbin.Start(t)
	conn, ch := procChannel(t, p)
	retryQueue(t, ch, "krq", "2s", nil)
	crashPublishConfirmed(t, ch, "krq", 3) // "0", "1", "2", on disk
	ds, err := ch.Consume("krq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		d := receive(t, ds)
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	// The rejects are asynchronous: a round trip makes sure they arrived.
	if _, err := ch.QueueDeclarePassive("krq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Each message is in the queue's store or in the retry store (its
	// retry is appended before the queue's copy is deleted): none is lost.
	ch = killRestart(t, p, conn)
	got := crashDrain(t, ch, "krq", 3)
	if len(got) != 3 {
		t.Fatalf("%d retried messages after kill -9, want 3: %v", len(got), got)
	}
}
