package test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// Delayed messages (x-delayed-message, as RabbitMQ's delayed message
// exchange plugin) with real clients.

func declareDelayed(t testing.TB, ch *amqp.Channel, name, kind string) {
	t.Helper()
	if err := ch.ExchangeDeclare(name, "x-delayed-message", true, false, false, false,
		amqp.Table{"x-delayed-type": kind}); err != nil {
		t.Fatalf("declare delayed exchange: %v", err)
	}
}

func TestDelayedAMQPAndAPI(t *testing.T) {
	b, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	_, ch := channel(t, b.URL)

	// No x-delayed-type: 406, as the plugin.
	_, bad := channel(t, b.URL)
	err := bad.ExchangeDeclare("nodelay", "x-delayed-message", true, false, false, false, nil)
	if amqpCode(err) != amqp.PreconditionFailed {
		t.Fatalf("declare without x-delayed-type: %v, want 406", err)
	}

	declareDelayed(t, ch, "dx", "direct")
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dq", "k", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("dq", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 10))
	pub := func(body string, h amqp.Table) {
		t.Helper()
		if err := ch.PublishWithContext(context.Background(), "dx", "k", true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Headers: h, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %s nacked", body)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no confirm for %s", body)
		}
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 4))
	start := time.Now()
	pub("later", amqp.Table{"x-delay": int32(600)})
	pub("sooner", amqp.Table{"x-delay": int32(300)})
	pub("negative", amqp.Table{"x-delay": int32(-100)})
	pub("none", nil)

	x := api.object("/api/exchanges/%2F/dx")
	if x["type"] != "x-delayed-message" || num(x["messages_delayed"]) != 2 {
		t.Fatalf("exchange in the API: type %v, messages_delayed %v; want 2 held", x["type"], x["messages_delayed"])
	}
	want := []string{"negative", "none", "sooner", "later"}
	for i, w := range want {
		d := receive(t, ds)
		if string(d.Body) != w {
			t.Fatalf("delivery %d is %q, want %q", i, d.Body, w)
		}
		el := time.Since(start)
		switch w {
		case "sooner":
			if el < 300*time.Millisecond || d.Headers["x-delay"] != int32(-300) {
				t.Fatalf("sooner after %v with x-delay %v", el, d.Headers["x-delay"])
			}
		case "later":
			if el < 600*time.Millisecond || d.Headers["x-delay"] != int32(-600) {
				t.Fatalf("later after %v with x-delay %v", el, d.Headers["x-delay"])
			}
		}
	}
	select {
	case r := <-returns:
		t.Fatalf("a delayed mandatory publish was returned: %+v", r)
	default:
	}
	waitUntil(t, "messages_delayed back to 0", func() bool {
		return num(api.object("/api/exchanges/%2F/dx")["messages_delayed"]) == 0
	})
	var found bool
	for _, xt := range api.object("/api/overview")["exchange_types"].([]any) {
		if xt.(map[string]any)["name"] == "x-delayed-message" {
			found = true
		}
	}
	if !found {
		t.Fatal("x-delayed-message not among the overview's exchange types")
	}

	// A non-numeric x-delay: the channel is closed with 406 naming it.
	_, ch2 := channel(t, b.URL)
	closed := ch2.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch2.PublishWithContext(context.Background(), "dx", "k", false, false, amqp.Publishing{
		Headers: amqp.Table{"x-delay": "soon"}, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.PreconditionFailed || !strings.Contains(e.Reason, "x-delay") {
			t.Fatalf("non-numeric x-delay closed the channel with %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("non-numeric x-delay: channel not closed")
	}
}

// Persistent messages held by a durable delayed exchange survive kill -9:
// each is routed once after the restart, when due.
func TestDelayedSurvivesKill(t *testing.T) {
	const n = 2000
	p := testbin.Start(t)
	conn, ch := procChannel(t, p)
	declareDelayed(t, ch, "dx", "topic")
	if _, err := ch.QueueDeclare("dq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dq", "a.#", "dx", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n+10))
	for i := range n {
		mode := amqp.Persistent
		if i%100 == 99 {
			mode = amqp.Transient // lost with the restart, as a queue's
		}
		if err := ch.PublishWithContext(context.Background(), "dx", "a.b", false, false, amqp.Publishing{
			DeliveryMode: mode, Headers: amqp.Table{"x-delay": int32(2000 + i%500)}, Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("confirm %d nacked", i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d confirms", i, n)
		}
	}
	q, err := ch.QueueDeclarePassive("dq", true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Fatalf("delayed messages reached the queue early: %d (%v)", q.Messages, err)
	}
	ch = killRestart(t, p, conn)
	if err := ch.ExchangeDeclarePassive("dx", "x-delayed-message", true, false, false, false, nil); err != nil {
		t.Fatalf("delayed exchange after kill -9: %v", err)
	}
	want := n - n/100
	got := crashDrain(t, ch, "dq", want)
	if len(got) != want {
		t.Fatalf("%d delayed messages after kill -9, want %d", len(got), want)
	}
	seen := map[string]bool{}
	for _, b := range got {
		i, _ := strconv.Atoi(b)
		if seen[b] || i%100 == 99 {
			t.Fatalf("message %s duplicated or a transient one kept", b)
		}
		seen[b] = true
	}
}

func TestDelayedSTOMP(t *testing.T) {
	b := stBroker(t)
	_, ch := channel(t, b.URL)
	declareDelayed(t, ch, "sx", "direct")
	if _, err := ch.QueueDeclare("sq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("sq", "k", "sx", false, nil); err != nil {
		t.Fatal(err)
	}
	c := stDial(t, b, stHostOpt())
	sub, err := c.Subscribe("/amq/queue/sq", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Send("/exchange/sx/k", "text/plain", []byte("stomp-delayed"), stomp.SendOpt.Receipt,
		stomp.SendOpt.Header("x-delay", "400")); err != nil {
		t.Fatal(err)
	}
	stNone(t, sub, 200*time.Millisecond)
	m := stRecv(t, sub)
	if string(m.Body) != "stomp-delayed" || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("got %q after %v", m.Body, time.Since(start))
	}
	if m.Header.Get("x-delay") != "-400" {
		t.Fatalf("x-delay header %q, want -400", m.Header.Get("x-delay"))
	}
	// Non-numeric: an ERROR frame naming the header.
	if err := c.Send("/exchange/sx/k", "text/plain", []byte("bad"), stomp.SendOpt.Receipt,
		stomp.SendOpt.Header("x-delay", "later")); err == nil {
		t.Fatal("a non-numeric x-delay was accepted")
	} else if !strings.Contains(err.Error(), "precondition_failed") {
		t.Fatalf("non-numeric x-delay: %v", err)
	}
}

func TestDelayedMQTT5(t *testing.T) {
	b := startMQTTBroker(t, func(c *conf.Config) { c.MQTT.Exchange = "mqtt.delayed" })
	_, ch := channel(t, b.URL)
	declareDelayed(t, ch, "mqtt.delayed", "topic")
	c, _ := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "delayed5", CleanStart: true})
	c.subscribe(t, paho.SubscribeOptions{Topic: "d/+", QoS: 1})
	start := time.Now()
	r := c.publish(t, &paho.Publish{Topic: "d/x", QoS: 1, Payload: []byte("mqtt-delayed"),
		Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "x-delay", Value: "400"}}}})
	if r.ReasonCode >= 0x80 {
		t.Fatalf("PUBACK reason %#x", r.ReasonCode)
	}
	m := c.receive(t)
	el := time.Since(start)
	if string(m.Payload) != "mqtt-delayed" || el < 400*time.Millisecond {
		t.Fatalf("got %q after %v", m.Payload, el)
	}
	if v := m.Properties.User.Get("x-delay"); v != "-400" {
		t.Fatalf("x-delay user property %q, want -400", v)
	}
}
