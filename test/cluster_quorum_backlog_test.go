package test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestQuorumQueueBacklogOnDisk: a quorum queue with a backlog far larger
// than its in-memory window (64 messages here) keeps only the window and a
// tail buffer in memory on its leader; its leader is killed with SIGKILL
// and a survivor takes over without loading the backlog; then every node
// is killed and restarted (each FSM reads its state record and Raft
// replays what came after, no bodies read); a consumer then gets every
// confirmed message, in order, exactly once.
func TestQuorumQueueBacklogOnDisk(t *testing.T) {
	nodes := startCluster(t, 3, "--queues-window-messages", "64")
	_, ch0 := dialNode(t, nodes[0])
	const queue, n = "qq-backlog", 6000
	if _, err := ch0.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	leader := leaderIndex(nodes, queue)
	if leader < 0 {
		t.Fatal("no leader")
	}
	// A new group may still change its leader under load: wait for a
	// confirmed probe through the leader of that moment, then purge it.
	var ch *closingChannel
	var confirms chan amqp.Confirmation
	eventually(t, 20*time.Second, "a confirmed probe through the leader", func() bool {
		if leader = leaderIndex(nodes, queue); leader < 0 {
			return false
		}
		c, err := dialChannel(nodes[leader])
		if err != nil {
			return false
		}
		cs := c.NotifyPublish(make(chan amqp.Confirmation, n))
		if c.Confirm(false) != nil || c.Publish("", queue, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("probe")}) != nil {
			c.Close()
			return false
		}
		select {
		case cf := <-cs:
			if cf.Ack {
				ch, confirms = c, cs
				return true
			}
		case <-time.After(5 * time.Second):
		}
		c.Close()
		return false
	})
	t.Cleanup(func() { ch.Close() })
	if _, err := ch.QueuePurge(queue, false); err != nil {
		t.Fatal(err)
	}
	body := func(i int) []byte {
		b := bytes.Repeat([]byte{'.'}, 1024)
		copy(b, fmt.Sprintf("%06d", i))
		return b
	}
	for i := 0; i < n; i++ {
		if err := ch.Publish("", queue, false, false, amqp.Publishing{DeliveryMode: 2, Body: body(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d confirms", i, n)
		}
	}

	// The leader holds the window and the tail's buffer, not the backlog.
	paged := func(nd *cnode) (msgs, ram, out float64) {
		var j map[string]any
		if code, err := nd.tryAPI("GET", "/api/queues/%2F/"+queue, nil, &j); err != nil || code != 200 {
			return -1, -1, -1
		}
		return num(j["messages"]), num(j["messages_ram"]), num(j["messages_paged_out"])
	}
	eventually(t, 10*time.Second, "the leader to page the backlog out", func() bool {
		m, ram, out := paged(nodes[leader])
		return m == n && ram <= 64+256+64 && out >= n-(64+256+64)
	})
	m, ram, out := paged(nodes[leader])
	t.Logf("leader %s: %v messages, %v in memory, %v paged out", nodes[leader].name, m, ram, out)

	// Kill the leader: a survivor leads, its queue starts with everything
	// on disk.
	if err := nodes[leader].p.Kill(); err != nil {
		t.Fatal(err)
	}
	survivor := nodes[(leader+1)%3]
	eventually(t, 20*time.Second, "a new leader with the backlog", func() bool {
		l := leaderIndex(nodes, queue)
		if l < 0 || l == leader {
			return false
		}
		m, ram, _ := paged(nodes[l])
		return m == n && ram <= 64+256+64
	})
	m, ram, out = paged(nodes[leaderIndex(nodes, queue)])
	t.Logf("after the kill, leader %s: %v messages, %v in memory, %v paged out", nodeName(nodes, leaderIndex(nodes, queue)), m, ram, out)

	// Every node down at once, then up: the state comes back from the
	// store and the Raft log.
	for _, nd := range nodes {
		if nd.p.Running() {
			if err := nd.p.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = nd.p.Restart() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the queue's count after the restart", func() bool {
		l := leaderIndex(nodes, queue)
		if l < 0 {
			return false
		}
		m, _, _ := paged(nodes[l])
		return m == n
	})

	// Drain through a node that may or may not lead.
	_, cch := dialNode(t, survivor)
	if err := cch.Qos(200, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		select {
		case d := <-ds:
			if !bytes.Equal(d.Body, body(i)) {
				t.Fatalf("message %d: got %q", i, d.Body[:6])
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages drained", i, n)
		}
	}
	select {
	case d := <-ds:
		t.Fatalf("a message past the %d published: %q", n, d.Body[:6])
	case <-time.After(500 * time.Millisecond):
	}
	eventually(t, 10*time.Second, "an empty queue", func() bool {
		l := leaderIndex(nodes, queue)
		m, ram, _ := paged(nodes[max(l, 0)])
		return l >= 0 && m == 0 && ram == 0
	})
}
