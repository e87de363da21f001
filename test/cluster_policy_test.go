package test

import (
	"context"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterPolicy: a policy PUT on node 0 is replicated: it trims a
// queue that already lives on node 1, and a queue declared on node 1
// afterwards and used from node 2 obeys it; deleting it on node 2 lifts
// it everywhere.
func TestClusterPolicy(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch1 := dialNode(t, nodes[1])
	if _, err := ch1.QueueDeclare("cl.pre", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishN := func(ch *amqp.Channel, queue string, n int) {
		t.Helper()
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 1; i <= n; i++ {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
				amqp.Publishing{DeliveryMode: 2, Body: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				t.Fatalf("confirm %d: %v %v", i, ok, err)
			}
		}
	}
	publishN(ch1, "cl.pre", 5)

	pol := map[string]any{"pattern": `^cl\.`, "apply-to": "queues", "priority": 1,
		"definition": map[string]any{"max-length": 2, "ha-mode": "all"}}
	if code := nodes[0].api(t, "PUT", "/api/policies/%2F/cap", pol, nil); code != 201 {
		t.Fatalf("PUT policy: %d", code)
	}
	for _, nd := range nodes {
		eventually(t, 10*time.Second, "policy on "+nd.name, func() bool {
			var p map[string]any
			code, err := nd.tryAPI("GET", "/api/policies/%2F/cap", nil, &p)
			return err == nil && code == 200 && p["pattern"] == `^cl\.`
		})
	}
	// The queue that was there is trimmed where it lives.
	eventually(t, 10*time.Second, "cl.pre trimmed on node 1", func() bool {
		var q map[string]any
		code, err := nodes[1].tryAPI("GET", "/api/queues/%2F/cl.pre", nil, &q)
		return err == nil && code == 200 && q["policy"] == "cap" && num(q["messages_ready"]) == 2
	})

	// A queue declared on node 1 now, used from node 2.
	if _, err := ch1.QueueDeclare("cl.new", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	conn2, ch2 := dialNode(t, nodes[2])
	eventually(t, 10*time.Second, "cl.new on node 2", func() bool {
		ch, err := conn2.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive("cl.new", true, false, false, false, nil)
		return err == nil
	})
	publishN(ch2, "cl.new", 5)
	var got []string
	eventually(t, 10*time.Second, "cl.new drained from node 2", func() bool {
		m, ok, err := ch2.Get("cl.new", true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(m.Body))
		}
		return !ok && len(got) >= 2
	})
	if !equalStrings(got, []string{"4", "5"}) {
		t.Fatalf("node 2 got %v from cl.new, want the newest two", got)
	}

	// Deleted on node 2: the limit goes everywhere.
	if code := nodes[2].api(t, "DELETE", "/api/policies/%2F/cap", nil, nil); code != 204 {
		t.Fatalf("DELETE policy: %d", code)
	}
	eventually(t, 10*time.Second, "policy gone from cl.new on node 1", func() bool {
		var q map[string]any
		code, err := nodes[1].tryAPI("GET", "/api/queues/%2F/cl.new", nil, &q)
		return err == nil && code == 200 && q["policy"] == nil
	})
	publishN(ch2, "cl.new", 3)
	eventually(t, 10*time.Second, "3 messages without the policy", func() bool {
		var q map[string]any
		code, err := nodes[1].tryAPI("GET", "/api/queues/%2F/cl.new", nil, &q)
		return err == nil && code == 200 && num(q["messages_ready"]) == 3
	})
}
