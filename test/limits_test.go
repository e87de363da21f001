package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// TestConnectionLimitsAcrossProtocols: limits.max_connections_per_user
// counts AMQP, MQTT and STOMP connections together; a connection over it
// is refused with each protocol's error, and a slot frees when a
// connection closes.
func TestConnectionLimitsAcrossProtocols(t *testing.T) {
	b := startBroker(t, allProtocols, func(c *conf.Config) { c.Limits.MaxConnectionsPerUser = 2 })
	first := dial(t, b.URL)
	asGuest := func(o *mqttOpts) { o.SetUsername("guest").SetPassword("guest") }
	m := dial3(t, "tcp://"+b.mqttAddr(), "limit-1", true, asGuest)

	_, err := amqp.Dial(b.URL)
	if amqpCode(err) != amqp.NotAllowed || !strings.Contains(err.Error(), "connection limit (2) is reached") {
		t.Fatalf("third connection (AMQP): %v, want 530 NOT_ALLOWED connection limit", err)
	}
	if _, err := tryDial3("tcp://"+b.mqttAddr(), "limit-2", true, asGuest); err == nil {
		t.Fatal("third connection (MQTT) accepted")
	}
	nc := stTransports[0].dial(t, b)
	if _, err := stomp.Connect(nc, stHostOpt(), stomp.ConnOpt.Login("guest", "guest")); err == nil || !strings.Contains(err.Error(), "Bad CONNECT") {
		t.Fatalf("third connection (STOMP): %v, want an ERROR frame", err)
	}
	nc.Close()

	// Closing one frees its slot, whatever the protocol.
	_ = first.Close()
	m.Disconnect(10)
	waitFor(t, func() bool { u, _ := b.n.Broker().Limiter().Connections("guest", "/"); return u == 0 })
	stDial(t, b)
	dial(t, b.URL)
}

// TestConnectionLimitPerVHost: limits.max_connections_per_vhost.
func TestConnectionLimitPerVHost(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.Limits.MaxConnectionsPerVHost = 1 })
	dial(t, b.URL)
	if _, err := amqp.Dial(b.URL); amqpCode(err) != amqp.NotAllowed {
		t.Fatalf("second connection to the vhost: %v, want 530", err)
	}
}

// TestQueueLimitPerVHost: limits.max_queues_per_vhost refuses a new queue
// with 406 PRECONDITION_FAILED, as RabbitMQ's vhost max-queues does, while
// redeclaring an existing queue still works.
func TestQueueLimitPerVHost(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.Limits.MaxQueuesPerVHost = 2 })
	_, ch := channel(t, b.URL)
	for _, q := range []string{"q1", "q2", "q1"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatalf("declare %s: %v", q, err)
		}
	}
	_, err := ch.QueueDeclare("q3", false, false, false, false, nil)
	if amqpCode(err) != amqp.PreconditionFailed || !strings.Contains(err.Error(), "queue limit in vhost '/' (2) is reached") {
		t.Fatalf("third queue: %v, want 406 queue limit", err)
	}
	_, ch = channel(t, b.URL)
	if _, err := ch.QueueDelete("q2", false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q3", false, false, false, false, nil); err != nil {
		t.Fatalf("declare after a delete: %v", err)
	}
}

// TestPublishRateLimit: limits.publish_rate_per_user slows publishers of
// every protocol by not reading their sockets; every message is confirmed
// and delivered, none dropped.
func TestPublishRateLimit(t *testing.T) {
	const rate = 50
	b := startBroker(t, allProtocols, func(c *conf.Config) { c.Limits.PublishRatePerUser = rate })
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("rate-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("rate-q", "rate.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// One second's burst, then 2*rate more: at least two seconds in all.
	const n = 3 * rate
	start := time.Now()
	var dcs []*amqp.DeferredConfirmation
	for i := range n - 2*10 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.topic", "rate.amqp", false, false,
			amqp.Publishing{Body: []byte(fmt.Sprint("amqp-", i))})
		if err != nil {
			t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	mq := dial3(t, "tcp://"+b.mqttAddr(), "rate-pub", true)
	st := stDial(t, b)
	for i := range 10 {
		mq.publish(t, "rate/mqtt", 1, false, fmt.Sprint("mqtt-", i))
		if err := st.Send("/topic/rate.stomp", "text/plain", []byte(fmt.Sprint("stomp-", i)), stomp.SendOpt.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	for i, dc := range dcs {
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish %d not confirmed: %v", i, err)
		}
	}
	if el := time.Since(start); el < 1500*time.Millisecond {
		t.Fatalf("%d messages at %d/s went through in %s", n, rate, el)
	}
	q, err := ch.QueueDeclarePassive("rate-q", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != n {
		t.Fatalf("%d messages queued, want %d", q.Messages, n)
	}
}

// TestMaxMessageSizeEveryProtocol: amqp.max_message_size bounds MQTT and
// STOMP publishes too.
func TestMaxMessageSizeEveryProtocol(t *testing.T) {
	b := startBroker(t, allProtocols, func(c *conf.Config) { c.AMQP.MaxMessageSize = 1024 })
	big := strings.Repeat("x", 2048)

	m := dial3(t, "tcp://"+b.mqttAddr(), "big-pub", true)
	m.Publish("big/mqtt", 1, false, big).WaitTimeout(2 * time.Second)
	waitFor(t, func() bool { return !m.IsConnectionOpen() })

	st := stDial(t, b)
	err := st.Send("/queue/big", "text/plain", []byte(big), stomp.SendOpt.Receipt)
	if err == nil {
		t.Fatal("STOMP SEND over max_message_size was accepted")
	}

	_, ch := channel(t, b.URL)
	if err := ch.PublishWithContext(context.Background(), "", "big", false, false, amqp.Publishing{Body: []byte(big)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("after", false, false, false, false, nil); amqpCode(err) == 0 {
		t.Fatalf("AMQP publish over max_message_size: channel still open (%v)", err)
	}
}

// TestSTOMPHeaderLimitsConfigurable: stomp.max_headers and
// stomp.max_header_length bound a frame's headers.
func TestSTOMPHeaderLimitsConfigurable(t *testing.T) {
	b := stBroker(t, func(c *conf.Config) { c.STOMP.MaxHeaders = 8; c.STOMP.MaxHeaderLength = 300 })
	c := stDialRaw(t, b)
	c.connect()
	var h strings.Builder
	for i := 0; i < 6; i++ {
		fmt.Fprintf(&h, "x-h%d:v\n", i)
	}
	// destination + 6 custom headers: within the limit of 8.
	c.write("SEND\ndestination:/queue/hl\nreceipt:r1\n" + h.String() + "\nbody\x00")
	if f := c.read(); f.Command != "RECEIPT" {
		t.Fatalf("want RECEIPT, got %s %v", f.Command, f.Header)
	}
	for i := 6; i < 12; i++ {
		fmt.Fprintf(&h, "x-h%d:v\n", i)
	}
	c.write("SEND\ndestination:/queue/hl\n" + h.String() + "\nbody\x00")
	c.expectError("Too many headers")

	c2 := stDialRaw(t, b)
	c2.connect()
	c2.write("SEND\ndestination:/queue/hl\nx-long:" + strings.Repeat("a", 400) + "\n\nbody\x00")
	f := c2.read()
	if f.Command != "ERROR" {
		t.Fatalf("a 400-byte header line with a 300-byte limit: got %s %v", f.Command, f.Header)
	}
}
