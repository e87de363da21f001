package test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// retainedIndexTopic is the i-th retained topic of
// TestMQTTRetainedIndex: four shapes (two to four levels, "b" and "c"
// as fixed levels, a unique level n<i>) under first levels a, a, b, c.
func retainedIndexTopic(i int) string {
	l1 := []string{"a", "a", "b", "c"}[(i/4)%4]
	switch i % 4 {
	case 0:
		return fmt.Sprintf("%s/n%d/c", l1, i)
	case 1:
		return fmt.Sprintf("%s/b/n%d", l1, i)
	case 2:
		return fmt.Sprintf("%s/n%d", l1, i)
	default:
		return fmt.Sprintf("%s/b/n%d/c", l1, i)
	}
}

// retainedFilterMatch is the brute-force matcher the index is checked
// against: level by level, "#" matching its parent level too, and a
// leading wildcard matching no topic that begins with "$".
func retainedFilterMatch(filter, topic string) bool {
	f, tp := strings.Split(filter, "/"), strings.Split(topic, "/")
	if strings.HasPrefix(topic, "$") && (f[0] == "+" || f[0] == "#") {
		return false
	}
	for i, fl := range f {
		if fl == "#" {
			return true
		}
		if i >= len(tp) || (fl != "+" && fl != tp[i]) {
			return false
		}
	}
	return len(f) == len(tp)
}

// TestMQTTRetainedIndex: with 50,000 retained messages in the real
// binary, a new subscription gets exactly the retained messages its
// filter matches (against a brute-force matcher), once each, with the
// retain flag; clearing topics (an empty retained PUBLISH) takes them
// out; MQTT 5 retain handling, shared subscriptions and properties
// still hold; and after kill -9 and a restart the same messages are
// there.
func TestMQTTRetainedIndex(t *testing.T) {
	p, url := startMQTTBinary(t)
	addr := strings.TrimPrefix(url, "tcp://")
	const n = 50_000
	const pubs = 4
	want := map[string]string{} // topic → payload
	for i := range n {
		want[retainedIndexTopic(i)] = fmt.Sprintf("p%d", i)
	}
	for _, s := range []string{"a", "a/b", "/a", "a//c", "b/b", "c/b/c"} {
		want[s] = "s:" + s
	}
	for k := range pubs {
		want[fmt.Sprintf("idx/done/%d", k)] = "done"
	}

	// Fill: QoS 0 from a few clients, each ending with a QoS 1 publish
	// whose PUBACK comes after every earlier PUBLISH of its connection
	// was handled.
	start := time.Now()
	topics := slices.Sorted(maps.Keys(want))
	var wg sync.WaitGroup
	for k := range pubs {
		c := dial3(t, url, fmt.Sprintf("idx-pub-%d", k), true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, topic := range topics {
				if i%pubs == k && !strings.HasPrefix(topic, "idx/done/") {
					c.Publish(topic, 0, true, want[topic])
				}
			}
			tok := c.Publish(fmt.Sprintf("idx/done/%d", k), 1, true, "done")
			if !tok.WaitTimeout(5*time.Minute) || tok.Error() != nil {
				t.Errorf("publisher %d: last PUBACK: %v", k, tok.Error())
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d retained messages stored in %v", len(want), time.Since(start).Round(time.Millisecond))

	subs := 0
	check := func(t *testing.T, filter string) {
		t.Helper()
		expect := map[string]string{}
		for topic, payload := range want {
			if retainedFilterMatch(filter, topic) {
				expect[topic] = payload
			}
		}
		subs++
		c := dial3(t, url, fmt.Sprintf("idx-sub-%d", subs), true)
		c.subscribe(t, filter, 0)
		got := map[string]string{}
		quiet := 30 * time.Second // for the first message
		if len(expect) == 0 {
			quiet = 2 * time.Second
		}
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case m := <-c.msgs:
				if _, dup := got[m.topic]; dup {
					t.Fatalf("%s: %s delivered twice", filter, m.topic)
				}
				if !m.retain {
					t.Fatalf("%s: %s delivered without the retain flag", filter, m.topic)
				}
				got[m.topic] = m.payload
				quiet = time.Second // between messages
				if len(got) >= len(expect) {
					quiet = 300 * time.Millisecond // then wait for any extra
				}
				continue
			case <-time.After(quiet):
			case <-deadline:
			}
			break
		}
		c.Disconnect(50)
		if !maps.Equal(got, expect) {
			var missing, extra []string
			for topic := range expect {
				if got[topic] != expect[topic] {
					missing = append(missing, topic)
				}
			}
			for topic := range got {
				if _, ok := expect[topic]; !ok {
					extra = append(extra, topic)
				}
			}
			t.Fatalf("%s: %d retained messages, want %d; missing or different (%d): %q; not matched (%d): %q",
				filter, len(got), len(expect), len(missing), missing[:min(len(missing), 10)], len(extra), extra[:min(len(extra), 10)])
		}
		for topic := range got {
			if strings.HasPrefix(topic, "$") {
				t.Fatalf("%s: delivered %s", filter, topic)
			}
		}
		t.Logf("%s: %d retained messages", filter, len(got))
	}
	filters := []string{"a/+/c", "a/#", "#", "+/b/#", "a", "a/b", "a/+", "+/+", "/#", "+//c", "+/+/+/+",
		retainedIndexTopic(12345), retainedIndexTopic(40003), "a/n7/#", "nothing/#", "a/b/n7/c/#"}
	for _, f := range filters {
		check(t, f)
	}

	// Clearing: an empty retained PUBLISH removes the topic's message.
	clr := dial3(t, url, "idx-clear", true)
	cleared := 0
	for topic := range want {
		if topic == "a" || strings.HasPrefix(topic, "a/b/") {
			clr.Publish(topic, 0, true, "")
			delete(want, topic)
			cleared++
		}
	}
	// Its PUBACK follows the clears (a delete of nothing: no message there).
	if tok := clr.Publish("idx/done/clear", 1, true, ""); !tok.WaitTimeout(5*time.Minute) || tok.Error() != nil {
		t.Fatalf("clear: last PUBACK: %v", tok.Error())
	}
	t.Logf("cleared %d topics", cleared)
	for _, f := range []string{"a/#", "a/+/+/c", "a", "+/b/#", "#"} {
		check(t, f)
	}

	// MQTT 5: retain handling 2 (never), 1 (only for a new
	// subscription), 0, and a shared subscription: no retained messages
	// for it [MQTT-3.8.4-4]. Properties come back from the store.
	c5, _ := dial5(t, addr, &paho.Connect{ClientID: "idx-v5", CleanStart: true})
	pf := byte(1)
	c5.publish(t, &paho.Publish{Topic: "v5/props", QoS: 1, Retain: true, Payload: []byte("hello"),
		Properties: &paho.PublishProperties{ContentType: "text/plain", ResponseTopic: "v5/reply",
			CorrelationData: []byte{7, 8}, PayloadFormat: &pf, User: paho.UserProperties{{Key: "k", Value: "v"}}}})
	c5.subscribe(t, paho.SubscribeOptions{Topic: "a/+/c", QoS: 1, RetainHandling: 2})
	c5.subscribe(t, paho.SubscribeOptions{Topic: "$share/g/a/+/c", QoS: 1})
	c5.none(t, time.Second)
	c5.subscribe(t, paho.SubscribeOptions{Topic: "v5/+", QoS: 1, RetainHandling: 1, RetainAsPublished: true})
	m := c5.receive(t)
	if m.Topic != "v5/props" || string(m.Payload) != "hello" || !m.Retain || m.Properties == nil ||
		m.Properties.ContentType != "text/plain" || m.Properties.ResponseTopic != "v5/reply" ||
		string(m.Properties.CorrelationData) != "\x07\x08" || m.Properties.PayloadFormat == nil ||
		*m.Properties.PayloadFormat != 1 || m.Properties.User.Get("k") != "v" {
		t.Fatalf("MQTT 5 retained message: %+v %+v", m, m.Properties)
	}
	c5.subscribe(t, paho.SubscribeOptions{Topic: "v5/+", QoS: 1, RetainHandling: 1})
	c5.none(t, time.Second) // not a new subscription
	c5.subscribe(t, paho.SubscribeOptions{Topic: "v5/+", QoS: 1, RetainHandling: 0})
	if m := c5.receive(t); m.Topic != "v5/props" || !m.Retain {
		t.Fatalf("retain handling 0 on an existing subscription: %+v", m)
	}
	want["v5/props"] = "hello"

	// Durability: kill -9 and restart; the same retained messages.
	killRestartMQTT(t, p, url)
	for _, f := range []string{"#", "a/+/c", "+/b/#", "a/#"} {
		check(t, f)
	}
}
