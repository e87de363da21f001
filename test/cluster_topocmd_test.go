package test

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterTopologyCommands (issue 43): a new cluster enables
// topology_commands, and from then on topology changes travel as typed
// commands that every node applies. An exchange, a queue and a binding
// declared on one node route a message published on another; a delete
// made on a third is seen everywhere; and in each of 10 rounds the three
// nodes declare one queue name at once with different arguments: every
// declaration is either the winner's declare-ok or PRECONDITION_FAILED,
// and every node ends with the same queue.
func TestClusterTopologyCommands(t *testing.T) {
	nodes := startCluster(t, 3)
	for _, nd := range nodes {
		eventually(t, 60*time.Second, "topology_commands enabled on "+nd.name, func() bool {
			f, err := flagOn(nd, "topology_commands")
			return err == nil && f.State == "enabled"
		})
	}
	_, ch0 := dialNode(t, nodes[0])
	if err := ch0.ExchangeDeclare("tc-x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch0.QueueDeclare("tc-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch0.QueueBind("tc-q", "k", "tc-x", false, nil); err != nil {
		t.Fatal(err)
	}
	_, ch2 := dialNode(t, nodes[2])
	if err := ch2.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// The declarations are applied on every node when they return.
	dc, err := ch2.PublishWithDeferredConfirm("tc-x", "k", true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
		t.Fatalf("publish through node 2: ack %v, %v", ok, err)
	}
	conn1, _ := dialNode(t, nodes[1])
	passive := func(conn *amqp.Connection, q string) (amqp.Queue, error) {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		return ch.QueueDeclarePassive(q, true, false, false, false, nil)
	}
	eventually(t, 20*time.Second, "the message in tc-q, seen from node 1", func() bool {
		q, err := passive(conn1, "tc-q")
		return err == nil && q.Messages == 1
	})
	_, ch1 := dialNode(t, nodes[1])
	if _, err := ch1.QueueDelete("tc-q", false, false, false); err != nil {
		t.Fatal(err)
	}
	conn0, _ := dialNode(t, nodes[0])
	if _, err := passive(conn0, "tc-q"); err == nil {
		t.Fatal("tc-q still on node 0 after its delete on node 1 returned")
	}

	// A vhost, its metadata and a policy in it, each made on another
	// node; the vhost's delete removes it everywhere.
	if code := nodes[1].api(t, "PUT", "/api/vhosts/tc-v", map[string]any{"description": "tc"}, nil); code/100 != 2 {
		t.Fatalf("PUT vhost on node 1: %d", code)
	}
	if code := nodes[2].api(t, "PUT", "/api/policies/tc-v/cap", map[string]any{"pattern": "^cap", "apply-to": "queues",
		"definition": map[string]any{"max-length": 1}}, nil); code/100 != 2 {
		t.Fatalf("PUT policy on node 2: %d", code)
	}
	for _, nd := range nodes {
		var vh struct {
			Description string `json:"description"`
		}
		eventually(t, 20*time.Second, "vhost tc-v and its policy on "+nd.name, func() bool {
			c1, err1 := nd.tryAPI("GET", "/api/vhosts/tc-v", nil, &vh)
			c2, err2 := nd.tryAPI("GET", "/api/policies/tc-v/cap", nil, nil)
			return err1 == nil && c1 == 200 && vh.Description == "tc" && err2 == nil && c2 == 200
		})
	}
	if code := nodes[0].api(t, "DELETE", "/api/vhosts/tc-v", nil, nil); code/100 != 2 {
		t.Fatalf("DELETE vhost on node 0: %d", code)
	}
	for _, nd := range nodes {
		eventually(t, 20*time.Second, "vhost tc-v gone from "+nd.name, func() bool {
			code, _ := nd.tryAPI("GET", "/api/vhosts/tc-v", nil, nil)
			return code == 404
		})
	}

	chans := make([]*amqp.Channel, len(nodes))
	conns := make([]*amqp.Connection, len(nodes))
	for i, nd := range nodes {
		conns[i], chans[i] = dialNode(t, nd)
	}
	for r := 0; r < 10; r++ {
		name := fmt.Sprintf("tc-race-%d", r)
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = chans[i].QueueDeclare(name, true, false, false, false, amqp.Table{"x-max-length": int32(100 + i)})
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			var ae *amqp.Error
			switch {
			case err == nil:
				won++
			case errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed:
				// A channel closed by the refusal: open another.
				ch, cerr := conns[i].Channel()
				if cerr != nil {
					t.Fatal(cerr)
				}
				chans[i] = ch
			default:
				t.Fatalf("round %d: declare on node %d: %v", r, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d declarations succeeded, want exactly the winner's (%v)", r, won, errs)
		}
		var first any
		for i, nd := range nodes {
			var q struct {
				Arguments map[string]any `json:"arguments"`
			}
			eventually(t, 20*time.Second, name+" on "+nd.name, func() bool {
				return nd.api(t, "GET", "/api/queues/%2F/"+name, nil, &q) == 200
			})
			if i == 0 {
				first = q.Arguments
			} else if !reflect.DeepEqual(first, any(q.Arguments)) {
				t.Fatalf("round %d: node %s holds %s with %v, node 0 with %v", r, nd.name, name, q.Arguments, first)
			}
		}
	}
}

// TestClusterTopologyCommandsLeaderKill: with topology_commands on, two
// clients on the two followers declare durable queues while the
// metadata group's leader is killed (kill -9). Every declaration that was
// answered declare-ok is a queue on both surviving nodes, and once a new
// leader is elected declarations are applied again on every survivor.
func TestClusterTopologyCommandsLeaderKill(t *testing.T) {
	nodes := startCluster(t, 3)
	for _, nd := range nodes {
		eventually(t, 60*time.Second, "topology_commands enabled on "+nd.name, func() bool {
			f, err := flagOn(nd, "topology_commands")
			return err == nil && f.State == "enabled"
		})
	}
	var leader *cnode
	eventually(t, 30*time.Second, "a metadata leader", func() bool {
		name := metaLeaderName(nodes[0])
		for _, nd := range nodes {
			if nd.name == name {
				leader = nd
			}
		}
		return leader != nil
	})
	var survivors []*cnode
	for _, nd := range nodes {
		if nd != leader {
			survivors = append(survivors, nd)
		}
	}
	const perClient = 30
	var mu sync.Mutex
	var ok []string
	var wg sync.WaitGroup
	started := make(chan struct{}, len(survivors))
	for ci, nd := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn *amqp.Connection
			var ch *amqp.Channel
			for i := 0; i < perClient; i++ {
				if i == 5 {
					started <- struct{}{}
				}
				if ch == nil || ch.IsClosed() {
					if conn != nil {
						conn.Close()
					}
					var err error
					if conn, err = amqp.Dial(nd.url()); err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					if ch, err = conn.Channel(); err != nil {
						continue
					}
				}
				name := fmt.Sprintf("lk-%d-%d", ci, i)
				if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err == nil {
					mu.Lock()
					ok = append(ok, name)
					mu.Unlock()
				}
			}
			if conn != nil {
				conn.Close()
			}
		}()
	}
	for range survivors {
		<-started
	}
	leader.p.Kill()
	wg.Wait()
	if len(ok) == 0 {
		t.Fatal("no declaration succeeded")
	}
	for _, nd := range survivors {
		conn, _ := dialNode(t, nd)
		for _, name := range ok {
			eventually(t, 30*time.Second, name+" on "+nd.name, func() bool {
				ch, err := conn.Channel()
				if err != nil {
					t.Fatal(err)
				}
				defer ch.Close()
				_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
				return err == nil
			})
		}
	}
	// A new leader: declarations are applied again on both survivors.
	eventually(t, 60*time.Second, "a declaration after the kill", func() bool {
		conn, err := amqp.Dial(survivors[0].url())
		if err != nil {
			return false
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclare("lk-after", true, false, false, false, nil)
		return err == nil
	})
	conn1, _ := dialNode(t, survivors[1])
	eventually(t, 30*time.Second, "lk-after on "+survivors[1].name, func() bool {
		ch, err := conn1.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive("lk-after", true, false, false, false, nil)
		return err == nil
	})
	t.Logf("%d of %d declarations answered declare-ok across the kill", len(ok), 2*perClient)
}
