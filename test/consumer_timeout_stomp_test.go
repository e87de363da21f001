package test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// TestConsumerTimeoutSTOMP: a STOMP client-individual subscription that
// leaves deliveries unacknowledged past the queue's x-consumer-timeout
// gets an ERROR and loses its connection (RabbitMQ's STOMP adapter closes
// it when its AMQP channel times out); the deliveries go back to the
// queue, redelivered. A subscription that acks in time, under the node's
// default, stays connected; an auto-ack one is never timed out.
func TestConsumerTimeoutSTOMP(t *testing.T) {
	b := stBroker(t, func(c *conf.Config) { c.ConsumerTimeout = 1500 * time.Millisecond })
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("ct-stomp", false, false, false, false, amqp.Table{"x-consumer-timeout": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	publishN(t, ch, "ct-stomp", 2)
	sc, err := stomp.Dial("tcp", stAddr(b), stHostOpt(), stomp.ConnOpt.Login("guest", "guest"))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.MustDisconnect()
	sub, err := sc.Subscribe("/amq/queue/ct-stomp", stomp.AckClientIndividual)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatalf("delivery %d: %v", i, m.Err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("delivery %d did not come", i)
		}
	}
	start := time.Now()
	select {
	case m := <-sub.C:
		if m == nil || m.Err == nil || m.Err.Error() != "PRECONDITION_FAILED" || !strings.Contains(string(m.Body), "delivery acknowledgement timed out") {
			t.Fatalf("after the timeout: %+v, want an ERROR about the acknowledgement timeout", m)
		}
		t.Logf("ERROR after %v: %s", time.Since(start).Round(time.Millisecond), m.Body)
	case <-time.After(10 * time.Second):
		t.Fatal("no ERROR within 10 s of a 1 s consumer timeout")
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Fatalf("timed out %v after the deliveries, before the 1 s timeout", el)
	}
	_, ch2 := channel(t, b.URL)
	ds, err := ch2.Consume("ct-stomp", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if d := receive(t, ds); !d.Redelivered || string(d.Body) != string(rune('a'+i)) {
			t.Fatalf("after the timeout, delivery %d: %q redelivered=%v", i, d.Body, d.Redelivered)
		}
	}

	// Acks within the node's 1.5 s default, and an auto-ack subscription
	// holding nothing: still connected after several timeouts' worth.
	if _, err := ch.QueueDeclare("ct-stomp-ok", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	sc2, err := stomp.Dial("tcp", stAddr(b), stHostOpt(), stomp.ConnOpt.Login("guest", "guest"))
	if err != nil {
		t.Fatal(err)
	}
	defer sc2.MustDisconnect()
	ok, err := sc2.Subscribe("/amq/queue/ct-stomp-ok", stomp.AckClient)
	if err != nil {
		t.Fatal(err)
	}
	auto, err := sc2.Subscribe("/amq/queue/ct-stomp", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		publishN(t, ch, "ct-stomp-ok", 1)
		select {
		case m := <-ok.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			time.Sleep(900 * time.Millisecond)
			if err := sc2.Ack(m); err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no delivery")
		}
	}
	select {
	case m := <-auto.C:
		t.Fatalf("auto-ack subscription got %+v", m)
	default:
	}
	// The connection still works: a receipt comes back.
	if err := sc2.Send("/amq/queue/ct-stomp-ok", "text/plain", []byte("x"), stomp.SendOpt.Receipt); err != nil {
		t.Fatalf("connection closed though it acked in time: %v", err)
	}
}
