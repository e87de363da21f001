package test

import (
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/go-stomp/stomp/v3"

	"github.com/trident-broker/trident/conf"
)

// TestSTOMPMQTT: MQTT and STOMP meet on amq.topic (MQTT's "/" is STOMP's ".").
func TestSTOMPMQTT(t *testing.T) {
	b := stBroker(t, func(c *conf.Config) { c.MQTT.Listen = "127.0.0.1:0" })
	got := make(chan string, 10)
	o := mqtt.NewClientOptions().AddBroker("tcp://" + b.n.MQTTAddr().String()).SetClientID("stomp-mqtt").
		SetUsername("guest").SetPassword("guest").SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	mc := mqtt.NewClient(o)
	if tok := mc.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	t.Cleanup(func() { mc.Disconnect(50) })
	tok := mc.Subscribe("sensors/+/temp", 1, func(_ mqtt.Client, m mqtt.Message) { got <- m.Topic() + "=" + string(m.Payload()) })
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt subscribe: %v", tok.Error())
	}

	c := stDial(t, b)
	sub, err := c.Subscribe("/topic/sensors.*.temp", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	stSync(t, c)

	// MQTT → STOMP (and the MQTT subscriber too).
	if tok := mc.Publish("sensors/a/temp", 1, false, "21"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt publish: %v", tok.Error())
	}
	if m := stRecv(t, sub); string(m.Body) != "21" || m.Destination != "/topic/sensors.a.temp" {
		t.Fatalf("stomp got %q at %q", m.Body, m.Destination)
	}
	// STOMP → MQTT.
	if err := c.Send("/topic/sensors.b.temp", "", []byte("22"), stomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"sensors/a/temp=21": true, "sensors/b/temp=22": true}
	for len(want) > 0 {
		select {
		case s := <-got:
			if !want[s] {
				t.Fatalf("mqtt got unexpected %s", s)
			}
			delete(want, s)
		case <-time.After(5 * time.Second):
			t.Fatalf("mqtt did not get %v", want)
		}
	}
}
