package test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
)

// reuseBody is publisher pub's i-th body: its name, its number and a pad
// whose letter and length follow from i, 20 bytes to 1.1 KiB, so that the
// packets fall in every size class of the pooled buffers and past them.
func reuseBody(pub string, i int) string {
	pad := strings.Repeat(string(rune('a'+i%26)), (i*37)%1100)
	return fmt.Sprintf("%s|%06d|%s", pub, i, pad)
}

// checkReuseBody reports what is wrong with body received on topic (""
// if it is what reuseBody gives for the publisher the topic names), and
// the message's key.
func checkReuseBody(topic, body string) (string, string) {
	pub, rest, ok := strings.Cut(body, "|")
	num, _, ok2 := strings.Cut(rest, "|")
	if !ok || !ok2 || topic != "reuse/"+pub {
		return fmt.Sprintf("body %.40q on topic %s", body, topic), ""
	}
	i, err := strconv.Atoi(num)
	if err != nil || body != reuseBody(pub, i) {
		return fmt.Sprintf("body %.60q (%d bytes) is not publisher %s's message %s", body, len(body), pub, num), ""
	}
	return "", pub + "|" + num
}

// TestMQTTReusedMessagesIntact: MQTT QoS 0 publishes reuse their packet's
// memory once delivered (protocol/mqtt sharedMsg, exchange.SettlingSink),
// as small AMQP messages do. Two MQTT 3.1.1 publishers, an MQTT 5 one
// without properties (its packet is shared too) and an AMQP one publish at
// once, bodies of many sizes, to subscribers of every kind: MQTT 3.1.1 and
// MQTT 5 clean sessions (the latter subscribed at QoS 1: transient
// messages go out at QoS 0), an AMQP queue bound to amq.topic, and an MQTT
// 3.1.1 persistent session that disconnects and comes back three times
// while the publishers run (what was queued for it and not written is
// requeued). Every body is checked against its topic and number: the
// clean sessions and the AMQP queue get every message exactly once, the
// coming-and-going session none twice and none altered (what was written
// to it and not read when it went is lost: QoS 0).
//
// Then the same with the MQTT publishers at QoS 1 and the MQTT 3.1.1
// subscriber at QoS 1: a QoS 1 PUBLISH is shared and reused too, and goes
// back to its pool when the subscribers' PUBACKs settle it.
func TestMQTTReusedMessagesIntact(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) { testMQTTReuse(t, qos) })
	}
}

func testMQTTReuse(t *testing.T, pubQoS byte) {
	b := startMQTTBroker(t, func(c *conf.Config) { c.MQTT.MaxQueuedQoS0 = 1 << 20 })
	url := "tcp://" + b.mqttAddr()
	const each = 1500
	pubs := []string{"a", "b", "c", "d"} // a, b: MQTT 3.1.1; c: MQTT 5; d: AMQP
	want := len(pubs) * each

	type seen struct {
		mu   sync.Mutex
		n    map[string]int
		bad  []string
		dups int
	}
	record := func(s *seen, topic string, body []byte) {
		problem, key := checkReuseBody(topic, string(body))
		s.mu.Lock()
		defer s.mu.Unlock()
		if problem != "" {
			s.bad = append(s.bad, problem)
			return
		}
		s.n[key]++
		if s.n[key] > 1 {
			s.dups++
		}
	}
	newSeen := func() *seen { return &seen{n: map[string]int{}} }

	s3, s5, sq, sp := newSeen(), newSeen(), newSeen(), newSeen()
	sub3 := dial3(t, url, "reuse-s3", true)
	sub3.subscribe(t, "reuse/#", pubQoS)
	go func() {
		for m := range sub3.msgs {
			record(s3, m.topic, []byte(m.payload))
		}
	}()
	sub5, _ := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "reuse-s5", CleanStart: true})
	t.Cleanup(func() { _ = sub5.Disconnect(&paho.Disconnect{}) })
	sub5.subscribe(t, paho.SubscribeOptions{Topic: "reuse/#", QoS: 1})
	go func() {
		for m := range sub5.msgs {
			record(s5, m.Topic, m.Payload)
		}
	}()
	_, ach := channel(t, b.URL)
	if _, err := ach.QueueDeclare("reuse-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ach.QueueBind("reuse-q", "reuse.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ach.Consume("reuse-q", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range ds {
			record(sq, strings.ReplaceAll(d.RoutingKey, ".", "/"), d.Body)
		}
	}()

	// The persistent session: subscribed once, then away and back.
	persist := dial3(t, url, "reuse-persist", false)
	persist.subscribe(t, "reuse/#", 0)
	// take records what c receives for d.
	take := func(c *client3, d time.Duration) {
		stop := time.After(d)
		for {
			select {
			case m := <-c.msgs:
				record(sp, m.topic, []byte(m.payload))
			case <-stop:
				return
			}
		}
	}
	done := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		c := persist
		for range 3 {
			take(c, 150*time.Millisecond)
			c.Disconnect(0)
			take(c, 50*time.Millisecond) // what it had received
			nc, err := tryDial3(url, "reuse-persist", false)
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { nc.Disconnect(50) })
			c = nc
		}
		<-done
		take(c, 3*time.Second) // what is left
	}()

	var wg sync.WaitGroup
	for _, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch p {
			case "a", "b":
				c := dial3(t, url, "reuse-pub-"+p, true)
				for i := range each {
					tok := c.Publish("reuse/"+p, pubQoS, false, reuseBody(p, i))
					if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
						t.Errorf("publish %s %d: %v", p, i, tok.Error())
						return
					}
				}
				// Its PUBACK says the broker has read every QoS 0
				// publish before it (the client may leave with them
				// unread otherwise).
				c.publish(t, "reuse-end/"+p, 1, false, "end")
			case "c":
				c, _ := dial5(t, b.mqttAddr(), &paho.Connect{ClientID: "reuse-pub-c", CleanStart: true})
				defer c.Disconnect(&paho.Disconnect{})
				for i := range each {
					if _, err := c.Publish(context.Background(), &paho.Publish{Topic: "reuse/c", QoS: pubQoS, Payload: []byte(reuseBody(p, i))}); err != nil {
						t.Errorf("publish c %d: %v", i, err)
						return
					}
				}
				c.publish(t, &paho.Publish{Topic: "reuse-end/c", QoS: 1, Payload: []byte("end")})
			case "d":
				_, ch := channel(t, b.URL)
				for i := range each {
					if err := ch.PublishWithContext(context.Background(), "amq.topic", "reuse.d", false, false,
						amqp.Publishing{Body: []byte(reuseBody(p, i))}); err != nil {
						t.Errorf("publish d %d: %v", i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for _, s := range []*seen{s3, s5, sq} {
		for time.Now().Before(deadline) {
			s.mu.Lock()
			n := len(s.n) + len(s.bad)
			s.mu.Unlock()
			if n >= want {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	close(done)
	pwg.Wait()

	for name, s := range map[string]*seen{"MQTT 3.1.1 subscriber": s3, "MQTT 5 subscriber": s5, "AMQP queue": sq, "persistent session": sp} {
		s.mu.Lock()
		for i, p := range s.bad {
			if i == 5 {
				t.Errorf("%s: %d more altered messages", name, len(s.bad)-5)
				break
			}
			t.Errorf("%s: %s", name, p)
		}
		if s.dups > 0 {
			t.Errorf("%s: %d messages twice", name, s.dups)
		}
		if s != sp && len(s.n) != want {
			per := map[string]int{}
			for k := range s.n {
				p, _, _ := strings.Cut(k, "|")
				per[p]++
			}
			var missing []int
			for _, p := range pubs {
				for i := range each {
					if s.n[fmt.Sprintf("%s|%06d", p, i)] == 0 && len(missing) < 20 {
						missing = append(missing, i)
					}
				}
			}
			t.Errorf("%s: %d distinct messages, want %d (by publisher: %v; first missing: %v)", name, len(s.n), want, per, missing)
		}
		if s == sp && len(s.n) == 0 {
			t.Errorf("%s: no messages", name)
		}
		t.Logf("%s: %d distinct messages", name, len(s.n))
		s.mu.Unlock()
	}
}
