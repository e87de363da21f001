package test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/test/testbin"
)

// The crash tests of the durability contract: the real binary is killed
// with SIGKILL and started again on the same data directory.

const crashN = 5000

// crashPublishConfirmed publishes n persistent messages "0".."n-1" to queue
// with confirms and waits until every one is acked.
func crashPublishConfirmed(t *testing.T, ch *amqp.Channel, queue string, n int) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i := 0; i < n; i++ {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != uint64(i+1) {
				t.Fatalf("confirm %d: %+v", i, c)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d confirms", i, n)
		}
	}
}

// crashDrain consumes everything in queue (with acks) until it has been
// quiet for a moment, and returns the bodies in delivery order. It waits
// longer while fewer than expect have arrived.
func crashDrain(t *testing.T, ch *amqp.Channel, queue string, expect int) []string {
	out, _ := crashDrainTimed(t, ch, queue, expect)
	return out
}

// crashDrainTimed is crashDrain that also returns how long the first
// expect messages took to arrive.
func crashDrainTimed(t *testing.T, ch *amqp.Channel, queue string, expect int) ([]string, time.Duration) {
	t.Helper()
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "drain", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	start := time.Now()
	var took time.Duration
	for {
		wait := 300 * time.Millisecond
		if len(out) < expect {
			wait = 10 * time.Second
		}
		select {
		case d := <-ds:
			out = append(out, string(d.Body))
			if len(out) == expect {
				took = time.Since(start)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(wait):
			if err := ch.Cancel("drain", false); err != nil {
				t.Fatal(err)
			}
			return out, took
		}
	}
}

// TestCrashConfirmedMessagesSurviveKill is the crash test of the
// foundation issue: N confirmed persistent messages, kill -9, restart,
// exactly N back, in order.
func TestCrashConfirmedMessagesSurviveKill(t *testing.T) {
	p := testbin.Start(t)
	conn, err := amqp.Dial(p.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("crash-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	crashPublishConfirmed(t, ch, "crash-q", crashN)
	pubTime := time.Since(start)

	_ = p.Kill()
	conn.Close()
	start = time.Now()
	_ = p.Restart()
	restart := time.Since(start)

	conn, err = amqp.Dial(p.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive("crash-q", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("durable queue after kill -9: %v", err)
	}
	if q.Messages != crashN {
		t.Fatalf("%d messages after kill -9 and restart, want %d", q.Messages, crashN)
	}
	got, drain := crashDrainTimed(t, ch, "crash-q", crashN)
	if len(got) != crashN {
		t.Fatalf("consumed %d messages, want %d", len(got), crashN)
	}
	for i, b := range got {
		if b != strconv.Itoa(i) {
			t.Fatalf("message %d is %q: lost, duplicated or out of order", i, b)
		}
	}
	t.Logf("N=%d: publish+confirm %v, restart (SIGKILL to AMQP port open) %v, consume %v", crashN, pubTime, restart, drain)
}

// TestCrashKillWhilePublishing kills the broker in the middle of a
// confirmed publish stream: every message confirmed before the kill is
// there after the restart, none twice; durable topology survives.
func TestCrashKillWhilePublishing(t *testing.T) {
	p := testbin.Start(t)
	conn, err := amqp.Dial(p.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("crash-x", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("crash-stream", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("crash-stream", "stream.#", "crash-x", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))

	// Collect confirms: confirmed[tag-1] is set once the tag is acked.
	var mu sync.Mutex
	confirmed := 0 // highest n such that tags 1..n are all acked
	acked := map[uint64]bool{}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for c := range confirms {
			mu.Lock()
			if c.Ack {
				acked[c.DeliveryTag] = true
				for acked[uint64(confirmed+1)] {
					confirmed++
				}
			}
			mu.Unlock()
		}
	}()
	published := make(chan int, 1)
	go func() {
		i := 0
		for ; ; i++ {
			err := ch.PublishWithContext(context.Background(), "crash-x", "stream.m", false, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(i))})
			if err != nil {
				break
			}
		}
		published <- i
	}()
	// Kill once a good part of the stream is confirmed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := confirmed
		mu.Unlock()
		if n >= 3000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d confirms in 30s", n)
		}
		time.Sleep(time.Millisecond)
	}
	_ = p.Kill()
	mu.Lock()
	sure := confirmed
	var ackedTags []uint64
	for tag := range acked {
		ackedTags = append(ackedTags, tag)
	}
	mu.Unlock()
	conn.Close()
	sent := <-published
	<-collected

	start := time.Now()
	_ = p.Restart()
	restart := time.Since(start)
	conn, err = amqp.Dial(p.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclarePassive("crash-x", "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("durable exchange after kill -9: %v", err)
	}
	got := crashDrain(t, ch, "crash-stream", sure)
	seen := make(map[string]bool, len(got))
	prev := -1
	for _, b := range got {
		if seen[b] {
			t.Fatalf("message %s delivered twice", b)
		}
		seen[b] = true
		v, err := strconv.Atoi(b)
		if err != nil {
			t.Fatalf("body %q", b)
		}
		if v <= prev {
			t.Fatalf("message %d after %d: out of order", v, prev)
		}
		prev = v
	}
	for _, tag := range ackedTags {
		if b := strconv.Itoa(int(tag - 1)); !seen[b] {
			t.Fatalf("confirmed message %s lost (%d confirmed, %d recovered)", b, len(ackedTags), len(got))
		}
	}
	// The binding survived too: a new message through the exchange lands.
	if err := ch.PublishWithContext(context.Background(), "crash-x", "stream.after", false, false,
		amqp.Publishing{Body: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if d := crashDrain(t, ch, "crash-stream", 1); len(d) != 1 || d[0] != "after" {
		t.Fatalf("after restart, through the durable binding: %q", d)
	}
	t.Logf("sent %d, confirmed %d before SIGKILL, recovered %d; restart %v", sent, len(ackedTags), len(got), restart)
}
