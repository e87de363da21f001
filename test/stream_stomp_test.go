package test

import (
	"strconv"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// Streams from STOMP and MQTT: a STOMP subscription to /amq/queue/<stream>
// with x-stream-offset (first, last, next, offset=N, timestamp=T; anything
// else is next, as RabbitMQ's STOMP plugin reads it) and client acks; MQTT
// and STOMP publishers reach a stream through exchange bindings.

func TestStreamSTOMPSubscribe(t *testing.T) {
	b := stBroker(t)
	declareStream(t, b.URL, "ss", streamArgs())
	_, pub := channel(t, b.URL)
	streamPublish(t, pub, "", "ss", numbered("m", 0, 10), nil)

	c := stDial(t, b)
	cases := []struct {
		offset string
		first  int
	}{
		{"first", 0}, {"offset=4", 4}, {"last", 9}, {"timestamp=1", 0},
	}
	for _, tc := range cases {
		sub, err := c.Subscribe("/amq/queue/ss", stomp.AckClientIndividual,
			stomp.SubscribeOpt.Header("prefetch-count", "5"), stomp.SubscribeOpt.Header("x-stream-offset", tc.offset))
		if err != nil {
			t.Fatal(err)
		}
		m := stRecv(t, sub)
		if string(m.Body) != "m"+strconv.Itoa(tc.first) || m.Header.Get("x-stream-offset") != strconv.Itoa(tc.first) {
			t.Fatalf("x-stream-offset %s: %q offset header %q", tc.offset, m.Body, m.Header.Get("x-stream-offset"))
		}
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
		_ = sub.Unsubscribe()
	}
	// Credit: at most prefetch-count unacked; a cumulative ACK (client mode) gives it back.
	sub, err := c.Subscribe("/amq/queue/ss", stomp.AckClient,
		stomp.SubscribeOpt.Header("prefetch-count", "3"), stomp.SubscribeOpt.Header("x-stream-offset", "first"))
	if err != nil {
		t.Fatal(err)
	}
	var last *stomp.Message
	for i := 0; i < 3; i++ {
		last = stRecv(t, sub)
	}
	select {
	case m := <-sub.C:
		t.Fatalf("a fourth message past prefetch-count 3: %q", m.Body)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.Ack(last); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		if m := stRecv(t, sub); string(m.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("after the ack: %q, want m%d", m.Body, i)
		}
	}
	// Unknown offset specs start at next, as RabbitMQ's plugin does.
	sub2, err := c.Subscribe("/amq/queue/ss", stomp.AckClientIndividual,
		stomp.SubscribeOpt.Header("prefetch-count", "5"), stomp.SubscribeOpt.Header("x-stream-offset", "bogus"))
	if err != nil {
		t.Fatal(err)
	}
	stSync(t, c) // the SUBSCRIBE is in effect before the publish
	streamPublish(t, pub, "", "ss", []string{"m10"}, nil)
	if m := stRecv(t, sub2); string(m.Body) != "m10" {
		t.Fatalf("bogus offset: %q, want the next message", m.Body)
	}
	// Without prefetch-count: RabbitMQ's ERROR.
	c2 := stDial(t, b)
	bad, err := c2.Subscribe("/amq/queue/ss", stomp.AckClient, stomp.SubscribeOpt.Header("x-stream-offset", "first"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-bad.C:
		if m.Err == nil || m.Header.Get("message") != "precondition_failed" ||
			string(m.Body) != "PRECONDITION_FAILED - consumer prefetch count is not set for 'queue 'ss' in vhost '/''" {
			t.Fatalf("subscribe without prefetch-count: %v %q %q", m.Err, m.Header.Get("message"), m.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ERROR for a stream subscription without prefetch-count")
	}
}

func TestStreamPublishFromSTOMPAndMQTT(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) {
		c.STOMP.Listen = "127.0.0.1:0"
		c.MQTT.Listen = "127.0.0.1:0"
		anonMQTT(c)
	})
	declareStream(t, b.URL, "events", streamArgs())
	_, ch := channel(t, b.URL)
	if err := ch.QueueBind("events", "sensors.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	m := dial3(t, "tcp://"+b.mqttAddr(), "stream-pub", true)
	m.publish(t, "sensors/1/temp", 1, false, "from-mqtt")
	s := stDial(t, b)
	if err := s.Send("/topic/sensors.2.temp", "text/plain", []byte("from-stomp"), stomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	_, ds := consumeStream(t, b.URL, "events", 10, amqp.Table{"x-stream-offset": "first"})
	bodies, _ := takeStream(t, ds, 2)
	if bodies[0] != "from-mqtt" || bodies[1] != "from-stomp" {
		t.Fatalf("stream holds %v", bodies)
	}
	noDelivery(t, ds, 200*time.Millisecond)
}
