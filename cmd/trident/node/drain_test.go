package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/trident-broker/trident/conf"
)

// TestDrainSuspendsClientListeners: a drain suspends every client
// protocol's listener (AMQP, MQTT and its WebSocket, STOMP and Web-STOMP,
// stream), as RabbitMQ's maintenance mode does, and a revive opens them
// again on the same addresses.
func TestDrainSuspendsClientListeners(t *testing.T) {
	cfg := testConfig(t)
	d := conf.Default()
	cfg.MQTT, cfg.STOMP = d.MQTT, d.STOMP
	cfg.MQTT.TLSListen, cfg.MQTT.WSSListen, cfg.STOMP.TLSListen, cfg.STOMP.WSSListen = "", "", "", ""
	cfg.MQTT.Listen, cfg.MQTT.WSListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.STOMP.Listen, cfg.STOMP.WSListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Stream.Listen = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode(t, n)
	addrs := map[string]net.Addr{"amqp": n.AMQPAddr(), "mqtt": n.MQTTAddr(), "mqtt-ws": n.MQTTWSAddr(),
		"stomp": n.STOMPAddr(), "web-stomp": n.STOMPWSAddr(), "stream": n.StreamAddr()}
	dial := func(a net.Addr) error {
		c, err := net.DialTimeout("tcp", a.String(), 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	for name, a := range addrs {
		if a == nil {
			t.Fatalf("%s: no listener", name)
		}
		if err := dial(a); err != nil {
			t.Fatalf("%s before the drain: %v", name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Maintenance().Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for name, a := range addrs {
		if err := dial(a); err == nil {
			t.Errorf("%s accepts a connection while drained", name)
		}
	}
	if err := n.Maintenance().Revive(); err != nil {
		t.Fatal(err)
	}
	for name, a := range addrs {
		if err := dial(a); err != nil {
			t.Errorf("%s after the revive: %v", name, err)
		}
	}
}
