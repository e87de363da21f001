package test

import (
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// TestMQTTCrashQoS2State kills the real binary with SIGKILL while QoS 2
// exchanges of persistent sessions are half done, and checks exactly-once
// across the restart:
//
//   - inbound: a PUBLISH the broker answered with PUBREC and that the
//     client resends (DUP) after the restart is acknowledged again, not
//     routed again; PUBREL then gets PUBCOMP success; and once PUBCOMP
//     has gone, the packet id is free for a new message, restart or not.
//   - outbound: a message the subscriber answered with PUBREC, and got
//     PUBREL for, is not delivered again after the restart; the broker
//     resends PUBREL for its packet id instead.
func TestMQTTCrashQoS2State(t *testing.T) {
	port, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := testbin.Start(t, append([]string{"--mqtt-listen", addr, "--mqtt-ws-listen", ""}, testbin.AnonMQTTFlags()...)...)
	waitMQTT(t, "tcp://"+addr)

	// An AMQP queue counts what the inbound side routes.
	count := func() int {
		t.Helper()
		conn, err := amqp.Dial(p.AMQPURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclare("q2-count", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "q2in.#", "amq.topic", false, nil); err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	count()

	// Outbound: a persistent QoS 2 subscriber.
	sub, _ := dialRaw5(t, addr, "q2-sub", 600)
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.SubOptions{{Topic: "q2out/#", QoS: 2}}})
	sub.expect(packets.SUBACK)

	// Inbound: a persistent QoS 2 publisher.
	pub, _ := dialRaw5(t, addr, "q2-pub", 600)
	pub.send(&packets.Publish{Topic: "q2in/a", QoS: 2, PacketID: 7, Payload: []byte("first")})
	pub.expect(packets.PUBREC)
	pub.send(&packets.Publish{Topic: "q2out/a", QoS: 2, PacketID: 8, Payload: []byte("out")})
	pub.expect(packets.PUBREC)

	pk := sub.expect(packets.PUBLISH).Content.(*packets.Publish)
	if string(pk.Payload) != "out" {
		t.Fatalf("subscriber got %q", pk.Payload)
	}
	sub.send(&packets.Pubrec{PacketID: pk.PacketID, Properties: &packets.Properties{}})
	if rel := sub.expect(packets.PUBREL).Content.(*packets.Pubrel); rel.PacketID != pk.PacketID {
		t.Fatalf("PUBREL for %d, want %d", rel.PacketID, pk.PacketID)
	}
	// The core's acknowledgement follows the PUBREL's flush; give the
	// store's group commit a moment (see protocol/mqtt/qos2.go).
	time.Sleep(300 * time.Millisecond)

	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitMQTT(t, "tcp://"+addr)

	// Inbound: the resent PUBLISH is a duplicate.
	pub, ack := dialRaw5(t, addr, "q2-pub", 600)
	if !ack.SessionPresent {
		t.Fatal("publisher session not present after restart")
	}
	pub.send(&packets.Publish{Topic: "q2in/a", QoS: 2, PacketID: 7, Duplicate: true, Payload: []byte("first")})
	if rec := pub.expect(packets.PUBREC).Content.(*packets.Pubrec); rec.ReasonCode >= 0x80 {
		t.Fatalf("PUBREC for the resent PUBLISH: 0x%x", rec.ReasonCode)
	}
	pub.send(&packets.Pubrel{PacketID: 7, Properties: &packets.Properties{}})
	if c := pub.expect(packets.PUBCOMP).Content.(*packets.Pubcomp); c.ReasonCode != 0 {
		t.Fatalf("PUBCOMP 0x%x, want success (packet id known after the restart)", c.ReasonCode)
	}
	if n := count(); n != 1 {
		t.Fatalf("q2-count holds %d messages after a resent PUBLISH, want 1", n)
	}
	// Outbound: PUBREL again, no second delivery.
	sub, ack = dialRaw5(t, addr, "q2-sub", 600)
	if !ack.SessionPresent {
		t.Fatal("subscriber session not present after restart")
	}
	if rel := sub.expect(packets.PUBREL).Content.(*packets.Pubrel); rel.PacketID != pk.PacketID {
		t.Fatalf("PUBREL for %d after restart, want %d", rel.PacketID, pk.PacketID)
	}
	sub.quiet(500 * time.Millisecond)
	sub.send(&packets.Pubcomp{PacketID: pk.PacketID, Properties: &packets.Properties{}})

	// After PUBCOMP the packet id is free again, across a second crash.
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitMQTT(t, "tcp://"+addr)
	pub, _ = dialRaw5(t, addr, "q2-pub", 600)
	pub.send(&packets.Publish{Topic: "q2in/a", QoS: 2, PacketID: 7, Payload: []byte("second")})
	pub.expect(packets.PUBREC)
	pub.send(&packets.Pubrel{PacketID: 7, Properties: &packets.Properties{}})
	pub.expect(packets.PUBCOMP)
	if n := count(); n != 2 {
		t.Fatalf("q2-count holds %d messages, want 2 (a reused packet id is a new message)", n)
	}
	// The subscriber's PUBCOMP may not have been written before the kill:
	// then the broker resends PUBREL (harmless); it never redelivers.
	sub, _ = dialRaw5(t, addr, "q2-sub", 600)
	_ = sub.nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if p, err := packets.ReadPacket(sub.br); err == nil {
		if rel, ok := p.Content.(*packets.Pubrel); !ok || rel.PacketID != pk.PacketID {
			t.Fatalf("after the second restart: %s %v", p.PacketType(), p.Content)
		}
		sub.send(&packets.Pubcomp{PacketID: pk.PacketID, Properties: &packets.Properties{}})
		sub.quiet(300 * time.Millisecond)
	}
	// The end of the connection writes the settled state: no PUBREL
	// after it, even across a crash.
	_, _ = (&packets.Disconnect{Properties: &packets.Properties{}}).WriteTo(sub.nc)
	time.Sleep(200 * time.Millisecond)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	waitMQTT(t, "tcp://"+addr)
	sub, _ = dialRaw5(t, addr, "q2-sub", 600)
	sub.quiet(300 * time.Millisecond)
}
