package test

import (
	"fmt"
	"testing"

	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestMQTTFanoutSharedEncoding: one publish fanned out to MQTT 3.1.1 and
// MQTT 5 sessions, each with its own queue, reaches every subscriber
// correctly, whether the PUBLISH it gets is the shared encoding (the same
// bytes for every such subscriber, its own packet id patched in at QoS > 0)
// or one of its own (a subscription identifier, a topic alias, a remaining
// message expiry). Publishers: MQTT 3.1.1 at QoS 0 (its packet is the
// shared encoding as it came) and 1, MQTT 5 with properties, AMQP.
func TestMQTTFanoutSharedEncoding(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	const n = 20 // per publisher, so that packet ids vary

	v3 := make([]*client3, 3)
	for q := range v3 {
		v3[q] = dial3(t, url, fmt.Sprintf("fan-v3-q%d", q), true)
		v3[q].subscribe(t, "fan/#", byte(q))
	}
	type sub5 struct {
		name  string
		c     *client5
		qos   byte
		id    int // subscription identifier, 0: none
		rap   bool
		alias bool
	}
	subs5 := []*sub5{
		{name: "q0", qos: 0}, {name: "q1", qos: 1}, {name: "q2", qos: 2},
		{name: "q0-rap", qos: 0, rap: true},
		{name: "q1-subid", qos: 1, id: 42},
		{name: "q1-alias", qos: 1, alias: true},
	}
	for _, s := range subs5 {
		cp := &paho.Connect{ClientID: "fan-v5-" + s.name, CleanStart: true}
		if s.alias {
			cp.Properties = &paho.ConnectProperties{TopicAliasMaximum: u16(4)}
		}
		s.c, _ = dial5(t, b.mqttAddr(), cp)
		var props *paho.SubscribeProperties
		if s.id != 0 {
			props = &paho.SubscribeProperties{SubscriptionIdentifier: intp(s.id)}
		}
		s.c.subscribeWith(t, props, paho.SubscribeOptions{Topic: "fan/#", QoS: s.qos, RetainAsPublished: s.rap})
	}

	type sent struct {
		topic, payload string
		qos            byte // published with
		retain         bool
		v5props        bool // content type and a user property
		expiry         bool
	}
	var all []sent
	pub3 := dial3(t, url, "fan-pub3", true)
	for i := range n {
		s := sent{topic: "fan/v3/q0", payload: fmt.Sprintf("v3q0-%d", i), retain: i == n-1}
		pub3.publish(t, s.topic, 0, s.retain, s.payload)
		all = append(all, s)
	}
	for i := range n {
		s := sent{topic: "fan/v3/q1", payload: fmt.Sprintf("v3q1-%d", i), qos: 1}
		pub3.publish(t, s.topic, 1, false, s.payload)
		all = append(all, s)
	}
	pub5, _ := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "fan-pub5", CleanStart: true})
	for i := range n {
		s := sent{topic: "fan/v5/q2", payload: fmt.Sprintf("v5q2-%d", i), qos: 2, v5props: true, retain: i == 0, expiry: i%2 == 1}
		p := &paho.Publish{Topic: s.topic, QoS: 2, Retain: s.retain, Payload: []byte(s.payload),
			Properties: &paho.PublishProperties{ContentType: "text/plain",
				User: paho.UserProperties{{Key: "k", Value: "v"}}}}
		if s.expiry {
			p.Properties.MessageExpiry = u32(600)
		}
		pub5.publish(t, p)
		all = append(all, s)
	}
	_, ch := channel(t, b.URL)
	for i := range n {
		s := sent{topic: "fan/amqp", payload: fmt.Sprintf("amqp-%d", i), qos: 1}
		if err := ch.Publish("amq.topic", "fan.amqp", false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(s.payload)}); err != nil {
			t.Fatal(err)
		}
		all = append(all, s)
	}

	for q, c := range v3 {
		for _, s := range all {
			m := c.receive(t)
			want := min(byte(q), s.qos)
			if m.topic != s.topic || m.payload != s.payload || m.qos != want || m.retain || m.dup {
				t.Fatalf("v3 QoS %d subscriber: got %+v, want %s %q at QoS %d", q, m, s.topic, s.payload, want)
			}
		}
		c.none(t, 0)
	}
	for _, sub := range subs5 {
		seen := map[string]bool{} // topics already sent, so aliased
		for _, s := range all {
			m := sub.c.receive(t)
			want := min(sub.qos, s.qos)
			p := m.Properties
			topic := m.Topic
			if topic == "" && p != nil && p.TopicAlias != nil {
				topic = "(alias)"
			}
			if m.Payload == nil || string(m.Payload) != s.payload || m.QoS != want || m.Retain != (sub.rap && s.retain) {
				t.Fatalf("v5 %s: got %s %q QoS %d retain %v, want %s %q QoS %d", sub.name, topic, m.Payload, m.QoS, m.Retain, s.topic, s.payload, want)
			}
			if sub.alias {
				if p == nil || p.TopicAlias == nil || (seen[s.topic] && m.Topic != "") || (!seen[s.topic] && m.Topic != s.topic) {
					t.Fatalf("v5 %s: %q got topic %q alias %v", sub.name, s.payload, m.Topic, p)
				}
				seen[s.topic] = true
			} else if m.Topic != s.topic {
				t.Fatalf("v5 %s: %q on topic %q, want %q", sub.name, s.payload, m.Topic, s.topic)
			}
			gotID := 0
			if p != nil && p.SubscriptionIdentifier != nil {
				gotID = *p.SubscriptionIdentifier
			}
			if gotID != sub.id {
				t.Fatalf("v5 %s: %q subscription identifier %d, want %d", sub.name, s.payload, gotID, sub.id)
			}
			hasProps := p != nil && p.ContentType == "text/plain" && p.User.Get("k") == "v"
			if hasProps != s.v5props {
				t.Fatalf("v5 %s: %q properties %+v", sub.name, s.payload, p)
			}
			if hasExp := p != nil && p.MessageExpiry != nil; hasExp != s.expiry || (hasExp && (*p.MessageExpiry == 0 || *p.MessageExpiry > 600)) {
				t.Fatalf("v5 %s: %q message expiry %v, want one: %v", sub.name, s.payload, p.MessageExpiry, s.expiry)
			}
		}
		sub.c.none(t, 0)
	}
}
