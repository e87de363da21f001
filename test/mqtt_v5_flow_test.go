package test

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"
)

// raw5 is a hand-driven MQTT 5 connection, for what paho.golang will not
// do (exceed the server's receive maximum).
type raw5 struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

// dialRaw5 connects with a clean start; a sessionExpiry > 0 makes the
// session persistent and resumes it.
func dialRaw5(t testing.TB, addr, id string, sessionExpiry ...uint32) (*raw5, *packets.Connack) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := &raw5{t: t, nc: nc, br: bufio.NewReader(nc)}
	cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: id, CleanStart: true, KeepAlive: 60,
		Properties: &packets.Properties{}}
	if len(sessionExpiry) > 0 && sessionExpiry[0] > 0 {
		cp.CleanStart = false
		cp.Properties.SessionExpiryInterval = &sessionExpiry[0]
	}
	if _, err := cp.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	ack, ok := r.read().Content.(*packets.Connack)
	if !ok || ack.ReasonCode != 0 {
		t.Fatalf("connack: %+v", ack)
	}
	return r, ack
}

func (r *raw5) read() *packets.ControlPacket {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := packets.ReadPacket(r.br)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return p
}

func (r *raw5) publish2(pid uint16) {
	r.send(&packets.Publish{Topic: "rm/x", QoS: 2, PacketID: pid, Payload: []byte("m")})
}

// send writes a packet (Publish, Pubrec, Pubrel, Pubcomp, Subscribe).
func (r *raw5) send(p interface {
	WriteTo(io.Writer) (int64, error)
}) {
	r.t.Helper()
	switch pb := p.(type) {
	case *packets.Publish:
		if pb.Properties == nil {
			pb.Properties = &packets.Properties{}
		}
	case *packets.Subscribe:
		if pb.Properties == nil {
			pb.Properties = &packets.Properties{}
		}
	}
	if _, err := p.WriteTo(r.nc); err != nil {
		r.t.Fatal(err)
	}
}

// expect reads the next packet and checks its type.
func (r *raw5) expect(typ byte) *packets.ControlPacket {
	r.t.Helper()
	p := r.read()
	if p.Type != typ {
		r.t.Fatalf("got %s (%v), want type %d", p.PacketType(), p.Content, typ)
	}
	return p
}

// quiet checks that nothing arrives for d.
func (r *raw5) quiet(d time.Duration) {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(d))
	if p, err := packets.ReadPacket(r.br); err == nil {
		r.t.Fatalf("unexpected %s: %v", p.PacketType(), p.Content)
	}
}

// TestMQTT5ReceiveMaximumInbound: a client that has more unacknowledged
// QoS 2 publishes (no PUBREL yet) than the Receive Maximum the server
// advertised is disconnected with 0x93; PUBCOMP gives the credit back.
func TestMQTT5ReceiveMaximumInbound(t *testing.T) {
	b := startMQTTBroker(t)
	r, ack := dialRaw5(t, b.mqttAddr(), "rm-in")
	if ack.Properties == nil || ack.Properties.ReceiveMaximum == nil {
		t.Fatal("CONNACK without receive maximum")
	}
	rm := *ack.Properties.ReceiveMaximum
	for pid := uint16(1); pid <= rm; pid++ {
		r.publish2(pid)
	}
	for i := 0; i < int(rm); i++ {
		p := r.read()
		if rec, ok := p.Content.(*packets.Pubrec); !ok || rec.ReasonCode >= 0x80 {
			t.Fatalf("publish %d: got %s, want PUBREC success", i+1, p.PacketType())
		}
	}
	// PUBREL → PUBCOMP returns one credit: one more PUBLISH is fine.
	r.send(&packets.Pubrel{PacketID: 1, Properties: &packets.Properties{}})
	if p := r.read(); p.Type != packets.PUBCOMP {
		t.Fatalf("got %s, want PUBCOMP", p.PacketType())
	}
	r.publish2(1)
	if p := r.read(); p.Type != packets.PUBREC {
		t.Fatalf("got %s, want PUBREC", p.PacketType())
	}
	// One more is over the limit.
	r.publish2(rm + 1)
	p := r.read()
	if d, ok := p.Content.(*packets.Disconnect); !ok || d.ReasonCode != 0x93 {
		t.Fatalf("got %s %+v, want DISCONNECT 0x93", p.PacketType(), p.Content)
	}
}

// TestMQTT5ReceiveMaximumOutbound: the server sends no more unacknowledged
// QoS 1 messages than the client's receive maximum.
func TestMQTT5ReceiveMaximumOutbound(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *paho.Publish, 100)
	c := paho.NewClient(paho.ClientConfig{Conn: nc, EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			got <- r.Packet
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "rm-out", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{ReceiveMaximum: u16(3)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "rmo/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "rm-pub", CleanStart: true})
	for i := 0; i < 10; i++ {
		pub.publish(t, &paho.Publish{Topic: "rmo/x", QoS: 1, Payload: []byte{byte('0' + i)}})
	}
	var held []*paho.Publish
	for len(held) < 3 {
		select {
		case m := <-got:
			held = append(held, m)
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d messages, want 3", len(held))
		}
	}
	select {
	case m := <-got:
		t.Fatalf("a 4th unacknowledged message %q with receive maximum 3", m.Payload)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.Ack(held[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if string(m.Payload) != "3" {
			t.Fatalf("after one PUBACK got %q, want 3", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message after PUBACK")
	}
}

// TestMQTT5TopicAliasOutbound: a client with a Topic Alias Maximum gets
// its topics as aliases: the topic with a new alias once, then the alias
// alone; topics beyond the maximum go in full.
func TestMQTT5TopicAliasOutbound(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	c, _ := dial5(t, addr, &paho.Connect{ClientID: "ta-out", CleanStart: true,
		Properties: &paho.ConnectProperties{TopicAliasMaximum: u16(2)}})
	c.subscribe(t, paho.SubscribeOptions{Topic: "ta/#", QoS: 1})
	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "ta-pub", CleanStart: true})
	for _, tp := range []string{"ta/a", "ta/a", "ta/b", "ta/c", "ta/b", "ta/a", "ta/c"} {
		pub.publish(t, &paho.Publish{Topic: tp, QoS: 1, Payload: []byte(tp)})
	}
	type want struct {
		topic string
		alias uint16 // 0: none
	}
	for i, w := range []want{{"ta/a", 1}, {"", 1}, {"ta/b", 2}, {"ta/c", 0}, {"", 2}, {"", 1}, {"ta/c", 0}} {
		m := c.receive(t)
		var alias uint16
		if m.Properties != nil && m.Properties.TopicAlias != nil {
			alias = *m.Properties.TopicAlias
		}
		if m.Topic != w.topic || alias != w.alias {
			t.Fatalf("message %d (%s): topic %q alias %d, want %q alias %d", i, m.Payload, m.Topic, alias, w.topic, w.alias)
		}
	}
	// A client without a topic alias maximum gets none.
	plain, _ := dial5(t, addr, &paho.Connect{ClientID: "ta-plain", CleanStart: true})
	plain.subscribe(t, paho.SubscribeOptions{Topic: "ta/#", QoS: 0})
	pub.publish(t, &paho.Publish{Topic: "ta/a", QoS: 1, Payload: []byte("p")})
	if m := plain.receive(t); m.Topic != "ta/a" || (m.Properties != nil && m.Properties.TopicAlias != nil) {
		t.Fatalf("no-alias client got topic %q alias %v", m.Topic, m.Properties.TopicAlias)
	}
}

// TestMQTT5MessageExpiryCountdown: a queued message goes out with the
// expiry interval it has left, and one that expired while queued (even
// behind a message that does not expire) is not delivered. AMQP's
// expiration counts down the same way.
func TestMQTT5MessageExpiryCountdown(t *testing.T) {
	b := startMQTTBroker(t)
	addr := b.mqttAddr()
	cp := func() *paho.Connect {
		return &paho.Connect{ClientID: "exp-cd", CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(300)}}
	}
	c, _ := dial5(t, addr, cp())
	c.subscribe(t, paho.SubscribeOptions{Topic: "cd/#", QoS: 1})
	_ = c.Disconnect(&paho.Disconnect{})

	pub, _ := dial5(t, addr, &paho.Connect{ClientID: "exp-pub", CleanStart: true})
	pub.publish(t, &paho.Publish{Topic: "cd/keep", QoS: 1, Payload: []byte("keep")})
	pub.publish(t, &paho.Publish{Topic: "cd/short", QoS: 1, Payload: []byte("short"),
		Properties: &paho.PublishProperties{MessageExpiry: u32(1)}})
	pub.publish(t, &paho.Publish{Topic: "cd/long", QoS: 1, Payload: []byte("long"),
		Properties: &paho.PublishProperties{MessageExpiry: u32(10)}})
	_, ch := channel(t, b.URL)
	if err := ch.PublishWithContext(context.Background(), "amq.topic", "cd.amqp", false, false, amqp.Publishing{
		Body: []byte("amqp"), DeliveryMode: amqp.Persistent, Expiration: "20000"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)

	c2, _ := dial5(t, addr, cp())
	exp := func(m *paho.Publish) uint32 {
		if m.Properties == nil || m.Properties.MessageExpiry == nil {
			return 0
		}
		return *m.Properties.MessageExpiry
	}
	if m := c2.receive(t); string(m.Payload) != "keep" || exp(m) != 0 {
		t.Fatalf("first: %q expiry %d", m.Payload, exp(m))
	}
	if m := c2.receive(t); string(m.Payload) != "long" || exp(m) < 6 || exp(m) > 8 {
		t.Fatalf("second: %q expiry %d, want long with 6..8 s left of 10", m.Payload, exp(m))
	}
	if m := c2.receive(t); string(m.Payload) != "amqp" || exp(m) < 16 || exp(m) > 18 {
		t.Fatalf("third: %q expiry %d, want amqp with 16..18 s left of 20", m.Payload, exp(m))
	}
	c2.none(t, 300*time.Millisecond)
}
