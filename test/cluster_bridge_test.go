package test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterMQTTBridge: an MQTT bridge declared through one node's API is
// a cluster-wide definition run by one node (the others name it), as a
// shovel; its out queue is a quorum queue, so when the node running it is
// killed another takes it over and what was published meanwhile still
// reaches the remote broker.
func TestClusterMQTTBridge(t *testing.T) {
	cloud := startMQTTBroker(t)
	sink := dial3(t, "tcp://"+cloud.mqttAddr(), "cluster-sink", true)
	sink.subscribe(t, "up/#", 1)
	nodes := startCluster(t, 3)
	body := map[string]any{"value": map[string]any{"address": cloud.mqttAddr(), "remote_clientid": "cluster-bridge",
		"restart_timeout": 1, "topic": "c/# out 1 \"\" up/"}}
	if code := nodes[1].api(t, "PUT", "/api/parameters/mqtt-bridge/%2F/cb", body, nil); code != 201 {
		t.Fatalf("PUT bridge: %d", code)
	}
	owner := func(alive []*cnode) string {
		var running, remote []string
		for _, nd := range alive {
			var st []struct{ Name, State, Node string }
			if code, err := nd.tryAPI("GET", "/api/mqtt/bridges/%2F", nil, &st); err != nil || code != 200 || len(st) != 1 {
				return ""
			}
			switch st[0].State {
			case "running":
				running = append(running, nd.name)
			case "remote":
				remote = append(remote, st[0].Node)
			}
		}
		if len(running) != 1 || len(remote) != len(alive)-1 {
			return ""
		}
		for _, r := range remote {
			if r != running[0] {
				return ""
			}
		}
		return running[0]
	}
	var runner string
	eventually(t, 30*time.Second, "one node running the bridge, the others naming it", func() bool {
		runner = owner(nodes)
		return runner != ""
	})
	publish := func(nd *cnode, key, body string) {
		t.Helper()
		eventually(t, 30*time.Second, "a confirmed publish of "+body, func() bool {
			c, err := amqp.Dial(nd.url())
			if err != nil {
				return false
			}
			defer c.Close()
			ch, err := c.Channel()
			if err != nil || ch.Confirm(false) != nil {
				return false
			}
			dc, err := ch.PublishWithDeferredConfirm("amq.topic", key, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
			if err != nil {
				return false
			}
			ok, err := dc.WaitContext(t.Context())
			return err == nil && ok
		})
	}
	var alive []*cnode
	var killed *cnode
	for _, nd := range nodes {
		if nd.name == runner {
			killed = nd
		} else {
			alive = append(alive, nd)
		}
	}
	publish(alive[0], "c.1", "before")
	if m := recv3(t, sink, 20*time.Second); m.topic != "up/c/1" || m.payload != "before" {
		t.Fatalf("got %+v", m)
	}
	if err := killed.p.Kill(); err != nil {
		t.Fatal(err)
	}
	publish(alive[0], "c.2", "during")
	eventually(t, 60*time.Second, "another node running the bridge", func() bool {
		r := owner(alive)
		return r != "" && r != runner
	})
	for {
		// "before" may come again (at least once: its ack and the kill
		// may have crossed).
		m := recv3(t, sink, 30*time.Second)
		if m.topic == "up/c/2" && m.payload == "during" {
			break
		}
		if m.payload != "before" {
			t.Fatalf("got %+v", m)
		}
	}
}
