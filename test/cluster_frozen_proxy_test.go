package test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestProxyQueueFrozenHome (issue 43, STYLE 14 "no network wait under a
// lock"): a classic queue homed on node B, a confirming publisher on node
// A publishing to it through A (a proxy queue there). B is frozen
// (SIGSTOP) and the publisher pushes more than the forwarder's budget
// (forward.MaxPending, 10000) towards it, so that it waits for room: that
// wait is the owner's back-pressure reaching the publisher, and it must
// hold no lock of the proxy queue. While B is frozen, the queue's other
// operations on A answer within 3 s each: its status and the queue list
// through the HTTP API, a passive declare, a consumer's attach and its
// channel's close. Once B goes on (SIGCONT), every confirmed message is in
// the queue.
func TestProxyQueueFrozenHome(t *testing.T) {
	nodes := startCluster(t, 3)
	a, b := nodes[0], nodes[1]
	const queue = "frozen-home"
	_, chB := dialNode(t, b)
	if _, err := chB.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	connA, _ := dialNode(t, a)
	eventually(t, 10*time.Second, "queue "+queue+" on A", func() bool {
		ch, err := connA.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err == nil
	})

	// The publisher on A; every outcome is kept.
	_, pch := dialNode(t, a)
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	type sent struct {
		id string
		dc *amqp.DeferredConfirmation
	}
	var mu sync.Mutex
	var sents []sent
	pub := func(id string) error {
		dc, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: id, Body: []byte(id)})
		if err == nil {
			mu.Lock()
			sents = append(sents, sent{id, dc})
			mu.Unlock()
		}
		return err
	}
	for i := 0; i < 100; i++ {
		if err := pub(fmt.Sprintf("pre-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	last := sents[len(sents)-1].dc
	mu.Unlock()
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if ok, err := last.WaitContext(wctx); !ok || err != nil {
		cancel()
		t.Fatalf("publish before the freeze: ack %v, %v", ok, err)
	}
	cancel()

	frozeAt := time.Now()
	if err := syscall.Kill(b.p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	thaw := func() {
		if frozen {
			frozen = false
			if err := syscall.Kill(b.p.Pid(), syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw)

	// Past the budget: A's reader for this publisher ends up waiting for
	// room on the link to B.
	const burst = 10000 + 50
	published := make(chan error, 1)
	go func() {
		for i := 0; i < burst; i++ {
			if err := pub(fmt.Sprintf("frozen-%d", i)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	select {
	case err := <-published:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client could not hand over the burst")
	}
	time.Sleep(time.Second) // A reads what the client wrote, up to the wait

	// The proxy queue's other operations on A go on.
	within := func(what string, op func() error) {
		t.Helper()
		errc := make(chan error, 1)
		start := time.Now()
		go func() { errc <- op() }()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("%s while B is frozen: %v", what, err)
			}
			t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
		case <-time.After(3 * time.Second):
			thaw()
			t.Fatalf("%s waited more than 3 s while B was frozen (for the frozen publisher's queue lock?)", what)
		}
	}
	within("GET /api/queues/%2F/"+queue, func() error {
		var q map[string]any
		code, err := a.tryAPI("GET", "/api/queues/%2F/"+queue, nil, &q)
		if err == nil && (code != 200 || q["name"] != queue) {
			err = fmt.Errorf("HTTP %d %v", code, q["name"])
		}
		return err
	})
	within("GET /api/queues", func() error {
		var qs []map[string]any
		_, err := a.tryAPI("GET", "/api/queues", nil, &qs)
		return err
	})
	within("passive declare", func() error {
		ch, err := connA.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	within("a consumer's attach and its channel's close", func() error {
		ch, err := connA.Channel()
		if err != nil {
			return err
		}
		if _, err := ch.Consume(queue, "watcher", false, false, false, false, nil); err != nil {
			return err
		}
		return ch.Close()
	})
	if time.Since(frozeAt) > 8*time.Second {
		t.Logf("the checks ended %v after the freeze", time.Since(frozeAt).Round(time.Millisecond))
	}
	time.Sleep(time.Until(frozeAt.Add(8 * time.Second))) // frozen for 8 s at least
	thaw()

	// Every outcome comes; the confirmed messages are all in the queue.
	mu.Lock()
	all := append([]sent(nil), sents...)
	mu.Unlock()
	acked := map[string]bool{}
	nacks := 0
	for _, s := range all {
		wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		ok, err := s.dc.WaitContext(wctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: no outcome after the thaw: %v", s.id, err)
		}
		if ok {
			acked[s.id] = true
		} else {
			nacks++
		}
	}
	t.Logf("%d publishes: %d confirmed, %d nacked", len(all), len(acked), nacks)
	if len(acked) == 0 {
		t.Fatal("nothing confirmed")
	}
	_, cch := dialNode(t, b)
	if err := cch.Qos(2000, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	missing := len(acked)
	deadline := time.After(60 * time.Second)
	for missing > 0 {
		select {
		case d := <-ds:
			if acked[d.MessageId] && !seen[d.MessageId] {
				missing--
			}
			seen[d.MessageId] = true
		case <-deadline:
			t.Fatalf("%d of %d confirmed messages not in the queue", missing, len(acked))
		}
	}
}
