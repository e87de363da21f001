package test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestMQTTConnectAuth(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	url := "tcp://" + addr
	if err := b.n.Users().PutUser("bob", "secret", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.n.Users().SetPermissions("bob", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	t.Run("v3 good password", func(t *testing.T) {
		c := dial3(t, url, "auth-ok", true, func(o *mqttOpts) { o.SetUsername("bob").SetPassword("secret") })
		c.subscribe(t, "x/y", 1)
	})
	t.Run("v3 vhost:user", func(t *testing.T) {
		dial3(t, url, "auth-vh", true, func(o *mqttOpts) { o.SetUsername("/:bob").SetPassword("secret") })
	})
	t.Run("v3 anonymous is the default user", func(t *testing.T) {
		dial3(t, url, "auth-anon", true)
	})
	t.Run("v3 bad password", func(t *testing.T) {
		_, err := tryDial3(url, "auth-bad", true, func(o *mqttOpts) { o.SetUsername("bob").SetPassword("wrong") })
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "bad user name or password") {
			t.Fatalf("err = %v, want bad user name or password", err)
		}
	})
	t.Run("v3 unknown vhost", func(t *testing.T) {
		_, err := tryDial3(url, "auth-novh", true, func(o *mqttOpts) { o.SetUsername("nope:bob").SetPassword("secret") })
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "not authorized") {
			t.Fatalf("err = %v, want not authorized", err)
		}
	})
	t.Run("v5 bad password", func(t *testing.T) {
		_, ack, err := tryDial5(addr, &paho.Connect{ClientID: "auth5", CleanStart: true, Username: "bob",
			UsernameFlag: true, Password: []byte("wrong"), PasswordFlag: true})
		if err == nil || ack == nil || ack.ReasonCode != 0x86 {
			t.Fatalf("err = %v, connack = %+v, want 0x86", err, ack)
		}
	})
	t.Run("v5 no vhost access", func(t *testing.T) {
		if err := b.n.Users().PutUser("eve", "pw", nil); err != nil {
			t.Fatal(err)
		}
		_, ack, err := tryDial5(addr, &paho.Connect{ClientID: "auth5b", CleanStart: true, Username: "eve",
			UsernameFlag: true, Password: []byte("pw"), PasswordFlag: true})
		if err == nil || ack == nil || ack.ReasonCode != 0x87 {
			t.Fatalf("err = %v, connack = %+v, want 0x87", err, ack)
		}
	})
}

func TestMQTTPublishSubscribeQoS(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	sub := dial3(t, url, "sub", true)
	sub.subscribe(t, "a/+/c", 1)
	sub.subscribe(t, "q0/#", 0)
	pub := dial3(t, url, "pub", true)
	for _, tc := range []struct {
		topic   string
		pubQoS  byte
		wantQoS byte
	}{
		{"a/b/c", 0, 0},
		{"a/b/c", 1, 1},
		{"a/b/c", 2, 1}, // capped by the subscription
		{"q0/x/y", 1, 0},
		{"q0", 1, 0}, // "#" matches the parent level
	} {
		payload := fmt.Sprintf("%s-%d", tc.topic, tc.pubQoS)
		pub.publish(t, tc.topic, tc.pubQoS, false, payload)
		m := sub.receive(t)
		if m.topic != tc.topic || m.payload != payload || m.qos != tc.wantQoS || m.retain {
			t.Fatalf("got %+v, want %s %q qos %d", m, tc.topic, payload, tc.wantQoS)
		}
	}
	pub.publish(t, "a/b/d", 1, false, "nomatch")
	pub.publish(t, "a/b/c/d", 1, false, "nomatch")
	sub.none(t, 200*time.Millisecond)

	// Unsubscribe stops delivery.
	if tok := sub.Unsubscribe("a/+/c"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	pub.publish(t, "a/b/c", 1, false, "after-unsub")
	sub.none(t, 200*time.Millisecond)
}

func TestMQTTManyQoS1InOrder(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	sub := dial3(t, url, "order-sub", false)
	sub.subscribe(t, "order/#", 1)
	pub := dial3(t, url, "order-pub", true)
	const n = 2000
	toks := make([]interface{ WaitTimeout(time.Duration) bool }, 0, n)
	for i := 0; i < n; i++ {
		toks = append(toks, pub.Publish("order/x", 1, false, fmt.Sprint(i)))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(10 * time.Second) {
			t.Fatal("puback timeout")
		}
	}
	for i := 0; i < n; i++ {
		if m := sub.receive(t); m.payload != fmt.Sprint(i) {
			t.Fatalf("message %d: got %q", i, m.payload)
		}
	}
}

func TestMQTTCrossProtocolAMQP(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	_, ch := channel(t, b.URL)

	// AMQP → MQTT: amq.topic key a.b.c reaches an MQTT subscriber of a/+/c.
	sub := dial3(t, url, "x-sub", true)
	sub.subscribe(t, "a/+/c", 1)
	if err := ch.PublishWithContext(context.Background(), "amq.topic", "a.b.c", false, false,
		amqp.Publishing{Body: []byte("from-amqp"), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	m := sub.receive(t)
	if m.topic != "a/b/c" || m.payload != "from-amqp" || m.qos != 1 {
		t.Fatalf("got %+v", m)
	}
	if err := ch.PublishWithContext(context.Background(), "amq.topic", "a.b.c", false, false,
		amqp.Publishing{Body: []byte("transient")}); err != nil {
		t.Fatal(err)
	}
	if m := sub.receive(t); m.payload != "transient" || m.qos != 0 {
		t.Fatalf("got %+v, want a QoS 0 message", m)
	}

	// MQTT → AMQP: a queue bound to amq.topic with sensor.# gets sensor/1/temp.
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "sensor.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := dial3(t, url, "x-pub", true)
	pub.publish(t, "sensor/1/temp", 1, false, "21.5")
	d := receive(t, ds)
	if d.RoutingKey != "sensor.1.temp" || string(d.Body) != "21.5" || d.DeliveryMode != amqp.Persistent || d.Exchange != "amq.topic" {
		t.Fatalf("got key %q body %q mode %d exchange %q", d.RoutingKey, d.Body, d.DeliveryMode, d.Exchange)
	}
	// A "." in an MQTT topic becomes "/" in the routing key (RabbitMQ).
	if err := ch.QueueBind(q.Name, "v1/2.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	pub.publish(t, "v1.2/x", 0, false, "dotted")
	if d := receive(t, ds); d.RoutingKey != "v1/2.x" {
		t.Fatalf("routing key %q, want v1/2.x", d.RoutingKey)
	}
}

func TestMQTTRetained(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	pub := dial3(t, url, "ret-pub", true)
	pub.publish(t, "home/kitchen/temp", 1, true, "20")
	pub.publish(t, "home/hall/temp", 0, true, "18")
	pub.publish(t, "home/hall/temp", 1, true, "19") // replaces

	sub := dial3(t, url, "ret-sub", true)
	sub.subscribe(t, "home/+/temp", 1)
	got := map[string]msg3{}
	for i := 0; i < 2; i++ {
		m := sub.receive(t)
		got[m.topic] = m
	}
	if m := got["home/kitchen/temp"]; m.payload != "20" || !m.retain || m.qos != 1 {
		t.Fatalf("kitchen: %+v", m)
	}
	if m := got["home/hall/temp"]; m.payload != "19" || !m.retain {
		t.Fatalf("hall: %+v", m)
	}
	sub.none(t, 100*time.Millisecond)

	// A live publish with retain set reaches current subscribers without
	// the retain flag.
	pub.publish(t, "home/kitchen/temp", 1, true, "21")
	if m := sub.receive(t); m.payload != "21" || m.retain {
		t.Fatalf("live retained publish: %+v", m)
	}
	// An empty retained message clears.
	pub.publish(t, "home/kitchen/temp", 1, true, "")
	sub.receive(t)
	sub2 := dial3(t, url, "ret-sub2", true)
	sub2.subscribe(t, "home/#", 0)
	if m := sub2.receive(t); m.topic != "home/hall/temp" || m.qos != 0 {
		t.Fatalf("after clear: %+v", m)
	}
	sub2.none(t, 200*time.Millisecond)

	// Survives a restart.
	b.restart()
	sub3 := dial3(t, "tcp://"+b.mqttAddr(), "ret-sub3", true)
	sub3.subscribe(t, "#", 1)
	if m := sub3.receive(t); m.topic != "home/hall/temp" || m.payload != "19" || !m.retain {
		t.Fatalf("after restart: %+v", m)
	}
}

func TestMQTTWill(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	sub := dial3(t, url, "will-sub", true)
	sub.subscribe(t, "status/#", 1)

	// A clean DISCONNECT discards the will.
	c := dial3(t, url, "will-1", true, func(o *mqttOpts) { o.SetWill("status/1", "gone", 1, false) })
	c.Disconnect(100)
	sub.none(t, 200*time.Millisecond)

	// A dropped connection sends it.
	nc := rawConnect(t, b.mqttAddr(), "will-2", "status/2", "lost")
	nc.Close()
	if m := sub.receive(t); m.topic != "status/2" || m.payload != "lost" || m.qos != 1 {
		t.Fatalf("will: %+v", m)
	}
}

// rawConnect opens a v3.1.1 connection with a will (QoS 1) by hand and
// waits for CONNACK.
func rawConnect(t testing.TB, addr, id, willTopic, willMsg string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }
	var body []byte
	body = append(body, str("MQTT")...)
	body = append(body, 4, 0x02|0x04|0x08, 0, 60) // clean, will, will QoS 1; keepalive 60
	body = append(body, str(id)...)
	body = append(body, str(willTopic)...)
	body = append(body, str(willMsg)...)
	pkt := append([]byte{0x10, byte(len(body))}, body...)
	if _, err := nc.Write(pkt); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(nc, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("connack %x: %v", ack, err)
	}
	return nc
}

func TestMQTTPersistentSession(t *testing.T) {
	b := startMQTTBroker(t)
	url := "tcp://" + b.mqttAddr()
	c := dial3(t, url, "persist", false)
	c.subscribe(t, "p/#", 1)
	c.Disconnect(100)

	pub := dial3(t, url, "persist-pub", true)
	for i := 0; i < 5; i++ {
		pub.publish(t, "p/x", 1, false, fmt.Sprint(i))
	}
	pub.publish(t, "p/x", 0, false, "qos0")

	// The session and its queued QoS 1 messages survive a restart.
	b.restart()
	url = "tcp://" + b.mqttAddr()
	c2 := dial3(t, url, "persist", false)
	for i := 0; i < 5; i++ {
		if m := c2.receive(t); m.payload != fmt.Sprint(i) || m.topic != "p/x" {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	// The subscription is still there.
	pub2 := dial3(t, url, "persist-pub2", true)
	pub2.publish(t, "p/y", 1, false, "live")
	if m := c2.receive(t); m.payload != "live" {
		t.Fatalf("live: %+v", m)
	}
	c2.Disconnect(100)

	// Clean session 1 discards it, its stored record too: after a
	// restart it is still gone.
	c3 := dial3(t, url, "persist", true)
	c3.Disconnect(100)
	pub2.publish(t, "p/y", 1, false, "dropped")
	pub2.Disconnect(100)
	b.restart()
	url = "tcp://" + b.mqttAddr()
	pub3 := dial3(t, url, "persist-pub3", true)
	pub3.publish(t, "p/y", 1, false, "dropped too")
	c4 := dial3(t, url, "persist", false)
	c4.none(t, 300*time.Millisecond)
}

func TestMQTTSessionTakeover(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	first, _ := dial5(t, addr, &paho.Connect{ClientID: "dup", CleanStart: true})
	dial5(t, addr, &paho.Connect{ClientID: "dup", CleanStart: true})
	select {
	case d := <-first.disc:
		if d.ReasonCode != 0x8E {
			t.Fatalf("disconnect reason %#x, want 0x8E", d.ReasonCode)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("first connection not disconnected")
	}
}

func TestMQTTQoS2ExactlyOnce(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	sub, _ := dial5(t, addr, &paho.Connect{ClientID: "q2-sub", CleanStart: true})
	sub.subscribe(t, paho.SubscribeOptions{Topic: "q2/#", QoS: 2})
	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "q2-pub", CleanStart: true})
	for i := 0; i < 50; i++ {
		r := pub.publish(t, &paho.Publish{Topic: "q2/a", QoS: 2, Payload: []byte(fmt.Sprint(i))})
		if r.ReasonCode != 0 {
			t.Fatalf("pubrec reason %#x", r.ReasonCode)
		}
	}
	for i := 0; i < 50; i++ {
		m := sub.receive(t)
		if string(m.Payload) != fmt.Sprint(i) || m.QoS != 2 {
			t.Fatalf("message %d: %q qos %d", i, m.Payload, m.QoS)
		}
	}
	sub.none(t, 200*time.Millisecond)
}

func TestMQTTQoS2DuplicatePublishRoutedOnce(t *testing.T) {
	b := startMQTTBroker(t)
	_, ch := channel(t, b.URL)
	q, _ := ch.QueueDeclare("", false, true, true, false, nil)
	if err := ch.QueueBind(q.Name, "dup.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	nc := rawConnect(t, b.mqttAddr(), "q2raw", "w", "w")
	defer nc.Close()
	// The same QoS 2 PUBLISH (packet id 7) twice, the second with DUP.
	pub := func(first byte) {
		body := append([]byte{0, 5}, "dup/x"...)
		body = append(body, 0, 7)
		body = append(body, "once"...)
		if _, err := nc.Write(append([]byte{first, byte(len(body))}, body...)); err != nil {
			t.Fatal(err)
		}
	}
	pub(0x34)
	pub(0x3C)
	br := bufio.NewReader(nc)
	for i := 0; i < 2; i++ {
		rec := make([]byte, 4)
		if _, err := io.ReadFull(br, rec); err != nil || rec[0] != 0x50 || rec[3] != 7 {
			t.Fatalf("pubrec %d: %x %v", i, rec, err)
		}
	}
	if _, err := nc.Write([]byte{0x62, 2, 0, 7}); err != nil { // PUBREL
		t.Fatal(err)
	}
	comp := make([]byte, 4)
	if _, err := io.ReadFull(br, comp); err != nil || comp[0] != 0x70 {
		t.Fatalf("pubcomp %x %v", comp, err)
	}
	if n, _ := ch.QueueDeclarePassive(q.Name, false, true, true, false, nil); n.Messages != 1 {
		t.Fatalf("queue has %d messages, want 1", n.Messages)
	}
}

func TestMQTTWebSocket(t *testing.T) {
	b := startMQTTBroker(t)
	ws := "ws://" + b.n.MQTTWSAddr().String() + "/ws"
	sub := dial3(t, ws, "ws-sub", true)
	sub.subscribe(t, "ws/#", 1)
	pub := dial3(t, "tcp://"+b.mqttAddr(), "tcp-pub", true)
	pub.publish(t, "ws/a", 1, false, "over-ws")
	if m := sub.receive(t); m.payload != "over-ws" {
		t.Fatalf("got %+v", m)
	}
	sub.publish(t, "ws/b", 1, false, "from-ws")
	if m := sub.receive(t); m.payload != "from-ws" {
		t.Fatalf("got %+v", m)
	}
}

func TestMQTTGarbageClosesConnection(t *testing.T) {
	b := startMQTTBroker(t)
	junk := make([]byte, 4096)
	for _, addr := range []string{b.mqttAddr(), b.n.MQTTWSAddr().String()} {
		for i := 0; i < 20; i++ {
			_, _ = rand.Read(junk)
			if i%2 == 0 {
				junk[0] = 0x10 // looks like CONNECT
			}
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = nc.Write(junk)
			// The rest of a packet that claims more never comes.
			_ = nc.(*net.TCPConn).CloseWrite()
			_ = nc.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, err = io.Copy(io.Discard, nc)
			nc.Close()
			// EOF or a reset: either way the broker closed it.
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("%s: connection not closed by the broker: %v", addr, err)
			}
		}
	}
	// A huge remaining length is refused before it is read.
	nc, err := net.Dial("tcp", b.mqttAddr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = nc.Write([]byte{0x10, 0xff, 0xff, 0xff, 0x7f})
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil && strings.Contains(err.Error(), "timeout") {
		t.Fatalf("oversized CONNECT: %v", err)
	}
	nc.Close()
	// The broker still works.
	c := dial3(t, "tcp://"+b.mqttAddr(), "after-garbage", true)
	c.subscribe(t, "ok", 0)
}
