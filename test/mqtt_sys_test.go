package test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

func sysBroker(t *testing.T, interval time.Duration) *broker {
	return startMQTTBroker(t, func(c *conf.Config) { c.MQTT.SysInterval = interval })
}

// waitSys waits for a message on topic with payload want (any payload if
// want is ""), skipping others.
func waitSys(t *testing.T, c *client3, topic, want string) msg3 {
	t.Helper()
	deadline := time.After(15 * time.Second)
	var last string
	for {
		select {
		case m := <-c.msgs:
			if m.topic == topic {
				last = m.payload
				if want == "" || m.payload == want {
					return m
				}
			}
		case <-deadline:
			t.Fatalf("no %s = %q (last %q)", topic, want, last)
		}
	}
}

// waitUntilSys waits for a value of topic that ok accepts.
func waitUntilSys(t *testing.T, c *client3, topic string, ok func(string) bool) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m := <-c.msgs:
			if m.topic == topic && ok(m.payload) {
				return
			}
		case <-deadline:
			t.Fatalf("no acceptable %s", topic)
		}
	}
}

// TestMQTTSys: $SYS/broker/... topics reach $SYS subscribers, retained on
// subscription and then on every interval; "#" does not match them; no
// client may publish to them.
func TestMQTTSys(t *testing.T) {
	b := sysBroker(t, 200*time.Millisecond)
	url := "tcp://" + b.mqttAddr()
	all := dial3(t, url, "sys-all", true)
	all.subscribe(t, "#", 0)
	sys := dial3(t, url, "sys-sub", true)
	sys.subscribe(t, "$SYS/#", 0)

	m := waitSys(t, sys, "$SYS/broker/version", "")
	if !strings.HasPrefix(m.payload, "trident version ") || !m.retain {
		t.Fatalf("$SYS/broker/version = %+v, want a retained \"trident version ...\"", m)
	}
	waitSys(t, sys, "$SYS/broker/clients/connected", "2")
	// A later interval's value comes as a live message (retain 0).
	third := dial3(t, url, "sys-third", false)
	m = waitSys(t, sys, "$SYS/broker/clients/connected", "3")
	if m.retain {
		t.Fatalf("live $SYS update with retain set: %+v", m)
	}
	third.Disconnect(50)
	waitSys(t, sys, "$SYS/broker/clients/disconnected", "1") // sys-third's persistent session
	waitSys(t, sys, "$SYS/broker/clients/total", "3")
	waitSys(t, sys, "$SYS/broker/subscriptions/count", "2")
	if m := waitSys(t, sys, "$SYS/broker/uptime", ""); !strings.HasSuffix(m.payload, " seconds") {
		t.Fatalf("uptime %q", m.payload)
	}
	all.publish(t, "a/b", 1, true, "x")
	waitSys(t, sys, "$SYS/broker/retained messages/count", "1")
	waitSys(t, sys, "$SYS/broker/messages/received", "1")
	// Load averages: a positive rate of received messages once a/b counted.
	waitUntilSys(t, sys, "$SYS/broker/load/messages/received/1min", func(v string) bool {
		f, err := strconv.ParseFloat(v, 64)
		return err == nil && f > 0
	})

	// "#" got a/b and no $SYS topic [MQTT-4.7.2-1].
	if m := all.receive(t); m.topic != "a/b" {
		t.Fatalf("'#' subscriber got %+v", m)
	}
	all.none(t, time.Second)

	// MQTT 5: PUBLISH to $SYS/x is refused with 0x87 and reaches nobody.
	c5, _ := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "sys-pub5", CleanStart: true, KeepAlive: 30})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c5.Publish(ctx, &paho.Publish{Topic: "$SYS/x", QoS: 1, Payload: []byte("forged")})
	if r == nil || r.ReasonCode != 0x87 {
		t.Fatalf("PUBLISH $SYS/x: %+v, %v; want reason 0x87", r, err)
	}
	// AMQP: a "$SYS." routing key on amq.topic reaches no $SYS subscriber.
	_, ach := channel(t, b.URL)
	if err := ach.Publish("amq.topic", "$SYS.broker.version", false, false, amqp.Publishing{Body: []byte("forged")}); err != nil {
		t.Fatal(err)
	}
	// MQTT 3.1.1: the connection is closed.
	p3 := dial3(t, url, "sys-pub3", true)
	tok := p3.Publish("$SYS/broker/clients/connected", 1, false, "999")
	tok.WaitTimeout(5 * time.Second)
	waitUntil(t, "3.1.1 publisher disconnected", func() bool { return !p3.IsConnectionOpen() })
	deadline := time.After(time.Second)
	for done := false; !done; {
		select {
		case m := <-sys.msgs:
			if m.topic == "$SYS/x" || m.payload == "999" || m.payload == "forged" {
				t.Fatalf("forged $SYS message delivered: %+v", m)
			}
		case <-deadline:
			done = true
		}
	}
}

// TestMQTTSysPermission: a $SYS subscription is checked as any other
// (read on the filter's routing key "$SYS.#" under the user's topic
// permissions on amq.topic); with sys_interval 0 nothing is published.
func TestMQTTSysPermission(t *testing.T) {
	b := sysBroker(t, 100*time.Millisecond)
	us := b.n.Users()
	if err := us.PutUser("sysu", "sysu", nil); err != nil {
		t.Fatal(err)
	}
	if err := us.SetPermissions("sysu", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	if err := us.SetTopicPermissions("sysu", "/", "amq.topic", ".*", "^sensors\\..*"); err != nil {
		t.Fatal(err)
	}
	c := dial3(t, "tcp://"+b.mqttAddr(), "sys-perm", true, func(o *mqtt3.ClientOptions) { o.SetUsername("sysu").SetPassword("sysu") })
	c.subscribe(t, "sensors/#", 0)
	tok := c.Subscribe("$SYS/#", 0, nil)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	if got := tok.(*mqtt3.SubscribeToken).Result()["$SYS/#"]; got != 0x80 {
		t.Fatalf("$SYS/# without read on $SYS.#: granted 0x%02x, want 0x80", got)
	}
	c.none(t, 500*time.Millisecond)

	off := sysBroker(t, 0)
	s := dial3(t, "tcp://"+off.mqttAddr(), "sys-off", true)
	s.subscribe(t, "$SYS/#", 0)
	s.none(t, 500*time.Millisecond)
}
