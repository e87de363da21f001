package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// Disk-first queues through the real protocol: a backlog far past the
// in-memory window stays mostly on disk, survives kill -9, and comes back
// whole, in order, counted before any body is read.

// pagedBody is message i: its index, then incompressible bytes derived
// from it (so that a body can be checked without keeping it).
func pagedBody(i, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, uint64(i))
	r := rand.New(rand.NewPCG(uint64(i), 7))
	for j := 8; j < size; j += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[j:], w[:])
	}
	return b
}

// publishConfirmedBodies publishes pagedBody(from..to-1) to queue with
// confirms, a window of them in flight.
func publishConfirmedBodies(t *testing.T, ch *amqp.Channel, queue string, from, to, size int, props func(i int, p *amqp.Publishing)) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, to-from))
	ctx := context.Background()
	for i := from; i < to; i++ {
		p := amqp.Publishing{DeliveryMode: amqp.Persistent, Body: pagedBody(i, size)}
		if props != nil {
			props(i, &p)
		}
		if err := ch.PublishWithContext(ctx, "", queue, false, false, p); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i := from; i < to; i++ {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", i)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d confirms", i-from, to-from)
		}
	}
}

// procChannel dials p's AMQP port and opens a channel; the connection is
// closed when the test ends.
func procChannel(t *testing.T, p *testbin.Proc) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(p.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// killRestart kills p with SIGKILL, starts it again on the same data and
// returns a new channel to it.
func killRestart(t *testing.T, p *testbin.Proc, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	_ = p.Kill()
	conn.Close()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	_, ch := procChannel(t, p)
	return ch
}

func bodyIndex(b []byte) int {
	if len(b) < 8 {
		return -1
	}
	return int(binary.BigEndian.Uint64(b))
}

// TestPagingBacklogSurvivesKill: 30,000 confirmed persistent 1 KiB
// messages on a queue whose window is 64; 1,000 are consumed; kill -9; a
// passive declare counts the rest at once; every one comes back, in order,
// intact, flagged redelivered, none twice.
func TestPagingBacklogSurvivesKill(t *testing.T) {
	const n, size, first = 30000, 1024, 1000
	p := testbin.Start(t, "--queues-window-messages", "64")
	conn, ch := procChannel(t, p)
	if _, err := ch.QueueDeclare("paged", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmedBodies(t, ch, "paged", 0, n, size, nil)
	got := drainPaged(t, ch, "paged", first, false)
	for i, d := range got {
		if bodyIndex(d.Body) != i {
			t.Fatalf("before the kill, delivery %d is message %d", i, bodyIndex(d.Body))
		}
	}
	acksDurable(t, ch)

	start := time.Now()
	ch = killRestart(t, p, conn)
	q, err := ch.QueueDeclarePassive("paged", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	serving := time.Since(start)
	if q.Messages != n-first {
		t.Fatalf("after kill -9: %d messages, want %d", q.Messages, n-first)
	}
	rest := drainPaged(t, ch, "paged", n-first, true)
	for k, d := range rest {
		i := first + k
		if !bytes.Equal(d.Body, pagedBody(i, size)) {
			t.Fatalf("after the kill, delivery %d is message %d (or corrupt)", k, bodyIndex(d.Body))
		}
		if !d.Redelivered {
			t.Fatalf("message %d not flagged redelivered after a crash", i)
		}
	}
	t.Logf("kill -9 to a passive declare answering %d: %v", q.Messages, serving)
}

// acksDurable returns once the acks sent on ch before it are durable: an
// ack is not answered, so a kill -9 right after it may find its delete
// not yet on disk (the message comes back, as at-least-once allows). A
// persistent publish on the same channel after them, to another queue,
// is confirmed only once the store's group commit that holds it, and
// everything the channel issued before, is synced.
func acksDurable(t *testing.T, ch *amqp.Channel) {
	t.Helper()
	if _, err := ch.QueueDeclare("acks-durable-probe", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "acks-durable-probe", false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("probe")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("probe confirm: %v %v", ok, err)
	}
}

// drainPaged consumes want messages with manual acks (a prefetch of 500)
// and checks that no more arrive.
func drainPaged(t *testing.T, ch *amqp.Channel, queue string, want int, all bool) []amqp.Delivery {
	t.Helper()
	if err := ch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("drain-%d", time.Now().UnixNano())
	ds, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []amqp.Delivery
	for len(out) < want {
		select {
		case d := <-ds:
			out = append(out, d)
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d messages", len(out), want)
		}
	}
	if err := ch.Cancel(tag, false); err != nil {
		t.Fatal(err)
	}
	for d := range ds { // deliveries sent before the cancel went through
		if all {
			t.Fatalf("message %d too many", bodyIndex(d.Body))
		}
		_ = d.Nack(false, true)
	}
	return out
}

// TestPagingWindowHoldsUnderBacklog: while a queue fills far past its
// window, what it keeps in memory stays within the window and the tail
// buffer, and the management figures say how much is paged out.
func TestPagingWindowHoldsUnderBacklog(t *testing.T) {
	// A budget below what the window and the tail hold: transient
	// messages are paged out under it (pagesTransient).
	b, base := mgmtBroker(t, func(c *conf.Config) { c.Queues.WindowMessages = 100; c.Queues.MemoryBudget = 256 << 10 })
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("w", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const n, size = 20000, 1024
	// Half transient: paged out too under the budget (and dropped at
	// restart, as RabbitMQ).
	publishConfirmedBodies(t, ch, "w", 0, n, size, func(i int, p *amqp.Publishing) {
		if i%2 == 1 {
			p.DeliveryMode = amqp.Transient
		}
	})
	v, _ := b.n.Broker().VHost("/")
	q, err := v.Queue("w", nil)
	if err != nil {
		t.Fatal(err)
	}
	st := q.Status()
	bound := int64(100+256) * size // window + tail buffer
	if st.Ready != n || st.BytesRAM > bound || st.ReadyRAM > 356 {
		t.Fatalf("status %+v: %d bytes in memory, bound %d", st, st.BytesRAM, bound)
	}
	if st.Memory > 2*bound {
		t.Fatalf("queue memory estimate %d", st.Memory)
	}
	// The management API says the same (RabbitMQ's field names).
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	j := api.object("/api/queues/%2F/w")
	if num(j["messages"]) != n || num(j["messages_paged_out"]) < n-356 || num(j["messages_ram"]) > 356 ||
		num(j["memory"]) <= 0 || num(j["memory"]) > float64(2*bound) || num(j["message_bytes_ram"]) > float64(bound) {
		t.Fatalf("queue JSON: messages %v paged_out %v ram %v memory %v bytes_ram %v", j["messages"],
			j["messages_paged_out"], j["messages_ram"], j["memory"], j["message_bytes_ram"])
	}
	node, _ := api.list("/api/nodes")[0]["name"].(string)
	mem := api.object("/api/nodes/" + node + "/memory")
	if bd, _ := mem["memory"].(map[string]any); bd == nil || num(bd["queue_procs"]) <= 0 || num(bd["queue_procs"]) > float64(2*bound) {
		t.Fatalf("node memory breakdown %v", mem)
	}
	if code, _ := api.do("GET", "/api/health/checks/stored-messages", nil); code != 200 {
		t.Fatalf("stored-messages health check %d", code)
	}
	got := drainPaged(t, ch, "w", n, true)
	for i, d := range got {
		if !bytes.Equal(d.Body, pagedBody(i, size)) {
			t.Fatalf("delivery %d is message %d", i, bodyIndex(d.Body))
		}
	}
}

// TestPagingTransientBacklogInMemory: a transient backlog past the window
// stays in memory while the queues' budget allows (writing it to the store
// and reading it back would cost more than delivering it), and drains in
// order; a persistent backlog beside it is paged out.
func TestPagingTransientBacklogInMemory(t *testing.T) {
	b, base := mgmtBroker(t, func(c *conf.Config) { c.Queues.WindowMessages = 100 })
	_, ch := channel(t, b.URL)
	for _, q := range []string{"t", "p"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	const n, size = 5000, 1024
	publishConfirmedBodies(t, ch, "t", 0, n, size, func(_ int, p *amqp.Publishing) { p.DeliveryMode = amqp.Transient })
	publishConfirmedBodies(t, ch, "p", 0, n, size, nil)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	tj, pj := api.object("/api/queues/%2F/t"), api.object("/api/queues/%2F/p")
	if num(tj["messages"]) != n || num(tj["messages_paged_out"]) != 0 || num(tj["messages_ram"]) != n {
		t.Fatalf("transient queue: messages %v paged_out %v ram %v", tj["messages"], tj["messages_paged_out"], tj["messages_ram"])
	}
	if num(pj["messages"]) != n || num(pj["messages_paged_out"]) < n-356 {
		t.Fatalf("persistent queue: messages %v paged_out %v", pj["messages"], pj["messages_paged_out"])
	}
	for _, q := range []string{"t", "p"} {
		for i, d := range drainPaged(t, ch, q, n, true) {
			if !bytes.Equal(d.Body, pagedBody(i, size)) {
				t.Fatalf("%s: delivery %d is message %d", q, i, bodyIndex(d.Body))
			}
		}
	}
}

// TestPagingPriorityDeadLetterOverAMQP: a priority queue with a max-length
// and a dead-letter queue, its backlog mostly on disk: the highest
// priority first, FIFO within, and what max-length drops is
// dead-lettered.
func TestPagingPriorityDeadLetterOverAMQP(t *testing.T) {
	b := startBroker(t, func(c *conf.Config) { c.Queues.WindowMessages = 16 })
	_, ch := channel(t, b.URL)
	if _, err := ch.QueueDeclare("pdl", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("pq", true, false, false, false, amqp.Table{
		"x-max-priority": int32(3), "x-max-length": int32(3000),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "pdl"}); err != nil {
		t.Fatal(err)
	}
	const n = 4000
	publishConfirmedBodies(t, ch, "pq", 0, n, 256, func(i int, p *amqp.Publishing) { p.Priority = uint8(i % 4) })
	// max-length drops the oldest of the lowest priority first: the
	// first 1000 messages of priority 0 (there are 1000 of them).
	dead := drainPaged(t, ch, "pdl", 1000, true)
	for k, d := range dead {
		if i := bodyIndex(d.Body); i != 4*k {
			t.Fatalf("dead letter %d is message %d", k, i)
		}
	}
	got := drainPaged(t, ch, "pq", 3000, true)
	k := 0
	for prio := 3; prio >= 1; prio-- {
		for i := prio; i < n; i += 4 {
			if bi := bodyIndex(got[k].Body); bi != i {
				t.Fatalf("delivery %d is message %d, want %d", k, bi, i)
			}
			k++
		}
	}
}

// TestPagingKillWhileDraining: kill -9 in the middle of a drain of a
// backlog past the window. Afterwards every message the consumer had not
// acked is there, in order; a message acked before the kill may come back
// only flagged redelivered (its delete may not have been durable yet).
func TestPagingKillWhileDraining(t *testing.T) {
	const n, size = 20000, 512
	p := testbin.Start(t, "--queues-window-messages", "128")
	conn, ch := procChannel(t, p)
	if _, err := ch.QueueDeclare("drain-kill", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmedBodies(t, ch, "drain-kill", 0, n, size, nil)
	if err := ch.Qos(300, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("drain-kill", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	acked := 0 // messages 0..acked-1 acked (multiple) before the kill
	for acked < n/2 {
		select {
		case d := <-ds:
			if bodyIndex(d.Body) != acked {
				t.Fatalf("delivery %d is message %d", acked, bodyIndex(d.Body))
			}
			acked++
			if acked%50 == 0 {
				if err := d.Ack(true); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d delivered", acked)
		}
	}
	ch = killRestart(t, p, conn) // deliveries past acked are in flight, unacked
	q, err := ch.QueueDeclarePassive("drain-kill", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages < n-acked || q.Messages > n {
		t.Fatalf("after kill -9: %d messages, want %d..%d", q.Messages, n-acked, n)
	}
	got := drainPaged(t, ch, "drain-kill", q.Messages, true)
	first := bodyIndex(got[0].Body)
	if first > acked {
		t.Fatalf("first message after the restart is %d: %d..%d lost", first, acked, first-1)
	}
	for k, d := range got {
		if i := first + k; !bytes.Equal(d.Body, pagedBody(i, size)) {
			t.Fatalf("delivery %d after the restart is message %d, want %d", k, bodyIndex(d.Body), i)
		}
		if !d.Redelivered {
			t.Fatalf("message %d not flagged redelivered after a crash", first+k)
		}
	}
	if first+len(got) != n {
		t.Fatalf("messages %d..%d back, want up to %d", first, first+len(got)-1, n-1)
	}
}
