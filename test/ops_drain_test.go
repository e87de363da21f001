package test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Maintenance mode (issue 39 item 5): POST /api/nodes/{node}/drain on the
// node leading a quorum queue moves the leadership away, closes its AMQP
// clients with 320, refuses new connections, reports being_drained in
// /api/overview and every node's /api/nodes, survives a restart, and
// /revive undoes it. Only administrators may drain or revive.

// asUser calls node c's API as user:pass with an optional JSON body and
// returns the status code and body.
func (c *cnode) asUser(t *testing.T, user, pass, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://"+c.web+path, rd)
	req.SetBasicAuth(user, pass)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := http.Client{Timeout: 90 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, c.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(b))
}

// drainedIn reports node name's being_drained as node c's /api/nodes says.
func drainedIn(c *cnode, name string) (bool, bool) {
	var ms []struct {
		Name         string `json:"name"`
		BeingDrained bool   `json:"being_drained"`
	}
	if code, err := c.tryAPI("GET", "/api/nodes", nil, &ms); err != nil || code != 200 {
		return false, false
	}
	for _, m := range ms {
		if m.Name == name {
			return m.BeingDrained, true
		}
	}
	return false, false
}

func overviewDrained(t *testing.T, c *cnode) bool {
	var ov struct {
		BeingDrained bool `json:"being_drained"`
	}
	c.api(t, "GET", "/api/overview", nil, &ov)
	return ov.BeingDrained
}

func TestDrainReviveCluster(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare("drain-q", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	var leaderName string
	eventually(t, 30*time.Second, "a leader for drain-q", func() bool {
		leaderName = nodes[0].queueLeader(t, "%2F/drain-q")
		return leaderName != ""
	})
	var leader, other *cnode
	for _, nd := range nodes {
		if nd.name == leaderName {
			leader = nd
		} else if other == nil {
			other = nd
		}
	}
	if leader == nil {
		t.Fatalf("leader %q is not one of the nodes", leaderName)
	}

	// A user without the administrator tag is refused.
	if code, body := leader.asUser(t, "guest", "guest", "PUT", "/api/users/drain-mon", `{"password":"pw","tags":"monitoring"}`); code/100 != 2 {
		t.Fatalf("create user: %d %s", code, body)
	}
	eventually(t, 10*time.Second, "drain-mon known on the leader", func() bool {
		code, _ := leader.asUser(t, "drain-mon", "pw", "GET", "/api/whoami", "")
		return code == 200
	})
	for _, op := range []string{"drain", "revive"} {
		code, body := leader.asUser(t, "drain-mon", "pw", "POST", "/api/nodes/"+leader.name+"/"+op, "")
		if code != http.StatusForbidden && code != http.StatusUnauthorized {
			t.Fatalf("%s as a monitoring user: %d %s, want 401 or 403", op, code, body)
		}
	}
	if overviewDrained(t, leader) {
		t.Fatal("being_drained before any drain")
	}

	// A client on the leader, publishing.
	conn, err := amqp.Dial(leader.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))

	// Another node's drain is for that node's API.
	if code, body := other.asUser(t, "guest", "guest", "POST", "/api/nodes/"+leader.name+"/drain", ""); code != http.StatusBadRequest {
		t.Fatalf("drain of %s through %s: %d %s, want 400", leader.name, other.name, code, body)
	}
	if code, body := leader.asUser(t, "guest", "guest", "POST", "/api/nodes/"+leader.name+"/drain", "not json"); code != http.StatusUnsupportedMediaType && code != http.StatusBadRequest {
		t.Fatalf("drain with a non-JSON body: %d %s", code, body)
	}

	code, body := leader.asUser(t, "guest", "guest", "POST", "/api/nodes/"+leader.name+"/drain", "")
	if code != 200 || !strings.Contains(body, `"being_drained":true`) {
		t.Fatalf("drain: %d %s", code, body)
	}
	t.Logf("drain of %s: %s", leader.name, body)

	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("client on the drained node closed with %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client on the drained node was not closed")
	}
	// The leadership moved: every node names another leader.
	eventually(t, 30*time.Second, "drain-q's leader to leave "+leader.name, func() bool {
		l := other.queueLeader(t, "%2F/drain-q")
		return l != "" && l != leader.name
	})
	if _, err := amqp.Dial(leader.url()); err == nil {
		t.Fatal("a new AMQP connection to the drained node was accepted")
	}
	if !overviewDrained(t, leader) {
		t.Fatal("/api/overview: being_drained false on the drained node")
	}
	for _, nd := range nodes {
		eventually(t, 15*time.Second, nd.name+"'s /api/nodes to show "+leader.name+" drained", func() bool {
			d, ok := drainedIn(nd, leader.name)
			return ok && d
		})
	}
	// The leadership stays away from the drained node: a publish
	// through another node is confirmed.
	_, och := dialNode(t, other)
	if err := och.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := och.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := och.Publish("", "drain-q", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if c := <-confirms; !c.Ack {
		t.Fatal("publish while a node is drained was nacked")
	}
	// A quorum queue declared through the drained node's API gets its
	// first leader elsewhere (placement puts drained nodes last).
	if code, body := leader.asUser(t, "guest", "guest", "PUT", "/api/queues/%2F/drain-new",
		`{"durable":true,"arguments":{"x-queue-type":"quorum"}}`); code/100 != 2 {
		t.Fatalf("declare drain-new through the drained node: %d %s", code, body)
	}
	eventually(t, 30*time.Second, "a leader for drain-new", func() bool {
		return other.queueLeader(t, "%2F/drain-new") != ""
	})
	if l := other.queueLeader(t, "%2F/drain-new"); l == leader.name {
		t.Fatalf("drain-new, declared while %s is drained, is led by it", l)
	}

	// Drained survives a restart, as RabbitMQ's maintenance state does:
	// the node comes back with its HTTP API up and its AMQP listener
	// refusing until revive (testbin's start waits for AMQP, so it runs
	// beside the revive).
	if err := leader.p.Stop(); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- leader.p.Restart() }()
	eventually(t, 25*time.Second, leader.name+"'s API after its restart", func() bool {
		var ov struct {
			BeingDrained *bool `json:"being_drained"`
		}
		code, err := leader.tryAPI("GET", "/api/overview", nil, &ov)
		return err == nil && code == 200 && ov.BeingDrained != nil
	})
	if !overviewDrained(t, leader) {
		t.Fatal("after a restart: being_drained false, want true until revive")
	}
	if c, err := amqp.Dial(leader.url()); err == nil {
		c.Close()
		t.Fatal("after a restart: a new AMQP connection to the drained node was accepted")
	}
	code, body = leader.asUser(t, "guest", "guest", "POST", "/api/nodes/"+leader.name+"/revive", "")
	if code != 200 || !strings.Contains(body, `"being_drained":false`) {
		t.Fatalf("revive: %d %s", code, body)
	}
	if err := <-started; err != nil {
		t.Fatalf("restart: %v", err)
	}
	c2, err := amqp.Dial(leader.url())
	if err != nil {
		t.Fatalf("after revive: %v", err)
	}
	c2.Close()
	if overviewDrained(t, leader) {
		t.Fatal("being_drained true after revive")
	}
	for _, nd := range nodes {
		eventually(t, 15*time.Second, nd.name+"'s /api/nodes to show "+leader.name+" revived", func() bool {
			d, ok := drainedIn(nd, leader.name)
			return ok && !d
		})
	}
}
