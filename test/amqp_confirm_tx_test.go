package test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Publisher confirms, transactions and direct reply-to.

// bbConfirm waits for the next publisher confirm.
func bbConfirm(t *testing.T, confirms <-chan amqp.Confirmation) amqp.Confirmation {
	t.Helper()
	select {
	case c, ok := <-confirms:
		if !ok {
			t.Fatal("confirm channel closed")
		}
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("timeout waiting for a publisher confirm")
	}
	return amqp.Confirmation{}
}

func TestConfirmAckEveryPublish(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	durable := "bb-confirm-durable-" + strings.ReplaceAll(t.Name(), "/", "-")
	if _, err := ch.QueueDeclare(durable, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(durable, false, false, false) })
	_, _ = ch.QueuePurge(durable, false)
	transient := bbQueue(t, ch, nil)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 16))
	ctx := context.Background()
	pubs := []struct {
		key  string
		mode uint8
	}{
		{durable, amqp.Persistent},
		{transient, amqp.Transient},
		{"bb-nowhere-" + t.Name(), amqp.Persistent}, // unroutable
		{durable, amqp.Transient},
		{transient, amqp.Persistent},
	}
	for _, p := range pubs {
		if err := ch.PublishWithContext(ctx, "", p.key, false, false, amqp.Publishing{DeliveryMode: p.mode, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pubs {
		c := bbConfirm(t, confirms)
		if !c.Ack || c.DeliveryTag != uint64(i+1) {
			t.Fatalf("confirm %d: %+v, want ack of tag %d", i, c, i+1)
		}
	}
	if n := bbReady(t, conn, durable); n != 2 {
		t.Fatalf("durable queue has %d messages, want 2", n)
	}
	if n := bbReady(t, conn, transient); n != 2 {
		t.Fatalf("transient queue has %d messages, want 2", n)
	}
}

// TestConfirmReturnBeforeAck: an unroutable mandatory publish gets its
// basic.return before its basic.ack.
func TestConfirmReturnBeforeAck(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	key := "bb-no-such-queue"
	if err := ch.PublishWithContext(context.Background(), "", key, true, false, amqp.Publishing{Body: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	c := bbConfirm(t, confirms)
	if !c.Ack || c.DeliveryTag != 1 {
		t.Fatalf("confirm %+v, want ack of tag 1", c)
	}
	// amqp091-go hands frames over in the order they arrive, so the return
	// is already waiting when the ack has been seen.
	select {
	case r := <-returns:
		if r.ReplyCode != amqp.NoRoute || r.RoutingKey != key || string(r.Body) != "lost" {
			t.Fatalf("return %d %q %q %q", r.ReplyCode, r.ReplyText, r.RoutingKey, r.Body)
		}
		if r.ReplyText != "NO_ROUTE" {
			t.Fatalf("return reply text %q, want NO_ROUTE", r.ReplyText)
		}
	default:
		t.Fatal("basic.ack arrived before basic.return")
	}
}

func TestConfirmNackOnRejectPublish(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 8))
	bbPublish(t, ch, q, "a", "b", "c", "d")
	want := []bool{true, true, false, false}
	for i, w := range want {
		c := bbConfirm(t, confirms)
		if c.DeliveryTag != uint64(i+1) || c.Ack != w {
			t.Fatalf("confirm %d: %+v, want tag %d ack=%v", i, c, i+1, w)
		}
	}
	if n := bbReady(t, conn, q); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
	// Room again after a get: the next publish is acked.
	if _, ok, err := ch.Get(q, true); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	bbPublish(t, ch, q, "e")
	if c := bbConfirm(t, confirms); !c.Ack || c.DeliveryTag != 5 {
		t.Fatalf("confirm %+v, want ack of 5", c)
	}
}

func TestTxPublishCommitRollback(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	bbPublish(t, ch, q, "a", "b", "c")
	time.Sleep(50 * time.Millisecond)
	if n := bbReady(t, conn, q); n != 0 {
		t.Fatalf("%d messages visible before tx.commit, want 0", n)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if n := bbReady(t, conn, q); n != 3 {
		t.Fatalf("%d messages after tx.commit, want 3", n)
	}
	bbPublish(t, ch, q, "d", "e")
	if err := ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if n := bbReady(t, conn, q); n != 3 {
		t.Fatalf("%d messages after tx.rollback, want 3", n)
	}
	// The channel stays transactional: the next commit publishes only what
	// came after the rollback.
	bbPublish(t, ch, q, "f")
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, string(d.Body))
	}
	bbEqual(t, "committed messages", got, []string{"a", "b", "c", "f"})
}

func TestTxAcks(t *testing.T) {
	url := bbURL(t)
	conn, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	bbPublish(t, ch, q, "a", "b")
	bbWaitReady(t, conn, q, 2)
	tch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := tch.Tx(); err != nil {
		t.Fatal(err)
	}
	da, ok, err := tch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := da.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := tch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	// The rolled-back ack did not happen: the message is still unacked and
	// comes back when the channel closes.
	db, ok, err := tch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := db.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := tch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if err := tch.Close(); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatalf("get after close: %v %v", ok, err)
	}
	if string(d.Body) != "a" || !d.Redelivered {
		t.Fatalf("got %q redelivered=%v, want a (its ack was rolled back)", d.Body, d.Redelivered)
	}
	if _, ok, _ := ch.Get(q, true); ok {
		t.Fatal("b is still there although its ack was committed")
	}
}

func TestTxThenConfirmSelect(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); amqpCode(err) != amqp.PreconditionFailed {
		t.Fatalf("confirm.select on a tx channel: %v, want 406", err)
	}
	_, ch2 := channel(t, url)
	if err := ch2.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if err := ch2.Tx(); amqpCode(err) != amqp.PreconditionFailed {
		t.Fatalf("tx.select on a confirm channel: %v, want 406", err)
	}
}

func TestTxCommitWithoutSelect(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	if err := ch.TxCommit(); amqpCode(err) != amqp.PreconditionFailed {
		t.Fatalf("tx.commit without tx.select: %v, want 406", err)
	}
}

const bbReplyTo = "amq.rabbitmq.reply-to"

func TestDirectReplyTo(t *testing.T) {
	url := bbURL(t)
	// The server side: answers every request to its reply-to through the
	// default exchange.
	_, sch := channel(t, url)
	rpcq := bbQueue(t, sch, nil)
	reqs, err := sch.Consume(rpcq, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seenReplyTo := make(chan string, 1)
	go func() {
		for d := range reqs {
			select {
			case seenReplyTo <- d.ReplyTo:
			default:
			}
			_ = sch.PublishWithContext(context.Background(), "", d.ReplyTo, false, false,
				amqp.Publishing{CorrelationId: d.CorrelationId, Body: []byte(strings.ToUpper(string(d.Body)))})
			_ = d.Ack(false)
		}
	}()

	_, cch := channel(t, url)
	replies, err := cch.Consume(bbReplyTo, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{"ping", "pong"} {
		corr := "c" + body
		if err := cch.PublishWithContext(context.Background(), "", rpcq, false, false,
			amqp.Publishing{ReplyTo: bbReplyTo, CorrelationId: corr, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		d := receive(t, replies)
		if string(d.Body) != strings.ToUpper(body) || d.CorrelationId != corr {
			t.Fatalf("reply %d: %q corr=%q", i, d.Body, d.CorrelationId)
		}
	}
	rt := <-seenReplyTo
	if !strings.HasPrefix(rt, bbReplyTo+".") || len(rt) <= len(bbReplyTo)+1 {
		t.Fatalf("server saw reply-to %q, want %s.<token>", rt, bbReplyTo)
	}
}

func TestDirectReplyToAckModeRefused(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	_, err := ch.Consume(bbReplyTo, "", false, false, false, false, nil)
	if amqpCode(err) != amqp.PreconditionFailed {
		t.Fatalf("consume %s with acks: %v, want 406", bbReplyTo, err)
	}
}

func TestDirectReplyToWithoutConsumer(t *testing.T) {
	url := bbURL(t)
	_, ch := channel(t, url)
	q := bbQueue(t, ch, nil)
	errs := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.PublishWithContext(context.Background(), "", q, false, false,
		amqp.Publishing{ReplyTo: bbReplyTo, Body: []byte("req")}); err != nil {
		t.Fatal(err)
	}
	bbExpectChannelClose(t, errs, amqp.PreconditionFailed)
}
