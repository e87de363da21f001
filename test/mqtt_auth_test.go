package test

import (
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/trident-broker/trident/conf"
)

// TestMQTTAnonymous: mqtt.allow_anonymous (off by default, unlike RabbitMQ;
// the test helpers turn it on) logs a client without credentials in as
// mqtt.default_user, a user of its own; off, such a CONNECT
// gets "bad user name or password" (v3 return code 4, v5 0x86), as
// RabbitMQ answers it, while clients with credentials still connect.
func TestMQTTAnonymous(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		b := startMQTTBroker(t)
		dial3(t, "tcp://"+b.mqttAddr(), "anon3", true).subscribe(t, "a/b", 1)
		dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "anon5", CleanStart: true})
	})
	t.Run("off", func(t *testing.T) {
		b := startMQTTBroker(t, func(c *conf.Config) { c.MQTT.AllowAnonymous = false })
		_, err := tryDial3("tcp://"+b.mqttAddr(), "anon3", true)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "bad user name or password") {
			t.Fatalf("v3 anonymous: err = %v, want bad user name or password (4)", err)
		}
		_, ack, err := tryDial5(b.mqttAddr(), &paho.Connect{ClientID: "anon5", CleanStart: true})
		if err == nil || ack == nil || ack.ReasonCode != 0x86 {
			t.Fatalf("v5 anonymous: err = %v, connack = %+v, want 0x86", err, ack)
		}
		dial3(t, "tcp://"+b.mqttAddr(), "named3", true, func(o *mqttOpts) { o.SetUsername("guest").SetPassword("guest") })
		dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "named5", CleanStart: true, Username: "guest",
			UsernameFlag: true, Password: []byte("guest"), PasswordFlag: true})
	})
	t.Run("mqtt.default_user", func(t *testing.T) {
		b := startMQTTBroker(t, func(c *conf.Config) { c.MQTT.DefaultUser, c.MQTT.DefaultPass = "device", "pw" })
		// The anonymous user does not exist yet: its login fails.
		if _, err := tryDial3("tcp://"+b.mqttAddr(), "dev0", true); err == nil {
			t.Fatal("anonymous login as a missing mqtt.default_user succeeded")
		}
		if err := b.n.Users().PutUser("device", "pw", nil); err != nil {
			t.Fatal(err)
		}
		if err := b.n.Users().SetPermissions("device", "/", ".*", ".*", ".*"); err != nil {
			t.Fatal(err)
		}
		dial3(t, "tcp://"+b.mqttAddr(), "dev1", true).subscribe(t, "d/#", 1)
	})
}

// TestMQTTWillPermissions: the will is checked at CONNECT, as RabbitMQ
// does: without write permission on the MQTT exchange, or without the
// topic permission on the will topic, the CONNECT is refused with
// "not authorized" (v5 0x87, v3 5); a CONNECT without a will is not.
func TestMQTTWillPermissions(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	us := b.n.Users()
	for _, u := range []string{"nowrite", "topical"} {
		if err := us.PutUser(u, "pw", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := us.SetPermissions("nowrite", "/", ".*", "^mqtt-subscription-.*", ".*"); err != nil {
		t.Fatal(err)
	}
	if err := us.SetPermissions("topical", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	if err := us.SetTopicPermissions("topical", "/", "amq.topic", `^status\.{client_id}$`, ".*"); err != nil {
		t.Fatal(err)
	}
	v5 := func(user, id, willTopic string) (*paho.Connack, error) {
		cp := &paho.Connect{ClientID: id, CleanStart: true, Username: user, UsernameFlag: true,
			Password: []byte("pw"), PasswordFlag: true}
		if willTopic != "" {
			cp.WillMessage = &paho.WillMessage{Topic: willTopic, Payload: []byte("gone"), QoS: 1}
		}
		c, ack, err := tryDial5(addr, cp)
		if err == nil {
			_ = c.Disconnect(&paho.Disconnect{})
		}
		return ack, err
	}
	v3 := func(user, id, willTopic string) error {
		c, err := tryDial3("tcp://"+addr, id, true, func(o *mqttOpts) {
			o.SetUsername(user).SetPassword("pw")
			if willTopic != "" {
				o.SetWill(willTopic, "gone", 1, false)
			}
		})
		if err == nil {
			c.Disconnect(10)
		}
		return err
	}
	refused := []struct{ user, id, topic string }{
		{"nowrite", "w1", "status/w1"}, // no write on amq.topic
		{"topical", "w2", "status/w3"}, // topic permission names another client
		{"topical", "w4", "other/w4"},  // outside the topic permission
	}
	for _, r := range refused {
		if ack, err := v5(r.user, r.id, r.topic); err == nil || ack == nil || ack.ReasonCode != 0x87 {
			t.Errorf("v5 %s will on %s: err = %v, connack = %+v, want 0x87", r.user, r.topic, err, ack)
		}
		if err := v3(r.user, r.id, r.topic); err == nil || !strings.Contains(strings.ToLower(err.Error()), "not authorized") {
			t.Errorf("v3 %s will on %s: err = %v, want not authorized (5)", r.user, r.topic, err)
		}
	}
	if _, err := v5("nowrite", "w5", ""); err != nil {
		t.Errorf("v5 without will: %v", err)
	}
	if _, err := v5("topical", "w6", "status/w6"); err != nil {
		t.Errorf("v5 permitted will: %v", err)
	}
	if err := v3("topical", "w7", "status/w7"); err != nil {
		t.Errorf("v3 permitted will: %v", err)
	}

	// A refused CONNECT does not take over the session it names.
	sub := dial3(t, "tcp://"+addr, "w8", true, func(o *mqttOpts) { o.SetUsername("topical").SetPassword("pw") })
	sub.subscribe(t, "status/#", 1)
	if err := v3("topical", "w8", "status/elsewhere"); err == nil {
		t.Fatal("refused will accepted")
	}
	if !sub.IsConnectionOpen() {
		t.Fatal("a refused CONNECT took the session over")
	}
}
