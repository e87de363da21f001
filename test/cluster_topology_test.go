package test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterTopologyReplicated: three real processes. A declare on one
// node is visible on the others; a message published on a third node to a
// classic queue homed on the first is forwarded there and consumed from the
// second with the exchange and routing key it was published with; vhosts
// and users made through the API of one node work on the others; a delete
// on one node removes the queue everywhere.
func TestClusterTopologyReplicated(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch0 := dialNode(t, nodes[0])
	if err := ch0.ExchangeDeclare("orders", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch0.QueueDeclare("eu", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch0.QueueBind("eu", "eu.#", "orders", false, nil); err != nil {
		t.Fatal(err)
	}
	// Visible on the others (a passive declare on a fresh channel each
	// time: a 404 closes the channel).
	for _, nd := range nodes[1:] {
		conn, _ := dialNode(t, nd)
		eventually(t, 10*time.Second, "queue eu on "+nd.name, func() bool {
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			_, err = ch.QueueDeclarePassive("eu", true, false, false, false, nil)
			return err == nil
		})
		ch, _ := conn.Channel()
		if err := ch.ExchangeDeclarePassive("orders", "topic", true, false, false, false, nil); err != nil {
			t.Fatalf("exchange on %s: %v", nd.name, err)
		}
	}

	// Followers apply committed records a moment after the commit: wait
	// for the binding on node 2 before publishing there.
	eventually(t, 10*time.Second, "binding on node 2", func() bool {
		var bs []map[string]any
		code, err := nodes[2].tryAPI("GET", "/api/bindings/%2F/e/orders/q/eu", nil, &bs)
		return err == nil && code == 200 && len(bs) == 1
	})
	// Publish on node 2, through the exchange: forwarded to node 0.
	_, ch2 := dialNode(t, nodes[2])
	if err := ch2.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch2.PublishWithDeferredConfirmWithContext(ctx, "orders", "eu.paris", false, false,
		amqp.Publishing{DeliveryMode: 2, Body: []byte("bonjour"), Headers: amqp.Table{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	// Consume on node 1: fed from node 0.
	_, ch1 := dialNode(t, nodes[1])
	ds, err := ch1.Consume("eu", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if string(d.Body) != "bonjour" || d.Exchange != "orders" || d.RoutingKey != "eu.paris" || d.Headers["k"] != "v" {
			t.Fatalf("delivery: body %q exchange %q key %q headers %v", d.Body, d.Exchange, d.RoutingKey, d.Headers)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery on node 1")
	}
	// Acked through the proxy: the queue on node 0 is empty.
	eventually(t, 10*time.Second, "ack to reach the home node", func() bool {
		ch, err := dialChannel(nodes[0])
		if err != nil {
			return false
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive("eu", true, false, false, false, nil)
		return err == nil && q.Messages == 0
	})

	// A vhost and a user made on node 1 work on node 2.
	if code := nodes[1].api(t, "PUT", "/api/vhosts/cv", map[string]any{}, nil); code/100 != 2 {
		t.Fatalf("PUT vhost: %d", code)
	}
	if code := nodes[1].api(t, "PUT", "/api/users/alice", map[string]any{"password": "s3cret", "tags": ""}, nil); code/100 != 2 {
		t.Fatalf("PUT user: %d", code)
	}
	if code := nodes[1].api(t, "PUT", "/api/permissions/cv/alice", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil); code/100 != 2 {
		t.Fatalf("PUT permissions: %d", code)
	}
	eventually(t, 10*time.Second, "alice on node 2", func() bool {
		c, err := amqp.Dial("amqp://alice:s3cret@" + nodes[2].p.AMQPAddr + "/cv")
		if err != nil {
			return false
		}
		c.Close()
		return true
	})

	// Deleted on node 2: gone on node 0.
	if _, err := ch2.QueueDelete("eu", false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "queue eu gone on node 0", func() bool {
		ch, err := dialChannel(nodes[0])
		if err != nil {
			return false
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive("eu", true, false, false, false, nil)
		return err != nil
	})
	// The delete is committed before it is answered: on node 2 itself the
	// queue is gone already.
	if ch, err := dialChannel(nodes[2]); err != nil {
		t.Fatal(err)
	} else {
		if _, err := ch.QueueDeclarePassive("eu", true, false, false, false, nil); err == nil {
			t.Fatal("queue eu still there on the node that deleted it")
		}
		ch.Close()
	}

	// An exchange deleted on node 1 and the vhost deleted on node 0: gone
	// on every node.
	if ch, err := dialChannel(nodes[1]); err != nil {
		t.Fatal(err)
	} else {
		if err := ch.ExchangeDelete("orders", false, false); err != nil {
			t.Fatal(err)
		}
		ch.Close()
	}
	if code := nodes[0].api(t, "DELETE", "/api/vhosts/cv", nil, nil); code/100 != 2 {
		t.Fatalf("DELETE vhost: %d", code)
	}
	for _, nd := range nodes {
		eventually(t, 10*time.Second, "exchange orders and vhost cv gone on "+nd.name, func() bool {
			ch, err := dialChannel(nd)
			if err != nil {
				return false
			}
			defer ch.Close()
			xerr := ch.ExchangeDeclarePassive("orders", "topic", true, false, false, false, nil)
			code, _ := nd.tryAPI("GET", "/api/vhosts/cv", nil, nil)
			return xerr != nil && code == 404
		})
	}
}

// dialChannel opens a connection with one channel; closing the channel
// closes the connection.
func dialChannel(c *cnode) (*closingChannel, error) {
	conn, err := amqp.Dial(c.url())
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &closingChannel{Channel: ch, conn: conn}, nil
}

type closingChannel struct {
	*amqp.Channel
	conn *amqp.Connection
}

func (c *closingChannel) Close() error { return c.conn.Close() }
