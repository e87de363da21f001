package test

import (
	"strconv"
	"testing"
	"time"

	amqp10 "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// TestStreamProtocolFiltering: RabbitMQ 3.13's stream filtering with the
// real client, which enables it from the broker's command versions
// (publish up to version 2): a producer gives each message a filter value,
// consumers subscribe with filter values (and match-unfiltered) and a
// post-filter, and each reads exactly its messages. The broker sends every
// chunk (it has no per-chunk Bloom filter to skip by); the client's
// post-filter drops the rest.
func TestStreamProtocolFiltering(t *testing.T) {
	_, addr := streamBroker(t)
	env := streamEnv(t, addr, "guest", "guest")
	const name, n = "sp-filtered", 300
	if err := env.DeclareStream(name, nil); err != nil {
		t.Fatal(err)
	}
	region := func(i int) string { return []string{"eu", "us", ""}[i%3] }
	// The messages without a region come from a producer without a
	// filter (publish version 1): client v1.8.3 writes an empty filter
	// value as an int32 -1 outside the frame's size, which no broker can
	// read (RabbitMQ neither).
	plain, err := env.NewProducer(name, stream.NewProducerOptions())
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.NewProducer(name, stream.NewProducerOptions().SetProducerName("filtered").
		SetFilter(stream.NewProducerFilter(func(m message.StreamMessage) string {
			r, _ := m.GetApplicationProperties()["region"].(string)
			return r
		})))
	if err != nil {
		t.Fatalf("a producer with a filter: %v", err)
	}
	confirms := map[*stream.Producer]stream.ChannelPublishConfirm{plain: plain.NotifyPublishConfirmation(),
		p: p.NotifyPublishConfirmation()}
	for i := 0; i < n; i++ {
		m := amqp10.NewMessage([]byte("f-" + strconv.Itoa(i)))
		by := plain
		if r := region(i); r != "" {
			m.ApplicationProperties = map[string]interface{}{"region": r}
			by = p
		}
		if err := by.BatchSend([]message.StreamMessage{m}); err != nil {
			t.Fatal(err)
		}
		// One at a time, so that the log holds them in this order.
		select {
		case cs := <-confirms[by]:
			if len(cs) != 1 || !cs[0].IsConfirmed() {
				t.Fatalf("message %d not confirmed", i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d: no confirm", i)
		}
	}
	if seq, err := p.GetLastPublishingId(); err != nil || seq != 2*n/3 {
		t.Fatalf("a filtering producer's sequence: %d, %v", seq, err)
	}
	_ = p.Close()
	_ = plain.Close()

	consume := func(values []string, unfiltered bool) []string {
		post := func(m *amqp10.Message) bool {
			r, _ := m.ApplicationProperties["region"].(string)
			for _, v := range values {
				if r == v {
					return true
				}
			}
			return unfiltered && r == ""
		}
		c := &spConsumed{}
		cons, err := env.NewConsumer(name, c.handler, stream.NewConsumerOptions().
			SetOffset(stream.OffsetSpecification{}.First()).SetCRCCheck(true).
			SetFilter(stream.NewConsumerFilter(values, unfiltered, post)))
		if err != nil {
			t.Fatalf("a consumer with a filter: %v", err)
		}
		defer cons.Close()
		want := 0
		for i := 0; i < n; i++ {
			if post(&amqp10.Message{ApplicationProperties: map[string]interface{}{"region": region(i)}}) {
				want++
			}
		}
		c.wait(t, want)
		time.Sleep(200 * time.Millisecond)
		c.mu.Lock()
		defer c.mu.Unlock()
		return append([]string(nil), c.bodies...)
	}
	eu := consume([]string{"eu"}, false)
	if len(eu) != n/3 || eu[0] != "f-0" || eu[1] != "f-3" {
		t.Fatalf("filter eu: %d messages %v", len(eu), eu[:min(len(eu), 5)])
	}
	euOrNone := consume([]string{"eu"}, true)
	if len(euOrNone) != 2*n/3 || euOrNone[1] != "f-2" {
		t.Fatalf("filter eu, match-unfiltered: %d messages %v", len(euOrNone), euOrNone[:min(len(euOrNone), 5)])
	}
	// Nothing is dropped for a consumer without a filter.
	all := spConsume(t, env, name, stream.OffsetSpecification{}.First())
	all.wait(t, n)
}
