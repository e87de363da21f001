package test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Consumer behaviour as RabbitMQ 3.x shows it to an amqp091-go client:
// round-robin, prefetch per consumer and per channel, redelivery, requeue
// order, ack/nack/reject, basic.get, basic.recover, exclusive consumers,
// cancel and cancel notification.
//
// Tests that need nothing but a URL run against $TRIDENT_TEST_REFERENCE_URL
// when it is set (for example amqp://guest:guest@127.0.0.1:5673/, the
// RabbitMQ of ../shared/anchors), so the expectations can be checked against
// the reference broker itself.

// bbURL returns the URL of a fresh in-process broker, or of the reference
// broker named by $TRIDENT_TEST_REFERENCE_URL.
func bbURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("TRIDENT_TEST_REFERENCE_URL"); u != "" {
		return u
	}
	return startBroker(t).URL
}

// bbQueue declares a server-named exclusive queue (not auto-delete, so
// that it outlives its consumers).
func bbQueue(t *testing.T, ch *amqp.Channel, args amqp.Table) string {
	t.Helper()
	q, err := ch.QueueDeclare("", false, false, true, false, args)
	if err != nil {
		t.Fatalf("queue.declare: %v", err)
	}
	return q.Name
}

// bbPublish publishes bodies to queue through the default exchange.
func bbPublish(t *testing.T, ch *amqp.Channel, queue string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if err := ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{Body: []byte(b)}); err != nil {
			t.Fatalf("publish %q: %v", b, err)
		}
	}
}

// bbBodies returns "prefix0", "prefix1", ...
func bbBodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// bbReady returns the number of ready messages of queue (queue.declare
// passive, on a channel of its own so that a 404 does not close ch).
func bbReady(t *testing.T, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, true, true, false, nil)
	if err != nil {
		t.Fatalf("queue.declare passive %s: %v", queue, err)
	}
	return q.Messages
}

// bbWaitReady polls until queue has want ready messages (publishes are
// asynchronous, so a count right after publishing may be short).
func bbWaitReady(t *testing.T, conn *amqp.Connection, queue string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := bbReady(t, conn, queue)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %d ready messages, want %d", queue, n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// bbReceiveN receives n deliveries.
func bbReceiveN(t *testing.T, ds <-chan amqp.Delivery, n int) []amqp.Delivery {
	t.Helper()
	out := make([]amqp.Delivery, 0, n)
	for len(out) < n {
		out = append(out, receive(t, ds))
	}
	return out
}

// bbClosed waits for the close notification on errs and returns it.
func bbClosed(t *testing.T, errs <-chan *amqp.Error) *amqp.Error {
	t.Helper()
	select {
	case e, ok := <-errs:
		if !ok || e == nil {
			t.Fatalf("closed without an error")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatalf("timeout waiting for a close")
	}
	return nil
}

// bbExpectChannelClose waits for ch to be closed by the server with code.
func bbExpectChannelClose(t *testing.T, errs <-chan *amqp.Error, code int) {
	t.Helper()
	e := bbClosed(t, errs)
	if e.Code != code || !e.Server {
		t.Fatalf("channel closed with %d (%s, server=%v), want %d", e.Code, e.Reason, e.Server, code)
	}
}

// bbBodiesOf returns the bodies of ds.
func bbBodiesOf(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}

func bbEqual(t *testing.T, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

func TestConsumeRoundRobin(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	a, err := ch.Consume(q, "a", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ch2.Consume(q, "b", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	bbPublish(t, ch, q, bbBodies("m", 10)...)
	ga := bbBodiesOf(bbReceiveN(t, a, 5))
	gb := bbBodiesOf(bbReceiveN(t, b, 5))
	noDelivery(t, a, 50*time.Millisecond)
	noDelivery(t, b, 0)
	// Strict alternation: one consumer gets the even, the other the odd
	// messages, each in order.
	even, odd := []string{"m0", "m2", "m4", "m6", "m8"}, []string{"m1", "m3", "m5", "m7", "m9"}
	if fmt.Sprint(ga) == fmt.Sprint(even) {
		bbEqual(t, "consumer b", gb, odd)
	} else {
		bbEqual(t, "consumer a", ga, odd)
		bbEqual(t, "consumer b", gb, even)
	}
}

func TestConsumePerConsumerPrefetch(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, bbBodies("m", 5)...)
	if err := ch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 2)
	bbEqual(t, "first window", bbBodiesOf(got), []string{"m0", "m1"})
	noDelivery(t, ds, 150*time.Millisecond)
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds)
	if string(d.Body) != "m2" {
		t.Fatalf("after one ack got %q, want m2", d.Body)
	}
	noDelivery(t, ds, 150*time.Millisecond)
	// A second consumer on the same channel gets its own window of 2.
	ds2, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	bbEqual(t, "second consumer", bbBodiesOf(bbReceiveN(t, ds2, 2)), []string{"m3", "m4"})
}

func TestConsumePerChannelPrefetch(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	q1 := bbQueue(t, ch, nil)
	q2 := bbQueue(t, ch, nil)
	bbPublish(t, ch, q1, bbBodies("a", 5)...)
	bbPublish(t, ch, q2, bbBodies("b", 5)...)
	if err := ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	// Both consumers deliver into one channel; the amqp091-go delivery
	// channels are per consumer, so count across both.
	d1, err := ch.Consume(q1, "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := ch.Consume(q2, "c2", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []amqp.Delivery
	timeout := time.After(5 * time.Second)
	for len(got) < 3 {
		select {
		case d := <-d1:
			got = append(got, d)
		case d := <-d2:
			got = append(got, d)
		case <-timeout:
			t.Fatalf("got %d deliveries, want 3", len(got))
		}
	}
	select {
	case d := <-d1:
		t.Fatalf("delivery %q beyond the channel prefetch of 3", d.Body)
	case d := <-d2:
		t.Fatalf("delivery %q beyond the channel prefetch of 3", d.Body)
	case <-time.After(200 * time.Millisecond):
	}
	// Acking one releases exactly one more, from either queue.
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d1:
	case <-d2:
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery after an ack")
	}
	select {
	case d := <-d1:
		t.Fatalf("delivery %q beyond the channel prefetch of 3", d.Body)
	case d := <-d2:
		t.Fatalf("delivery %q beyond the channel prefetch of 3", d.Body)
	case <-time.After(150 * time.Millisecond):
	}
}

func TestConsumeNackRequeueRedelivered(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, "a", "b", "c")
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 3)
	for _, d := range got {
		if d.Redelivered {
			t.Fatalf("%q redelivered on first delivery", d.Body)
		}
	}
	if err := got[1].Nack(false, true); err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds)
	if string(d.Body) != "b" || !d.Redelivered {
		t.Fatalf("after nack requeue got %q redelivered=%v, want b redelivered", d.Body, d.Redelivered)
	}
	if err := d.Reject(true); err != nil {
		t.Fatal(err)
	}
	d = receive(t, ds)
	if string(d.Body) != "b" || !d.Redelivered {
		t.Fatalf("after reject requeue got %q redelivered=%v, want b redelivered", d.Body, d.Redelivered)
	}
}

// TestConsumeRequeueOriginalPosition: requeued messages go back to where
// they were, ahead of messages that were never delivered.
func TestConsumeRequeueOriginalPosition(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, bbBodies("m", 5)...)
	bbWaitReady(t, conn, q, 5)
	var tags []uint64
	for i := 0; i < 3; i++ {
		d, ok, err := ch.Get(q, false)
		if err != nil || !ok {
			t.Fatalf("get: ok=%v err=%v", ok, err)
		}
		tags = append(tags, d.DeliveryTag)
	}
	// Requeue in reverse order: m2, then m1, then m0.
	for i := len(tags) - 1; i >= 0; i-- {
		if err := ch.Nack(tags[i], false, true); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var redelivered []bool
	for i := 0; i < 5; i++ {
		d, ok, err := ch.Get(q, true)
		if err != nil || !ok {
			t.Fatalf("get %d: ok=%v err=%v", i, ok, err)
		}
		got = append(got, string(d.Body))
		redelivered = append(redelivered, d.Redelivered)
	}
	bbEqual(t, "order after requeue", got, bbBodies("m", 5))
	if fmt.Sprint(redelivered) != "[true true true false false]" {
		t.Fatalf("redelivered flags %v, want [true true true false false]", redelivered)
	}
}

func TestConsumeRedeliveredAfterChannelClose(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, "a", "b", "c")
	cch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 3)
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := cch.Close(); err != nil {
		t.Fatal(err)
	}
	ds, err = ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = bbReceiveN(t, ds, 2)
	bbEqual(t, "after channel close", bbBodiesOf(got), []string{"b", "c"})
	for _, d := range got {
		if !d.Redelivered {
			t.Fatalf("%q not flagged redelivered", d.Body)
		}
	}
}

func TestConsumeRedeliveredAfterConnectionClose(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	q, err := ch.QueueDeclare("", false, false, false, false, nil) // not exclusive: used by two connections
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(q.Name, false, false, false) })
	bbPublish(t, ch, q.Name, "a", "b")
	conn2, ch2 := channel(t, url)
	ds, err := ch2.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	bbReceiveN(t, ds, 2)
	if err := conn2.Close(); err != nil {
		t.Fatal(err)
	}
	ds, err = ch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 2)
	bbEqual(t, "after connection close", bbBodiesOf(got), []string{"a", "b"})
	for _, d := range got {
		if !d.Redelivered {
			t.Fatalf("%q not flagged redelivered", d.Body)
		}
	}
}

func TestConsumeAckMultiple(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, bbBodies("m", 5)...)
	cch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 5)
	if err := got[2].Ack(true); err != nil { // m0..m2
		t.Fatal(err)
	}
	if err := cch.Close(); err != nil { // requeues m3, m4
		t.Fatal(err)
	}
	if n := bbReady(t, conn, q); n != 2 {
		t.Fatalf("%d messages left after ack multiple of 3 out of 5, want 2", n)
	}
	d, _, _ := ch.Get(q, true)
	if string(d.Body) != "m3" {
		t.Fatalf("first left is %q, want m3", d.Body)
	}
}

func TestConsumeNackMultiple(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, bbBodies("m", 5)...)
	cch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 5)
	if err := got[1].Nack(true, false); err != nil { // drops m0, m1
		t.Fatal(err)
	}
	if err := got[3].Nack(true, true); err != nil { // requeues m2, m3
		t.Fatal(err)
	}
	redel := bbReceiveN(t, ds, 2)
	bbEqual(t, "requeued by nack multiple", bbBodiesOf(redel), []string{"m2", "m3"})
	if err := cch.Close(); err != nil { // requeues m2, m3 again, and m4
		t.Fatal(err)
	}
	if n := bbReady(t, conn, q); n != 3 {
		t.Fatalf("%d messages left, want 3", n)
	}
}

func TestConsumeRejectDiscard(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, "a", "b")
	bbWaitReady(t, conn, q, 2)
	d, ok, err := ch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	bbWaitReady(t, conn, q, 1)
	d, _, _ = ch.Get(q, true)
	if string(d.Body) != "b" || d.Redelivered {
		t.Fatalf("got %q redelivered=%v, want b", d.Body, d.Redelivered)
	}
}

func TestConsumeUnknownDeliveryTag(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	errs := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Ack(42, false); err != nil {
		t.Fatal(err)
	}
	bbExpectChannelClose(t, errs, amqp.PreconditionFailed)
}

func TestConsumeDoubleAck(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, "a")
	cch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	errs := cch.NotifyClose(make(chan *amqp.Error, 1))
	ds, err := cch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds)
	_ = d.Ack(false)
	_ = d.Ack(false)
	bbExpectChannelClose(t, errs, amqp.PreconditionFailed)
	// The first ack counted: the message is gone.
	if n := bbReady(t, conn, q); n != 0 {
		t.Fatalf("%d messages left, want 0", n)
	}
}

func TestConsumeBasicGet(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	if _, ok, err := ch.Get(q, false); err != nil || ok {
		t.Fatalf("get on empty queue: ok=%v err=%v, want get-empty", ok, err)
	}
	bbPublish(t, ch, q, "a", "b", "c")
	bbWaitReady(t, conn, q, 3)
	for i, want := range []struct {
		body  string
		count uint32
	}{{"a", 2}, {"b", 1}, {"c", 0}} {
		d, ok, err := ch.Get(q, i != 1)
		if err != nil || !ok {
			t.Fatalf("get %d: ok=%v err=%v", i, ok, err)
		}
		if string(d.Body) != want.body || d.MessageCount != want.count {
			t.Fatalf("get %d: %q message_count=%d, want %q %d", i, d.Body, d.MessageCount, want.body, want.count)
		}
		if i == 1 {
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, ok, err := ch.Get(q, true); err != nil || ok {
		t.Fatalf("get after draining: ok=%v err=%v, want get-empty", ok, err)
	}
}

func TestConsumeRecover(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, "a", "b")
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	bbReceiveN(t, ds, 2)
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 2)
	bbEqual(t, "after recover", bbBodiesOf(got), []string{"a", "b"})
	for _, d := range got {
		if !d.Redelivered {
			t.Fatalf("%q not flagged redelivered after basic.recover", d.Body)
		}
	}
	// The old delivery tags are gone; the new ones work.
	if err := got[1].Ack(true); err != nil {
		t.Fatal(err)
	}
	noDelivery(t, ds, 100*time.Millisecond)
}

// TestConsumeRecoverNoRequeue: basic.recover with requeue=false is not
// implemented by RabbitMQ: 540 at connection scope.
func TestConsumeRecoverNoRequeue(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	cerrs := conn.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Recover(false); amqpCode(err) != amqp.NotImplemented {
		t.Fatalf("basic.recover requeue=false: %v, want 540", err)
	}
	if e := bbClosed(t, cerrs); e.Code != amqp.NotImplemented {
		t.Fatalf("connection closed with %d, want 540", e.Code)
	}
}

func TestConsumeExclusive(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	if _, err := ch.Consume(q, "first", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch2.Consume(q, "second", false, false, false, false, nil)
	if amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("second consumer on an exclusively consumed queue: %v, want 403", err)
	}
	// And an exclusive consumer where there is already one: 403 as well.
	q2 := bbQueue(t, ch, nil)
	if _, err := ch.Consume(q2, "plain", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch3, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch3.Consume(q2, "excl", false, true, false, false, nil)
	if amqpCode(err) != amqp.AccessRefused {
		t.Fatalf("exclusive consumer on a consumed queue: %v, want 403", err)
	}
}

func TestConsumeTagReuse(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	cerrs := conn.NotifyClose(make(chan *amqp.Error, 1))
	if _, err := ch.Consume(q, "dup", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err := ch.Consume(q, "dup", false, false, false, false, nil)
	if amqpCode(err) != amqp.NotAllowed {
		t.Fatalf("consumer tag reuse: %v, want 530", err)
	}
	e := bbClosed(t, cerrs)
	if e.Code != amqp.NotAllowed {
		t.Fatalf("connection closed with %d, want 530", e.Code)
	}
}

func TestConsumeCancel(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	ds, err := ch.Consume(q, "c", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	bbPublish(t, ch, q, "a")
	receive(t, ds)
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ds:
		if ok {
			t.Fatal("delivery after basic.cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("delivery channel not closed after basic.cancel")
	}
	bbPublish(t, ch, q, "b")
	bbWaitReady(t, conn, q, 1)
	// The tag is free again.
	ds, err = ch.Consume(q, "c", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := receive(t, ds); string(d.Body) != "b" {
		t.Fatalf("got %q", d.Body)
	}
}

func TestConsumeCancelNotifyOnQueueDelete(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	cancels := ch.NotifyCancel(make(chan string, 1))
	ds, err := ch.Consume(q, "watcher", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case tag := <-cancels:
		if tag != "watcher" {
			t.Fatalf("cancel notification for %q, want watcher", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel after the queue was deleted")
	}
	select {
	case _, ok := <-ds:
		if ok {
			t.Fatal("unexpected delivery")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("delivery channel not closed after cancel notification")
	}
	// The channel stays usable.
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("channel after cancel notification: %v", err)
	}
}

func TestConsumeNoAck(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, bbBodies("m", 20)...)
	ds, err := ch.Consume(q, "na", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bbReceiveN(t, ds, 20)
	bbEqual(t, "no-ack deliveries", bbBodiesOf(got), bbBodies("m", 20))
	if err := ch.Cancel("na", false); err != nil {
		t.Fatal(err)
	}
	// Nothing is held for the no-ack consumer; acking its tag is an error.
	if n := bbReady(t, conn, q); n != 0 {
		t.Fatalf("%d messages left, want 0", n)
	}
	errs := ch.NotifyClose(make(chan *amqp.Error, 1))
	_ = got[0].Ack(false)
	bbExpectChannelClose(t, errs, amqp.PreconditionFailed)
}

func TestConsumeLargePrefetchInOrder(t *testing.T) {
	const n = 10000
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	pch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 0; i < n; i++ {
			if err := pch.PublishWithContext(context.Background(), "", q, false, false,
				amqp.Publishing{Body: []byte(strconv.Itoa(i))}); err != nil {
				return
			}
		}
	}()
	for i := 0; i < n; i++ {
		d := receive(t, ds)
		if string(d.Body) != strconv.Itoa(i) {
			t.Fatalf("delivery %d is %q", i, d.Body)
		}
		if i%100 == 99 {
			if err := d.Ack(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	bbWaitReady(t, conn, q, 0)
}
