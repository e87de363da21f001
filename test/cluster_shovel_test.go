package test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterShovel: a dynamic shovel declared through one node's API is
// a cluster-wide definition, as in RabbitMQ: every node lists it, exactly
// one runs it (the others report it as running there), it moves messages
// between two quorum queues, and when the node running it is killed
// another node takes it over and goes on moving; deleting it through any
// node removes it everywhere.
func TestClusterShovel(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch0 := dialNode(t, nodes[0])
	for _, q := range []string{"sv-src", "sv-dst"} {
		if _, err := ch0.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}
	}
	body := map[string]any{"value": map[string]any{"src-uri": "amqp://", "src-queue": "sv-src",
		"dest-uri": "amqp://", "dest-queue": "sv-dst", "ack-mode": "on-confirm", "reconnect-delay": 1}}
	if code := nodes[1].api(t, "PUT", "/api/parameters/shovel/%2F/move", body, nil); code != 201 {
		t.Fatalf("PUT shovel: %d", code)
	}
	// Every node has the definition; one runs it.
	owner := func(alive []*cnode) string {
		var running, remote []string
		for _, nd := range alive {
			var st []struct {
				Name, State, Node string
			}
			if code, err := nd.tryAPI("GET", "/api/shovels/%2F", nil, &st); err != nil || code != 200 || len(st) != 1 {
				return ""
			}
			switch st[0].State {
			case "running":
				running = append(running, nd.name)
				if st[0].Node != nd.name {
					return ""
				}
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
	eventually(t, 20*time.Second, "one node running the shovel, the others naming it", func() bool {
		runner = owner(nodes)
		return runner != ""
	})
	t.Logf("shovel runs on %s", runner)
	for _, nd := range nodes {
		var p map[string]any
		if code := nd.api(t, "GET", "/api/parameters/shovel/%2F/move", nil, &p); code != 200 || p["name"] != "move" {
			t.Fatalf("%s: definition %v (%d)", nd.name, p, code)
		}
	}
	count := func(ch *amqp.Channel, q string) int {
		i, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		if err != nil {
			t.Fatal(err)
		}
		return i.Messages
	}
	// publish puts n messages into sv-src, confirmed: one nacked while
	// the queue's group changes leader is published again.
	publish := func(ch *amqp.Channel, n int) {
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n))
		for acked, tries := 0, 0; acked < n; tries++ {
			if tries > 20 {
				t.Fatalf("%d of %d publishes confirmed after 20 rounds", acked, n)
			}
			want := n - acked
			for i := 0; i < want; i++ {
				if err := ch.Publish("", "sv-src", false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("m")}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < want; i++ {
				if c := <-confirms; c.Ack {
					acked++
				}
			}
			if acked < n {
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	var survivor *cnode
	var victim int
	for i, nd := range nodes {
		if nd.name == runner {
			victim = i
		} else if survivor == nil {
			survivor = nd
		}
	}
	_, sch := dialNode(t, survivor)
	_, pch := dialNode(t, survivor)
	publish(pch, 100)
	eventually(t, 20*time.Second, "100 messages moved", func() bool { return count(sch, "sv-dst") >= 100 && count(sch, "sv-src") == 0 })

	// The node running it dies: another takes it over.
	if err := nodes[victim].p.Kill(); err != nil {
		t.Fatal(err)
	}
	var alive []*cnode
	for i, nd := range nodes {
		if i != victim {
			alive = append(alive, nd)
		}
	}
	eventually(t, 30*time.Second, "a survivor running the shovel", func() bool {
		runner = owner(alive)
		return runner != ""
	})
	t.Logf("after the kill the shovel runs on %s", runner)
	_, pch2 := dialNode(t, survivor)
	publish(pch2, 100)
	eventually(t, 30*time.Second, "200 messages moved", func() bool { return count(sch, "sv-dst") >= 200 && count(sch, "sv-src") == 0 })
	if n := count(sch, "sv-dst"); n > 200 {
		t.Logf("%d messages at the destination: %d moved twice across the takeover (at least once, as RabbitMQ)", n, n-200)
	}

	// Deleted through a survivor: gone on every alive node.
	if code := survivor.api(t, "DELETE", "/api/parameters/shovel/%2F/move", nil, nil); code != 204 {
		t.Fatalf("DELETE: %d", code)
	}
	eventually(t, 10*time.Second, "the definition gone everywhere", func() bool {
		for _, nd := range alive {
			var ps []any
			if code, err := nd.tryAPI("GET", "/api/parameters/shovel/%2F", nil, &ps); err != nil || code != 200 || len(ps) != 0 {
				return false
			}
		}
		return true
	})
}
