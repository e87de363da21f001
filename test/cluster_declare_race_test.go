package test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterConcurrentDeclare (issue 17): three processes; in each of 50
// rounds two clients, on nodes 0 and 1, declare the same new durable
// classic queue at the same moment, each publishes one persistent message
// with confirms right after its declare-ok and starts a consumer. Every
// publish is confirmed within a second, every message is delivered once,
// no consumer is cancelled, the queue has one home and every node lists
// both consumers; afterwards confirmed publishes from every node to a
// queue homed on every other node still flow.
func TestClusterConcurrentDeclare(t *testing.T) {
	nodes := startCluster(t, 3)
	const rounds = 50
	type side struct {
		conn    *amqp.Connection
		pub     *amqp.Channel // confirm mode, for declare and publish
		cons    *amqp.Channel // consumers of every round
		cancels chan string
	}
	sides := make([]*side, 2)
	for i := range sides {
		conn, pub := dialNode(t, nodes[i])
		if err := pub.Confirm(false); err != nil {
			t.Fatal(err)
		}
		cons, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		cancels := cons.NotifyCancel(make(chan string, rounds*2))
		sides[i] = &side{conn: conn, pub: pub, cons: cons, cancels: cancels}
	}

	type got struct {
		round, side int
		body        string
	}
	deliveries := make(chan got, rounds*4)
	var consumers sync.WaitGroup
	for r := 0; r < rounds; r++ {
		q := fmt.Sprintf("race-%d", r)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for i, s := range sides {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := s.pub.QueueDeclare(q, true, false, false, false, nil); err != nil {
					errs[i] = fmt.Errorf("declare on node %d: %w", i, err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				body := fmt.Sprintf("%s from %d", q, i)
				dc, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false,
					amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
				if err != nil {
					errs[i] = fmt.Errorf("publish on node %d: %w", i, err)
					return
				}
				ds, err := s.cons.Consume(q, q, false, false, false, false, nil)
				if err != nil {
					errs[i] = fmt.Errorf("consume on node %d: %w", i, err)
					return
				}
				consumers.Add(1)
				go func() {
					defer consumers.Done()
					for d := range ds {
						deliveries <- got{round: r, side: i, body: string(d.Body)}
						_ = d.Ack(false)
					}
				}()
				ok, err := dc.WaitContext(ctx)
				if err != nil || !ok {
					errs[i] = fmt.Errorf("round %d: publish on node %d not confirmed within 1 s (ok %v, err %v)", r, i, ok, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	// Every message delivered exactly once.
	seen := map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(seen) < rounds*2 {
		select {
		case g := <-deliveries:
			seen[g.body]++
			if seen[g.body] > 1 {
				t.Fatalf("%q delivered twice", g.body)
			}
		case <-deadline:
			t.Fatalf("%d of %d messages delivered", len(seen), rounds*2)
		}
	}
	select {
	case g := <-deliveries:
		t.Fatalf("unexpected extra delivery %q", g.body)
	case <-time.After(300 * time.Millisecond):
	}
	for i, s := range sides {
		select {
		case tag := <-s.cancels:
			t.Fatalf("consumer %s on node %d cancelled by the server", tag, i)
		default:
		}
	}

	// One home per queue, and every node lists both consumers.
	homes := map[string]int{}
	for r := 0; r < rounds; r++ {
		q := fmt.Sprintf("race-%d", r)
		eventually(t, 10*time.Second, "one home and two consumers of "+q+" on every node", func() bool {
			home := ""
			for _, nd := range nodes {
				var info struct {
					Node      string `json:"node"`
					Consumers int    `json:"consumers"`
				}
				code, err := nd.tryAPI("GET", "/api/queues/%2F/"+url.PathEscape(q), nil, &info)
				if err != nil || code != 200 || info.Consumers != 2 || info.Node == "" {
					return false
				}
				if home == "" {
					home = info.Node
				} else if info.Node != home {
					return false
				}
			}
			homes[home]++
			return true
		})
	}
	t.Logf("queues by home node (the first declaration committed): %v", homes)
	for _, s := range sides {
		s.conn.Close()
	}
	consumers.Wait()

	// Confirmed publishes still flow from every node to a queue homed on
	// every other node.
	chans := make([]*amqp.Channel, len(nodes))
	for i, nd := range nodes {
		_, ch := dialNode(t, nd)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
		if _, err := ch.QueueDeclare(fmt.Sprintf("after-%d", i), true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range nodes {
		for j := range nodes {
			if i == j {
				continue
			}
			q := fmt.Sprintf("after-%d", j)
			eventually(t, 10*time.Second, q+" visible on node "+fmt.Sprint(i), func() bool {
				ch, err := dialChannel(nodes[i])
				if err != nil {
					return false
				}
				defer ch.Close()
				_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
				return err == nil
			})
			if err := confirmOne(chans[i], q, 2*time.Second); err != nil {
				t.Fatalf("publish from node %d to %s (homed on node %d): %v", i, q, j, err)
			}
		}
	}
	// And to a quorum queue, whose leader is on one node: confirmed from
	// every node.
	if _, err := chans[0].QueueDeclare("after-quorum", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		eventually(t, 10*time.Second, "after-quorum visible on node "+fmt.Sprint(i), func() bool {
			ch, err := dialChannel(nodes[i])
			if err != nil {
				return false
			}
			defer ch.Close()
			_, err = ch.QueueDeclarePassive("after-quorum", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			return err == nil
		})
		if err := confirmOne(chans[i], "after-quorum", 5*time.Second); err != nil {
			t.Fatalf("publish from node %d to the quorum queue: %v", i, err)
		}
	}
}

// confirmOne publishes one persistent message to queue on ch (in
// confirm mode) and waits at most d for its basic.ack.
func confirmOne(ch *amqp.Channel, queue string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("after")})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("nacked")
	}
	if err != nil {
		return fmt.Errorf("not confirmed: %w", err)
	}
	return nil
}
