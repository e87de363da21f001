package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestMQTT5PropertiesAcrossAMQP(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	_, ch := channel(t, b.URL)
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	if err := ch.QueueBind(q.Name, "req.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := dial5(t, addr, &paho.Connect{ClientID: "v5props", CleanStart: true})
	c.subscribe(t, paho.SubscribeOptions{Topic: "resp/#", QoS: 1})
	c.publish(t, &paho.Publish{Topic: "req/a", QoS: 1, Payload: []byte("ping"), Properties: &paho.PublishProperties{
		ContentType: "text/plain", ResponseTopic: "resp/a", CorrelationData: []byte("c-1"), MessageExpiry: u32(60),
		User: paho.UserProperties{{Key: "k", Value: "v"}}}})
	d := receive(t, ds)
	if d.ContentType != "text/plain" || d.ReplyTo != "resp.a" || d.CorrelationId != "c-1" || d.Headers["k"] != "v" || d.Expiration != "60000" {
		t.Fatalf("AMQP side: ct %q reply-to %q corr %q headers %v exp %q", d.ContentType, d.ReplyTo, d.CorrelationId, d.Headers, d.Expiration)
	}
	// The AMQP responder answers to reply-to through amq.topic.
	if err := ch.PublishWithContext(context.Background(), "amq.topic", d.ReplyTo, false, false, amqp.Publishing{
		Body: []byte("pong"), CorrelationId: d.CorrelationId, ContentType: "text/plain", DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"h": "w"}}); err != nil {
		t.Fatal(err)
	}
	m := c.receive(t)
	if m.Topic != "resp/a" || string(m.Payload) != "pong" || string(m.Properties.CorrelationData) != "c-1" ||
		m.Properties.ContentType != "text/plain" || m.Properties.User.Get("h") != "w" || m.QoS != 1 {
		t.Fatalf("MQTT side: %s %q ct %q corr %q user %v qos %d", m.Topic, m.Payload, m.Properties.ContentType, m.Properties.CorrelationData, m.Properties.User, m.QoS)
	}
}

func TestMQTT5SubscriptionOptions(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	c, _ := dial5(t, addr, &paho.Connect{ClientID: "v5opts", CleanStart: true})
	c.subscribeWith(t, &paho.SubscribeProperties{SubscriptionIdentifier: intp(7)},
		paho.SubscribeOptions{Topic: "nl/#", QoS: 1, NoLocal: true})
	c.subscribeWith(t, &paho.SubscribeProperties{SubscriptionIdentifier: intp(9)},
		paho.SubscribeOptions{Topic: "rap/#", QoS: 1, RetainAsPublished: true})

	// No local: our own publish is not delivered back; another client's is.
	c.publish(t, &paho.Publish{Topic: "nl/x", QoS: 1, Payload: []byte("mine")})
	c.none(t, 200*time.Millisecond)
	o, _ := dial5(t, addr, &paho.Connect{ClientID: "v5other", CleanStart: true})
	o.publish(t, &paho.Publish{Topic: "nl/x", QoS: 1, Payload: []byte("theirs")})
	m := c.receive(t)
	if string(m.Payload) != "theirs" || m.Properties.SubscriptionIdentifier == nil || *m.Properties.SubscriptionIdentifier != 7 {
		t.Fatalf("no-local: %q sub id %v", m.Payload, m.Properties.SubscriptionIdentifier)
	}
	// Retain as published keeps the retain flag on live delivery.
	o.publish(t, &paho.Publish{Topic: "rap/x", QoS: 1, Retain: true, Payload: []byte("r")})
	if m := c.receive(t); !m.Retain || *m.Properties.SubscriptionIdentifier != 9 {
		t.Fatalf("retain as published: retain %v", m.Retain)
	}
	// Retain handling 2: no retained message on subscribe.
	n, _ := dial5(t, addr, &paho.Connect{ClientID: "v5rh", CleanStart: true})
	n.subscribe(t, paho.SubscribeOptions{Topic: "rap/#", QoS: 1, RetainHandling: 2})
	n.none(t, 200*time.Millisecond)

	// Topic alias: the second publish names the topic by alias only.
	o.publish(t, &paho.Publish{Topic: "nl/alias", QoS: 1, Payload: []byte("a1"), Properties: &paho.PublishProperties{TopicAlias: u16(3)}})
	o.publish(t, &paho.Publish{Topic: "", QoS: 1, Payload: []byte("a2"), Properties: &paho.PublishProperties{TopicAlias: u16(3)}})
	for _, want := range []string{"a1", "a2"} {
		if m := c.receive(t); string(m.Payload) != want || m.Topic != "nl/alias" {
			t.Fatalf("alias: %q on %q", m.Payload, m.Topic)
		}
	}
	// Unroutable QoS 1: reason 0x10 no matching subscribers.
	if r := o.publish(t, &paho.Publish{Topic: "nobody/here", QoS: 1, Payload: []byte("x")}); r.ReasonCode != 0x10 {
		t.Fatalf("puback reason %#x, want 0x10", r.ReasonCode)
	}
}

func TestMQTT5SharedSubscription(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	var members []*client5
	for i := 0; i < 3; i++ {
		c, _ := dial5(t, addr, &paho.Connect{ClientID: fmt.Sprintf("shared-%d", i), CleanStart: true})
		c.subscribe(t, paho.SubscribeOptions{Topic: "$share/g1/work/+", QoS: 1})
		members = append(members, c)
	}
	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "shared-pub", CleanStart: true})
	const n = 30
	for i := 0; i < n; i++ {
		pub.publish(t, &paho.Publish{Topic: "work/a", QoS: 1, Payload: []byte(fmt.Sprint(i))})
	}
	total := 0
	for _, m := range members {
		got := 0
		for {
			select {
			case <-m.msgs:
				got++
				continue
			case <-time.After(300 * time.Millisecond):
			}
			break
		}
		if got == 0 {
			t.Errorf("a group member got nothing")
		}
		total += got
	}
	if total != n {
		t.Fatalf("group got %d messages, want each of %d once", total, n)
	}
}

func TestMQTT5SessionExpiryAndWillDelay(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	watcher, _ := dial5(t, addr, &paho.Connect{ClientID: "w5", CleanStart: true})
	watcher.subscribe(t, paho.SubscribeOptions{Topic: "will5/#", QoS: 1})

	// A session with an expiry keeps QoS 1 messages while away.
	c, _, err := tryDial5(addr, &paho.Connect{ClientID: "exp5", CleanStart: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(60)}})
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe(t, paho.SubscribeOptions{Topic: "exp5/#", QoS: 1})
	_ = c.Disconnect(&paho.Disconnect{})
	watcher.publish(t, &paho.Publish{Topic: "exp5/x", QoS: 1, Payload: []byte("kept")})
	c2, ack := dial5(t, addr, &paho.Connect{ClientID: "exp5", CleanStart: false,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(60)}})
	if !ack.SessionPresent {
		t.Fatal("session not present")
	}
	if m := c2.receive(t); string(m.Payload) != "kept" {
		t.Fatalf("got %q", m.Payload)
	}

	// DISCONNECT 0x04 sends the will; with a will delay it waits.
	d, _, err := tryDial5(addr, &paho.Connect{ClientID: "will5c", CleanStart: true, KeepAlive: 30,
		WillMessage:    &paho.WillMessage{Topic: "will5/c", QoS: 1, Payload: []byte("bye")},
		WillProperties: &paho.WillProperties{WillDelayInterval: u32(1)},
		Properties:     &paho.ConnectProperties{SessionExpiryInterval: u32(30)}})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Disconnect(&paho.Disconnect{ReasonCode: 0x04})
	watcher.none(t, 500*time.Millisecond)
	if m := watcher.receive(t); string(m.Payload) != "bye" {
		t.Fatalf("will: %q", m.Payload)
	}
}

func intp(v int) *int { return &v }

// TestMQTT5WillDelayResumed: a client that comes back to its session
// within its will delay cancels the delayed will [MQTT-3.1.3-9]; when it
// leaves again the will waits for the delay from then, and is sent once
// (the session keeps the will's timer to stop).
func TestMQTT5WillDelayResumed(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	watcher, _ := dial5(t, addr, &paho.Connect{ClientID: "w5r", CleanStart: true})
	watcher.subscribe(t, paho.SubscribeOptions{Topic: "will5r/#", QoS: 1})
	connect := func(clean bool) *client5 {
		c, _, err := tryDial5(addr, &paho.Connect{ClientID: "will5r", CleanStart: clean, KeepAlive: 30,
			WillMessage:    &paho.WillMessage{Topic: "will5r/c", QoS: 1, Payload: []byte("bye")},
			WillProperties: &paho.WillProperties{WillDelayInterval: u32(2)},
			Properties:     &paho.ConnectProperties{SessionExpiryInterval: u32(30)}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	d := connect(true)
	_ = d.Disconnect(&paho.Disconnect{ReasonCode: 0x04}) // the first will due 2 s from here
	time.Sleep(300 * time.Millisecond)
	d = connect(false)
	time.Sleep(700 * time.Millisecond)
	_ = d.Disconnect(&paho.Disconnect{ReasonCode: 0x04}) // the second due 2 s from here
	watcher.none(t, 1500*time.Millisecond)               // past when the first was due
	if m := watcher.receive(t); string(m.Payload) != "bye" {
		t.Fatalf("will: %q", m.Payload)
	}
	watcher.none(t, time.Second)
}
