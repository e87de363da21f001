package test

import (
	"context"
	"errors"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestClusterTransientTopology: non-durable exchanges and exclusive or
// clean-session queues live on the node that declared them but are routed
// to from every node, as in RabbitMQ: a publish on node 2 reaches an
// exclusive queue consumed on node 0 and an MQTT clean-session subscriber
// on node 1; another node's exclusive queue is locked; the queue goes
// everywhere when its connection closes; when its node is killed the
// others forget it and publishing there is still confirmed.
func TestClusterTransientTopology(t *testing.T) {
	pc := startProtoCluster(t)
	nodes := pc.nodes
	conn0, ch0 := dialNode(t, nodes[0])
	if err := ch0.ExchangeDeclare("ev", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch0.QueueDeclare("", false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch0.QueueBind(q.Name, "", "ev", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch0.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An MQTT clean-session subscriber on node 1 (amq.topic, key ev.x).
	sub := mqtt3.NewClient(mqtt3.NewClientOptions().AddBroker("tcp://" + pc.mqtt[1]).
		SetClientID("transient-sub").SetUsername("guest").SetPassword("guest").SetCleanSession(true))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt connect: %v", tok.Error())
	}
	defer sub.Disconnect(100)
	got := make(chan string, 10)
	if tok := sub.Subscribe("ev/x", 1, func(_ mqtt3.Client, m mqtt3.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("mqtt subscribe: %v", tok.Error())
	}
	waitTopicBinding(t, nodes[2], "ev.x", "")
	eventually(t, 10*time.Second, "binding to the exclusive queue on node 2", func() bool {
		var bs []map[string]any
		code, err := nodes[2].tryAPI("GET", "/api/bindings/%2F/e/ev/q/"+q.Name, nil, &bs)
		return err == nil && code == 200 && len(bs) == 1
	})

	_, ch2 := dialNode(t, nodes[2])
	if err := ch2.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publish := func(ex, key, body string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dc, err := ch2.PublishWithDeferredConfirmWithContext(ctx, ex, key, false, false, amqp.Publishing{Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("confirm of %q: %v %v", body, ok, err)
		}
	}
	publish("ev", "", "to-node-0")
	publish("amq.topic", "ev.x", "to-node-1")
	select {
	case d := <-ds:
		if string(d.Body) != "to-node-0" || d.Exchange != "ev" {
			t.Fatalf("node 0 got %q from %q", d.Body, d.Exchange)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exclusive queue on node 0 got nothing published on node 2")
	}
	select {
	case m := <-got:
		if m != "to-node-1" {
			t.Fatalf("mqtt got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the clean-session subscriber on node 1 got nothing published on node 2")
	}

	// Node 1 sees the exclusive queue, locked to its connection on node 0.
	_, ch1 := dialNode(t, nodes[1])
	_, err = ch1.QueueDeclarePassive(q.Name, false, false, true, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.ResourceLocked {
		t.Fatalf("another node's exclusive queue: %v, want 405 RESOURCE_LOCKED", err)
	}

	// The connection closes: the queue goes everywhere.
	conn0.Close()
	eventually(t, 10*time.Second, "the exclusive queue gone on node 2", func() bool {
		code, _ := nodes[2].tryAPI("GET", "/api/queues/%2F/"+q.Name, nil, nil)
		return code == 404
	})

	// A node dies with its transient queues: the others forget them
	// (node 1's clean-session queue here) and node 2 still confirms.
	mqttQueue := func() string {
		var qs []struct {
			Name string `json:"name"`
			Node string `json:"node"`
		}
		_, _ = nodes[2].tryAPI("GET", "/api/queues/%2F", nil, &qs)
		for _, x := range qs {
			if x.Node == nodes[1].name {
				return x.Name
			}
		}
		return ""
	}
	if mqttQueue() == "" {
		t.Fatal("no queue of node 1 listed on node 2")
	}
	killed := time.Now()
	_ = nodes[1].p.Kill()
	eventually(t, 30*time.Second, "node 1's queues forgotten on node 2", func() bool { return mqttQueue() == "" })
	t.Logf("node 1's transient queues removed %v after its SIGKILL", time.Since(killed).Round(time.Millisecond))
	publish("amq.topic", "ev.x", "after-death")
}

// TestClusterDirectReplyTo: an RPC client on node 0 uses direct reply-to;
// the server consumes the request queue on node 2 and publishes its reply
// there, to the reply-to name, which carries node 0 and is forwarded to it.
func TestClusterDirectReplyTo(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch0 := dialNode(t, nodes[0])
	if _, err := ch0.QueueDeclare("rpc", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	replies, err := ch0.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, ch2 := dialNode(t, nodes[2])
	eventually(t, 10*time.Second, "queue rpc on node 2", func() bool {
		ch, err := dialChannel(nodes[2])
		if err != nil {
			return false
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive("rpc", true, false, false, false, nil)
		return err == nil
	})
	reqs, err := ch2.Consume("rpc", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range reqs {
			_ = ch2.Publish("", d.ReplyTo, false, false, amqp.Publishing{CorrelationId: d.CorrelationId, Body: append([]byte("re: "), d.Body...)})
			_ = d.Ack(false)
		}
	}()
	for i := 0; i < 3; i++ {
		id := string(rune('a' + i))
		if err := ch0.Publish("", "rpc", false, false, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: id, Body: []byte("ping " + id)}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-replies:
			if r.CorrelationId != id || string(r.Body) != "re: ping "+id {
				t.Fatalf("reply %q %q", r.CorrelationId, r.Body)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no reply %d through node 2", i)
		}
	}
}
