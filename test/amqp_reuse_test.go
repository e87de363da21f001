package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestReusedMessagesIntact: small transient messages reuse their memory
// once delivered (exchange/reuse.go). Four publishers send distinct small
// bodies at once to a queue read with auto-ack, a queue read with manual
// acks (every fifth one nacked and requeued once), a fan-out to two queues,
// a queue read by a STOMP subscriber and a queue that is read with
// basic.get; every consumer must get exactly the bodies and routing keys
// sent to it, none overwritten by a later message. Then the same with
// durable queues and persistent messages: a stored message is reused too
// (the store keeps a copy of its own).
func TestReusedMessagesIntact(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("persistent=%v", persistent), func(t *testing.T) { testReusedMessages(t, persistent) })
	}
}

func testReusedMessages(t *testing.T, persistent bool) {
	b := stBroker(t)
	_, setup := channel(t, b.URL)
	mode := amqp.Transient
	if persistent {
		mode = amqp.Persistent
	}
	for _, q := range []string{"auto", "manual", "fan1", "fan2", "got", "stomp"} {
		if _, err := setup.QueueDeclare(q, persistent, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := setup.ExchangeDeclare("fan", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"fan1", "fan2"} {
		if err := setup.QueueBind(q, "", "fan", false, nil); err != nil {
			t.Fatal(err)
		}
	}

	const pubs, each = 4, 3000
	want := pubs * each
	type got struct {
		mu   sync.Mutex
		seen map[string]int
	}
	record := func(g *got, d amqp.Delivery) {
		g.mu.Lock()
		g.seen[d.RoutingKey+"|"+string(d.Body)]++
		g.mu.Unlock()
	}
	consume := func(queue string, autoAck bool) *got {
		g := &got{seen: map[string]int{}}
		_, ch := channel(t, b.URL)
		if err := ch.Qos(500, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume(queue, "", autoAck, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			n := 0
			for d := range ds {
				if !autoAck {
					n++
					if n%5 == 0 && !d.Redelivered {
						_ = d.Nack(false, true) // back once, delivered again
						continue
					}
					_ = d.Ack(false)
				}
				record(g, d)
			}
		}()
		return g
	}
	auto, manual := consume("auto", true), consume("manual", false)
	fan1, fan2 := consume("fan1", true), consume("fan2", true)
	st := &got{seen: map[string]int{}}
	sub, err := stDial(t, b).Subscribe("/amq/queue/stomp", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range sub.C {
			if m.Err != nil {
				return
			}
			st.mu.Lock()
			st.seen["stomp|"+string(m.Body)]++
			st.mu.Unlock()
		}
	}()

	body := func(p, i int) string { return fmt.Sprintf("p%d-m%06d-%032d", p, i, i*7919) }
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ch := channel(t, b.URL)
			for i := range each {
				bd := []byte(body(p, i))
				for _, dst := range [][2]string{{"", "auto"}, {"", "manual"}, {"fan", "k"}, {"", "got"}, {"", "stomp"}} {
					if err := ch.PublishWithContext(context.Background(), dst[0], dst[1], false, false, amqp.Publishing{Body: bd, DeliveryMode: mode}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	var gets []string
	_, gch := channel(t, b.URL)
	deadline := time.Now().Add(60 * time.Second)
	for len(gets) < want && time.Now().Before(deadline) {
		noAck := len(gets)%2 == 0
		d, ok, err := gch.Get("got", noAck)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		gets = append(gets, string(d.Body))
		if !noAck {
			_ = d.Ack(false)
		}
	}
	wg.Wait()

	check := func(name, key string, g *got) {
		t.Helper()
		for time.Now().Before(deadline) {
			g.mu.Lock()
			n := len(g.seen)
			g.mu.Unlock()
			if n >= want {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.seen) != want {
			t.Errorf("%s: %d distinct messages, want %d", name, len(g.seen), want)
		}
		for p := range pubs {
			for i := range each {
				if n := g.seen[key+"|"+body(p, i)]; n != 1 {
					t.Errorf("%s: message %d of publisher %d seen %d times", name, i, p, n)
					return
				}
			}
		}
	}
	check("auto-ack", "auto", auto)
	check("manual ack", "manual", manual)
	check("fan-out 1", "k", fan1)
	check("fan-out 2", "k", fan2)
	check("STOMP", "stomp", st)
	seen := map[string]bool{}
	for _, g := range gets {
		seen[g] = true
	}
	for p := range pubs {
		for i := range each {
			if !seen[body(p, i)] {
				t.Fatalf("basic.get: message %d of publisher %d missing (%d got)", i, p, len(gets))
			}
		}
	}
}
