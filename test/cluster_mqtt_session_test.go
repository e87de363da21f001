package test

import (
	"fmt"
	"strconv"
	"strings"
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

// mqttSessionsOn lists node nd's /api/mqtt/sessions by client id (nil if
// the API did not answer).
func mqttSessionsOn(nd *cnode) map[string]map[string]any {
	var l []map[string]any
	if code, err := nd.tryAPI("GET", "/api/mqtt/sessions", nil, &l); err != nil || code != 200 {
		return nil
	}
	out := map[string]map[string]any{}
	for _, se := range l {
		if id, ok := se["client_id"].(string); ok {
			out[id] = se
		}
	}
	return out
}

// queueOn reports whether node nd lists queue name (ok false: the API
// did not answer).
func queueOn(nd *cnode, name string) (found, ok bool) {
	var qs []struct {
		Name string `json:"name"`
	}
	if code, err := nd.tryAPI("GET", "/api/queues/%2F", nil, &qs); err != nil || code != 200 {
		return false, false
	}
	for _, q := range qs {
		if q.Name == name {
			return true, true
		}
	}
	return false, true
}

// TestClusterMQTTExpiryOwnerDown: two MQTT 5 sessions (expiry 10 s) held
// on node 0, one disconnected a moment before node 0 is killed (SIGKILL),
// one still connected then. The other nodes list both (with when they
// expire) until their time, then one of them expires them: gone from
// /api/mqtt/sessions and their queues from /api/queues on both
// survivors, neither before its expiry nor long after it.
func TestClusterMQTTExpiryOwnerDown(t *testing.T) {
	pc := startProtoCluster(t)
	const expiry = 10
	off, on := "cl-exp-off", "cl-exp-on"
	for _, id := range []string{off, on} {
		c, _ := dial5(t, pc.mqtt[0], guest5(id, true, expiry))
		c.subscribe(t, paho.SubscribeOptions{Topic: "cl/exp/" + id, QoS: 1})
		waitTopicBinding(t, pc.nodes[1], "cl.exp."+id, "mqtt-subscription-"+id)
		waitTopicBinding(t, pc.nodes[2], "cl.exp."+id, "mqtt-subscription-"+id)
		if id == off {
			if err := c.Disconnect(&paho.Disconnect{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The disconnect is recorded (Off) on the other nodes a moment after.
	time.Sleep(time.Second)
	offAt := time.Now()
	if err := pc.nodes[0].p.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	survivors := pc.nodes[1:]
	// Until their expiry the survivors list both sessions of node 0.
	eventually(t, 20*time.Second, "both sessions of node 0 listed by the survivors", func() bool {
		for _, nd := range survivors {
			ses := mqttSessionsOn(nd)
			if ses[off] == nil || ses[on] == nil {
				return false
			}
		}
		return true
	})
	if time.Since(offAt) > (expiry-2)*time.Second {
		t.Fatalf("listed only %s after the disconnect: too late to check they outlive their expiry", time.Since(offAt))
	}
	// Nothing expires early: both still there shortly before off's time.
	time.Sleep(time.Until(offAt.Add((expiry - 2) * time.Second)))
	for _, nd := range survivors {
		ses := mqttSessionsOn(nd)
		if ses[off] == nil || ses[on] == nil {
			t.Fatalf("%s: a session of node 0 gone %s after the disconnect, before its expiry (%d s): %v",
				nd.name, time.Since(offAt), expiry, ses)
		}
		for _, id := range []string{off, on} {
			if found, _ := queueOn(nd, "mqtt-subscription-"+id+"qos1"); !found {
				t.Fatalf("%s: queue of %s gone before its expiry", nd.name, id)
			}
		}
	}
	// Then both go, the one that was connected counted from the moment
	// its node was seen down. The bound leaves room for the survivors to
	// see node 0 down and a loaded machine.
	const bound = 30 * time.Second
	for _, id := range []string{off, on} {
		for _, nd := range survivors {
			eventually(t, time.Until(killedAt.Add(expiry*time.Second+bound)), id+" expired on "+nd.name, func() bool {
				ses := mqttSessionsOn(nd)
				found, ok := queueOn(nd, "mqtt-subscription-"+id+"qos1")
				return ses != nil && ses[id] == nil && ok && !found
			})
		}
	}
	t.Logf("expired %s after the kill (expiry %d s)", time.Since(killedAt), expiry)
	// A new connection with the client id finds no session.
	c, ack := redial5(t, pc.mqtt[2], func() *paho.Connect { return guest5(off, false, expiry) }, 30*time.Second)
	if ack.SessionPresent {
		t.Fatal("session present after it expired")
	}
	_ = c
}

// TestClusterMQTTSessionOwner: a session belongs to its user on every
// node (docs/security.md F5). u1's session connected on node 0: u2 with
// its client id on node 1 is refused (0x87; 3.1.1 on node 2: return code
// 5) and u1 stays connected and subscribed; once u1 is gone, u2 on node 2
// gets a fresh session (session present 0) and none of u1's queued
// messages.
func TestClusterMQTTSessionOwner(t *testing.T) {
	pc := startProtoCluster(t)
	for _, u := range []string{"u1", "u2"} {
		pc.nodes[0].api(t, "PUT", "/api/users/"+u, map[string]any{"password": "pw", "tags": ""}, nil)
		pc.nodes[0].api(t, "PUT", "/api/permissions/%2F/"+u, map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil)
	}
	cp := func(user string) *paho.Connect {
		return &paho.Connect{ClientID: "cl-own", CleanStart: false, Username: user, UsernameFlag: true,
			Password: []byte("pw"), PasswordFlag: true,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(3600)}}
	}
	var u1 *client5
	eventually(t, 20*time.Second, "u1 connected to node 0", func() bool {
		c, _, err := tryDial5(pc.mqtt[0], cp("u1"))
		u1 = c
		return err == nil
	})
	t.Cleanup(func() { _ = u1.Disconnect(&paho.Disconnect{}) })
	u1.subscribe(t, paho.SubscribeOptions{Topic: "own/#", QoS: 1})
	waitTopicBinding(t, pc.nodes[1], "own.#", "mqtt-subscription-cl-own")

	// u2 exists on node 1 once the user is replicated.
	var ack *paho.Connack
	var err error
	eventually(t, 20*time.Second, "u2's CONNECT on node 1 answered", func() bool {
		var c *client5
		c, ack, err = tryDial5(pc.mqtt[1], cp("u2"))
		if err == nil {
			_ = c.Disconnect(&paho.Disconnect{})
			t.Fatalf("u2 took u1's connected session on node 1 (session present %v)", ack.SessionPresent)
		}
		return ack != nil && ack.ReasonCode != 0x86 // not yet a known user
	})
	if ack.ReasonCode != 0x87 {
		t.Fatalf("u2 on node 1 with u1's client id: %v, CONNACK %#x, want 0x87 Not authorized", err, ack.ReasonCode)
	}
	if _, _, err := dial3Present(t, pc.mqtt[2], "u2", "cl-own"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "not authorized") {
		t.Fatalf("u2 (3.1.1) on node 2 with u1's client id: %v, want not authorized", err)
	}
	select {
	case d := <-u1.disc:
		t.Fatalf("u1 on node 0 was disconnected (reason %#x) by u2's CONNECTs on nodes 1 and 2", d.ReasonCode)
	case <-time.After(time.Second):
	}
	pub, _ := dial5(t, pc.mqtt[2], guest5("cl-own-pub", true, 0))
	pub.publish(t, &paho.Publish{Topic: "own/a", QoS: 1, Payload: []byte("live")})
	if m := u1.receive(t); string(m.Payload) != "live" {
		t.Fatalf("u1 got %q, want live", m.Payload)
	}
	waitSessionSettled(t, pc.nodes[0], "mqtt-subscription-cl-own")

	// u1 away with a message queued: u2 on node 2 starts afresh.
	if err := u1.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	pub.publish(t, &paho.Publish{Topic: "own/b", QoS: 1, Payload: []byte("queued")})
	var u2 *client5
	eventually(t, 20*time.Second, "u2 connected to node 2", func() bool {
		var c *client5
		c, ack, err = tryDial5(pc.mqtt[2], cp("u2"))
		u2 = c
		return err == nil
	})
	t.Cleanup(func() { _ = u2.Disconnect(&paho.Disconnect{}) })
	if ack.SessionPresent {
		t.Fatal("u2 resumed u1's session on node 2")
	}
	u2.none(t, time.Second)
}

// TestClusterMQTTSessionOfDownNodeAPI: while the node that last held a
// persistent session is down, every live node's API lists it and finds it
// by its id (GET), and DELETE on a live node ends it as its expiry would:
// its queue and record go on every survivor, and a client resuming it
// finds no session. The same for an MQTT 3.1.1 session, which never
// expires. Another user is refused as for a session of a live node: a
// monitoring user may see it but not delete it (401), a management user
// sees nothing (404).
func TestClusterMQTTSessionOfDownNodeAPI(t *testing.T) {
	pc := startProtoCluster(t)
	for user, tags := range map[string]string{"mon": "monitoring", "mgmt": "management"} {
		pc.nodes[1].api(t, "PUT", "/api/users/"+user, map[string]any{"password": "pw", "tags": tags}, nil)
		pc.nodes[1].api(t, "PUT", "/api/permissions/%2F/"+user, map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil)
	}
	const id5, id3 = "cl-down-api5", "cl-down-api3"
	c, _ := dial5(t, pc.mqtt[0], guest5(id5, true, 3600))
	c.subscribe(t, paho.SubscribeOptions{Topic: "cl/down/api5", QoS: 1})
	c3 := dial3(t, "tcp://"+pc.mqtt[0], id3, false, func(o *mqttOpts) { o.SetUsername("guest").SetPassword("guest") })
	c3.subscribe(t, "cl/down/api3", 1)
	for _, id := range []string{id5, id3} {
		waitTopicBinding(t, pc.nodes[1], "cl.down."+id[len("cl-down-"):], "mqtt-subscription-"+id)
		waitTopicBinding(t, pc.nodes[2], "cl.down."+id[len("cl-down-"):], "mqtt-subscription-"+id)
	}
	if err := c.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	c3.Disconnect(50)
	time.Sleep(time.Second) // the disconnects are recorded (Off) on the others
	if err := pc.nodes[0].p.Kill(); err != nil {
		t.Fatal(err)
	}
	var last string
	defer func() { t.Log(last) }()
	for _, id := range []string{id5, id3} {
		path := "/api/mqtt/sessions/%2F/" + id
		for _, nd := range pc.nodes[1:] {
			eventually(t, 20*time.Second, id+" found by id on "+nd.name, func() bool {
				var se map[string]any
				code, err := nd.tryAPI("GET", path, nil, &se)
				return err == nil && code == 200 && se["client_id"] == id
			})
		}
		if code, _ := pc.nodes[1].tryAPIAs("mon", "pw", "DELETE", path, nil, nil); code != 401 {
			t.Fatalf("DELETE %s by a monitoring user: %d, want 401", id, code)
		}
		if code, _ := pc.nodes[2].tryAPIAs("mgmt", "pw", "GET", path, nil, nil); code != 404 {
			t.Fatalf("GET %s by a management user who does not own it: %d, want 404", id, code)
		}
		if code, _ := pc.nodes[2].tryAPIAs("mgmt", "pw", "DELETE", path, nil, nil); code != 404 {
			t.Fatalf("DELETE %s by a management user who does not own it: %d, want 404", id, code)
		}
		if code, err := pc.nodes[1].tryAPI("GET", path, nil, nil); err != nil || code != 200 {
			t.Fatalf("%s after the refused DELETEs: %d %v, want it still there", id, code, err)
		}
		if code, err := pc.nodes[1].tryAPI("DELETE", path, nil, nil); err != nil || code != 204 {
			t.Fatalf("DELETE %s on a live node: %d %v, want 204", id, code, err)
		}
		for _, nd := range pc.nodes[1:] {
			eventually(t, 20*time.Second, id+" gone on "+nd.name, func() bool {
				code, err := nd.tryAPI("GET", path, nil, nil)
				found, ok := queueOn(nd, "mqtt-subscription-"+id+"qos1")
				ses := mqttSessionsOn(nd)
				last = fmt.Sprintf("%s: GET %d %v, queue found %v (answer %v), listed %v", id, code, err, found, ok, ses[id])
				return code == 404 && ok && !found && ses != nil && ses[id] == nil
			})
		}
		if code, _ := pc.nodes[2].tryAPI("DELETE", path, nil, nil); code != 404 {
			t.Fatalf("a second DELETE of %s: %d, want 404", id, code)
		}
	}
	_, ack := redial5(t, pc.mqtt[2], func() *paho.Connect { return guest5(id5, false, 3600) }, 30*time.Second)
	if ack.SessionPresent {
		t.Fatal("session present after it was deleted")
	}
}
