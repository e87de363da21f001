package test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/exchange"
)

// eventsBroker starts a node with AMQP, MQTT and STOMP on loopback.
func eventsBroker(t *testing.T, mutate ...func(*conf.Config)) *broker {
	t.Helper()
	return startMQTTBroker(t, append([]func(*conf.Config){func(c *conf.Config) {
		c.STOMP.Listen = "127.0.0.1:0"
	}}, mutate...)...)
}

// nextEvent waits for the next event with routing key key, skipping others.
func nextEvent(t *testing.T, ds <-chan amqp.Delivery, key string) amqp.Delivery {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case d := <-ds:
			if d.RoutingKey == key {
				return d
			}
		case <-deadline:
			t.Fatalf("no %s event", key)
		}
	}
}

func wantHeader(t *testing.T, d amqp.Delivery, key string, want any) {
	t.Helper()
	if got := d.Headers[key]; got != want {
		t.Fatalf("%s: header %s = %#v (%T), want %#v; headers %v", d.RoutingKey, key, got, got, want, d.Headers)
	}
}

// TestEventExchange: a queue bound to amq.rabbitmq.event receives
// connection events of every protocol, and topology events, with RabbitMQ's
// routing keys and headers, a timestamp_in_ms header and an empty body.
func TestEventExchange(t *testing.T) {
	b := eventsBroker(t)
	_, ch := channel(t, b.URL)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"connection.#", "queue.*", "binding.*", "exchange.*"} {
		if err := ch.QueueBind(q.Name, k, "amq.rabbitmq.event", false, nil); err != nil {
			t.Fatalf("bind %s: %v", k, err)
		}
	}
	ds, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	// MQTT connect and disconnect.
	m := dial3(t, "tcp://"+b.mqttAddr(), "ev-client", true)
	d := nextEvent(t, ds, "connection.created")
	wantHeader(t, d, "protocol", "MQTT 3.1.1")
	wantHeader(t, d, "vhost", "/")
	wantHeader(t, d, "peer_host", "127.0.0.1")
	if d.Headers["name"] == "" || d.Headers["user"] == "" {
		t.Fatalf("connection.created without name or user: %v", d.Headers)
	}
	if ms, ok := d.Headers["timestamp_in_ms"].(int64); !ok || ms < time.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("timestamp_in_ms = %#v", d.Headers["timestamp_in_ms"])
	}
	if len(d.Body) != 0 || d.Exchange != "amq.rabbitmq.event" {
		t.Fatalf("event body %q exchange %q", d.Body, d.Exchange)
	}
	if cp, ok := d.Headers["client_properties"].(amqp.Table); !ok || cp["client_id"] != "ev-client" {
		t.Fatalf("client_properties = %#v", d.Headers["client_properties"])
	}
	mqttName := d.Headers["name"]
	m.Disconnect(50)
	d = nextEvent(t, ds, "connection.closed")
	wantHeader(t, d, "protocol", "MQTT 3.1.1")
	wantHeader(t, d, "name", mqttName)

	// STOMP connect and disconnect.
	s := stDial(t, b)
	d = nextEvent(t, ds, "connection.created")
	wantHeader(t, d, "protocol", "STOMP 1.2")
	wantHeader(t, d, "user", "guest")
	_ = s.Disconnect()
	d = nextEvent(t, ds, "connection.closed")
	wantHeader(t, d, "protocol", "STOMP 1.2")

	// AMQP: a connection, a queue declared, bound, unbound and deleted.
	c2, err := amqp.DialConfig(b.URL, amqp.Config{Properties: amqp.Table{"connection_name": "ev-amqp"}})
	if err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "connection.created")
	wantHeader(t, d, "protocol", "AMQP 0-9-1")
	wantHeader(t, d, "user_provided_name", "ev-amqp")
	wantHeader(t, d, "auth_mechanism", "PLAIN")
	ch2, err := c2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.QueueDeclare("ev-q", true, false, false, false, amqp.Table{"x-max-length": int32(10)}); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "queue.created")
	wantHeader(t, d, "name", "ev-q")
	wantHeader(t, d, "vhost", "/")
	wantHeader(t, d, "durable", true)
	wantHeader(t, d, "user_who_performed_action", "guest")
	if _, err := ch2.QueueDeclare("ev-q", true, false, false, false, amqp.Table{"x-max-length": int32(10)}); err != nil {
		t.Fatal(err)
	}
	if err := ch2.QueueBind("ev-q", "k1", "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "binding.created")
	wantHeader(t, d, "source_name", "amq.direct")
	wantHeader(t, d, "destination_name", "ev-q")
	wantHeader(t, d, "destination_kind", "queue")
	wantHeader(t, d, "routing_key", "k1")
	if err := ch2.ExchangeDeclare("ev-x", "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "exchange.created")
	wantHeader(t, d, "name", "ev-x")
	wantHeader(t, d, "type", "fanout")
	if err := ch2.ExchangeDelete("ev-x", false, false); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ds, "exchange.deleted")
	if err := ch2.QueueUnbind("ev-q", "k1", "amq.direct", nil); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ds, "binding.deleted")
	if _, err := ch2.QueueDelete("ev-q", false, false, false); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "queue.deleted")
	wantHeader(t, d, "name", "ev-q")
	c2.Close()
	d = nextEvent(t, ds, "connection.closed")
	wantHeader(t, d, "protocol", "AMQP 0-9-1")
	wantHeader(t, d, "user_provided_name", "ev-amqp")
	// A redeclaration reported nothing: the next queue event is ev-q2's.
	if _, err := ch.QueueDeclare("ev-q2", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "queue.created")
	wantHeader(t, d, "name", "ev-q2")
}

// TestEventExchangePermissions: binding to amq.rabbitmq.event needs read
// on it (the one check, exchange.Authorize); clients cannot publish to it
// (internal).
func TestEventExchangePermissions(t *testing.T) {
	b := startBroker(t)
	us := b.n.Users()
	if err := us.PutUser("evu", "evu", nil); err != nil {
		t.Fatal(err)
	}
	// Everything but read on amq.rabbitmq.event.
	if err := us.SetPermissions("evu", "/", ".*", ".*", "^(ev-.*|amq\\.topic)$"); err != nil {
		t.Fatal(err)
	}
	_, ch := channel(t, "amqp://evu:evu@"+b.Addr+"/")
	if _, err := ch.QueueDeclare("ev-mine", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("ev-mine", "amq.topic.ok", "amq.topic", false, nil); err != nil {
		t.Fatalf("bind to amq.topic: %v", err)
	}
	err := ch.QueueBind("ev-mine", "connection.#", "amq.rabbitmq.event", false, nil)
	if amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("bind to amq.rabbitmq.event without read: %v, want 403", err)
	}

	// guest may bind, but not publish to it.
	_, gch := channel(t, b.URL)
	if err := gch.ExchangeDeclarePassive("amq.rabbitmq.event", "topic", true, false, true, false, nil); err != nil {
		t.Fatalf("amq.rabbitmq.event is not declared in /: %v", err)
	}
	closed := gch.NotifyClose(make(chan *amqp.Error, 1))
	if err := gch.Publish("amq.rabbitmq.event", "queue.created", false, false, amqp.Publishing{}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.AccessRefused {
			t.Fatalf("publish to amq.rabbitmq.event: channel closed with %v, want 403", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publish to amq.rabbitmq.event: channel not closed")
	}
}

// TestEventExchangeAdminEvents: user, permission, vhost, policy, alarm,
// channel and consumer events, and a failed login.
func TestEventExchangeAdminEvents(t *testing.T) {
	b := startBroker(t)
	_, ch := channel(t, b.URL)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"user.#", "permission.*", "vhost.*", "policy.*", "alarm.*", "channel.*", "consumer.*", "queue.deleted"} {
		if err := ch.QueueBind(q.Name, k, "amq.rabbitmq.event", false, nil); err != nil {
			t.Fatalf("bind %s: %v", k, err)
		}
	}
	ds, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	us, core := b.n.Users(), b.n.Broker()
	if err := us.PutUser("ev-user", "pw", []string{"monitoring"}); err != nil {
		t.Fatal(err)
	}
	d := nextEvent(t, ds, "user.created")
	wantHeader(t, d, "name", "ev-user")
	if err := core.EnsureVHost("ev-vh"); err != nil {
		t.Fatal(err)
	}
	wantHeader(t, nextEvent(t, ds, "vhost.created"), "name", "ev-vh")
	if err := us.SetPermissions("ev-user", "ev-vh", ".*", ".*", "^ev"); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "permission.created")
	wantHeader(t, d, "user", "ev-user")
	wantHeader(t, d, "vhost", "ev-vh")
	wantHeader(t, d, "read", "^ev")
	if _, err := amqp.Dial("amqp://ev-user:wrong@" + b.Addr + "/ev-vh"); err == nil {
		t.Fatal("login with a wrong password accepted")
	}
	d = nextEvent(t, ds, "user.authentication.failure")
	wantHeader(t, d, "name", "ev-user")
	wantHeader(t, d, "peer_host", "127.0.0.1")
	c, err := amqp.Dial("amqp://ev-user:pw@" + b.Addr + "/ev-vh")
	if err != nil {
		t.Fatal(err)
	}
	wantHeader(t, nextEvent(t, ds, "user.authentication.success"), "name", "ev-user")
	ch2, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "channel.created")
	wantHeader(t, d, "user", "ev-user")
	wantHeader(t, d, "vhost", "ev-vh")
	wantHeader(t, d, "number", int64(1))
	if _, err := ch2.QueueDeclare("ev-cq", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.Consume("ev-cq", "ev-tag", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "consumer.created")
	wantHeader(t, d, "consumer_tag", "ev-tag")
	wantHeader(t, d, "queue", "ev-cq")
	wantHeader(t, d, "ack_required", true)
	c.Close()
	wantHeader(t, nextEvent(t, ds, "consumer.deleted"), "consumer_tag", "ev-tag")
	// The auto-delete queue went with its consumer, by the broker's hand.
	d = nextEvent(t, ds, "queue.deleted")
	wantHeader(t, d, "name", "ev-cq")
	wantHeader(t, d, "user_who_performed_action", "rmq-internal")
	wantHeader(t, nextEvent(t, ds, "channel.closed"), "vhost", "ev-vh")

	v, _ := core.VHost("ev-vh")
	if _, err := v.SetPolicy(exchange.Policy{Name: "ev-pol", Pattern: "^ev", ApplyTo: "queues", Definition: exchange.Table{"max-length": 5}}); err != nil {
		t.Fatal(err)
	}
	d = nextEvent(t, ds, "policy.set")
	wantHeader(t, d, "name", "ev-pol")
	wantHeader(t, d, "vhost", "ev-vh")
	if err := v.DeletePolicy("ev-pol"); err != nil {
		t.Fatal(err)
	}
	wantHeader(t, nextEvent(t, ds, "policy.cleared"), "name", "ev-pol")
	if err := us.ClearPermissions("ev-user", "ev-vh"); err != nil {
		t.Fatal(err)
	}
	wantHeader(t, nextEvent(t, ds, "permission.deleted"), "user", "ev-user")
	if err := us.DeleteUser("ev-user"); err != nil {
		t.Fatal(err)
	}
	wantHeader(t, nextEvent(t, ds, "user.deleted"), "name", "ev-user")
	if err := core.DeleteVHost("ev-vh"); err != nil {
		t.Fatal(err)
	}
	wantHeader(t, nextEvent(t, ds, "vhost.deleted"), "name", "ev-vh")
	core.Alarms().Set("memory", true)
	wantHeader(t, nextEvent(t, ds, "alarm.set"), "source", "memory")
	core.Alarms().Set("memory", false)
	wantHeader(t, nextEvent(t, ds, "alarm.cleared"), "source", "memory")
}

// TestClusterEventExchange: a queue on one node bound to
// amq.rabbitmq.event gets the events of another node (each node publishes
// its own, to its own amq.rabbitmq.event), and a declaration is reported
// once, by the node it was made on, not by every node that applies it.
func TestClusterEventExchange(t *testing.T) {
	nodes := startCluster(t, 3)
	_, ch0 := dialNode(t, nodes[0])
	if _, err := ch0.QueueDeclare("ev-all", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch0.QueueBind("ev-all", "queue.created", "amq.rabbitmq.event", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch0.Consume("ev-all", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "event binding on node 1", func() bool {
		var bs []map[string]any
		code, err := nodes[1].tryAPI("GET", "/api/bindings/%2F/e/amq.rabbitmq.event/q/ev-all", nil, &bs)
		return err == nil && code == 200 && len(bs) == 1
	})
	_, ch1 := dialNode(t, nodes[1])
	if _, err := ch1.QueueDeclare("ev-remote", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	d := nextEvent(t, ds, "queue.created")
	wantHeader(t, d, "name", "ev-remote")
	noDelivery(t, ds, 2*time.Second)
}
