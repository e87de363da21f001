package test

import (
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// Issue 42 item 4, sessions in a cluster: a persistent session's queue
// as a quorum queue (mqtt.durable_queue_type), session expiry while the
// session's node is down, and a session's owner across nodes.

// redial5 connects to addr until it succeeds or d passes: after a node
// dies the survivors may be electing leaders (metadata, the session's
// queue) for a moment.
func redial5(t *testing.T, addr string, cp func() *paho.Connect, d time.Duration) (*client5, *paho.Connack) {
	t.Helper()
	var c *client5
	var ack *paho.Connack
	eventually(t, d, "connected to "+addr, func() bool {
		var err error
		c, ack, err = tryDial5(addr, cp())
		if err != nil {
			t.Logf("connect %s: %v", addr, err)
			return false
		}
		return true
	})
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ack
}

// TestClusterMQTTQuorumSession: with mqtt.durable_queue_type quorum a
// persistent session's queue is a quorum queue; the node the client was
// on is killed (SIGKILL) with QoS 1 messages queued for the session, and
// the client resumes on another node (session present) and receives
// every one of them.
func TestClusterMQTTQuorumSession(t *testing.T) {
	pc := startProtoCluster(t, "--mqtt-durable-queue-type", "quorum")
	const id = "cl-qq5"
	qname := "mqtt-subscription-" + id + "qos1"
	a, _ := dial5(t, pc.mqtt[0], guest5(id, true, 3600))
	a.subscribe(t, paho.SubscribeOptions{Topic: "cl/qq/#", QoS: 1})
	var q map[string]any
	pc.nodes[0].api(t, "GET", "/api/queues/%2F/"+qname, nil, &q)
	if q["type"] != "quorum" {
		t.Fatalf("session queue type %v, want quorum", q["type"])
	}
	if err := a.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}

	waitTopicBinding(t, pc.nodes[1], "cl.qq.#", qname)
	pub, _ := dial5(t, pc.mqtt[1], guest5("cl-qq5-pub", true, 0))
	const n = 20
	for i := range n {
		pub.publish(t, &paho.Publish{Topic: "cl/qq/x", QoS: 1, Payload: []byte(strconv.Itoa(i))})
	}
	if err := pc.nodes[0].p.Kill(); err != nil {
		t.Fatal(err)
	}

	b, ack := redial5(t, pc.mqtt[1], func() *paho.Connect { return guest5(id, false, 3600) }, 60*time.Second)
	if !ack.SessionPresent {
		t.Fatal("session not present on node 1 after node 0 died")
	}
	got := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(got) < n {
		select {
		case m := <-b.msgs:
			if m.QoS != 1 {
				t.Fatalf("%q at QoS %d, want 1", m.Payload, m.QoS)
			}
			got[string(m.Payload)] = true
		case <-deadline:
			t.Fatalf("%d of %d queued messages after node 0 died: %v", len(got), n, got)
		}
	}
	for i := range n {
		if !got[strconv.Itoa(i)] {
			t.Fatalf("message %d lost", i)
		}
	}
	// And the session goes on: live messages through node 2.
	pub2, _ := redial5(t, pc.mqtt[2], func() *paho.Connect { return guest5("cl-qq5-pub2", true, 0) }, 30*time.Second)
	pub2.publish(t, &paho.Publish{Topic: "cl/qq/y", QoS: 1, Payload: []byte("live")})
	eventually(t, 20*time.Second, "live message", func() bool {
		select {
		case m := <-b.msgs:
			return string(m.Payload) == "live"
		case <-time.After(time.Second):
			return false
		}
	})
}
