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

// TestQuorumQueueFrozenLeader (issue 16): the node leading a quorum queue
// hangs instead of dying (SIGSTOP for 10 s, as a long pause or a stuck
// disk would), then goes on (SIGCONT). Publishers on the two other nodes
// keep publishing with confirms: their confirms resume within 2 s of the
// survivors' election of a new leader (the forwarders give up on the
// frozen node's in-flight publishes, which are nacked, rather than wait
// for it), and every confirmed message is delivered afterwards.
func TestQuorumQueueFrozenLeader(t *testing.T) {
	nodes := startCluster(t, 3)
	const queue = "qq-frozen"
	args := amqp.Table{"x-queue-type": "quorum"}
	_, ch := dialNode(t, nodes[0])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	var leader int
	eventually(t, 20*time.Second, "a leader of "+queue, func() bool {
		leader = leaderIndex(nodes, queue)
		return leader >= 0
	})
	victim := nodes[leader]
	var survivors []*cnode
	for _, nd := range nodes {
		if nd != victim {
			survivors = append(survivors, nd)
		}
	}
	frozen := false
	t.Cleanup(func() {
		if frozen {
			_ = syscall.Kill(victim.p.Pid(), syscall.SIGCONT)
		}
	})

	// Publishers on the survivors: up to 20 publishes awaiting their
	// confirm each; every outcome is recorded with its time.
	type outcome struct {
		id  string
		ack bool
		at  time.Time
	}
	var mu sync.Mutex
	var outcomes []outcome
	ctx, stop := context.WithCancel(context.Background())
	var pubs sync.WaitGroup
	for i, nd := range survivors {
		conn, pch := dialNode(t, nd)
		_ = conn
		if err := pch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			type sent struct {
				id string
				dc *amqp.DeferredConfirmation
			}
			var window []sent
			settle := func() bool {
				s := window[0]
				window = window[1:]
				wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				ok, err := s.dc.WaitContext(wctx)
				cancel()
				if err != nil {
					t.Errorf("publisher on %s: %s: no outcome: %v", nd.name, s.id, err)
					return false
				}
				mu.Lock()
				outcomes = append(outcomes, outcome{id: s.id, ack: ok, at: time.Now()})
				mu.Unlock()
				return true
			}
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("p%d-%d", i, n)
				dc, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
					amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: id, Body: []byte(id)})
				if err != nil {
					t.Errorf("publisher on %s: %v", nd.name, err)
					return
				}
				window = append(window, sent{id, dc})
				if len(window) >= 20 && !settle() {
					return
				}
			}
			for len(window) > 0 {
				if !settle() {
					return
				}
			}
		}()
	}
	confirmedSince := func(at time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range outcomes {
			if o.ack && o.at.After(at) {
				n++
			}
		}
		return n
	}
	warm := time.Now()
	eventually(t, 20*time.Second, "confirms before the freeze", func() bool { return confirmedSince(warm) >= 100 })

	// Freeze the leader; find when a survivor reports a new one.
	frozeAt := time.Now()
	if err := syscall.Kill(victim.p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen = true
	var elected time.Time
	var newLeader string
	for time.Since(frozeAt) < 10*time.Second && elected.IsZero() {
		for _, nd := range survivors {
			if l := nd.queueLeader(t, "%2F/"+queue); l != "" && l != victim.name {
				elected, newLeader = time.Now(), l
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if elected.IsZero() {
		t.Fatal("no new leader within 10 s of the freeze")
	}
	// Stay frozen for 10 s in all.
	time.Sleep(time.Until(frozeAt.Add(10 * time.Second)))
	if err := syscall.Kill(victim.p.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen = false
	resumed := time.Now()
	eventually(t, 30*time.Second, "confirms after the thaw", func() bool { return confirmedSince(resumed) >= 50 })
	stop()
	pubs.Wait()

	// The first confirm after the election, and the outcomes.
	mu.Lock()
	var firstAck time.Time
	acked := map[string]bool{}
	nacks := 0
	for _, o := range outcomes {
		if o.ack {
			acked[o.id] = true
			if o.at.After(elected) && firstAck.IsZero() {
				firstAck = o.at
			}
		} else {
			nacks++
		}
	}
	mu.Unlock()
	gap := firstAck.Sub(elected)
	t.Logf("leader %s frozen at 0; %s elected (seen by the survivors) after %v; first confirm %v after that election; %d confirmed, %d nacked",
		victim.name, newLeader, elected.Sub(frozeAt).Round(time.Millisecond), gap.Round(time.Millisecond), len(acked), nacks)
	if firstAck.IsZero() || gap > 2*time.Second {
		t.Fatalf("confirms resumed %v after the new leader's election (want within 2 s)", gap.Round(time.Millisecond))
	}

	// Every confirmed message is delivered.
	_, cch := dialNode(t, survivors[0])
	if err := cch.Qos(500, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := cch.Consume(queue, "", false, false, false, false, nil)
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
			_ = d.Ack(false)
		case <-deadline:
			t.Fatalf("%d of %d confirmed messages not delivered", missing, len(acked))
		}
	}

	// The thawed node stops first, once every node sees the others alive
	// and caught up (node-is-quorum-critical counts a member that has not
	// caught up with the leader's log as offline. After 10 s frozen the
	// thawed member lacks ~1,500 entries; once publishing has stopped the
	// queue is idle and hashicorp/raft's pipeline sends a lagging
	// follower 64 entries per trigger, which on an idle group is only its
	// commit timeout (20-40 s for a quorum queue): seen here to take 45 s
	// and more to catch up). Its graceful
	// shutdown overran the 15 s stop timeout in 3 of 19 runs (the others'
	// never): an open issue of its own, logged here rather than failing
	// the property this test is about; the harness then kills it.
	for _, nd := range nodes {
		eventually(t, 150*time.Second, nd.name+" sees every member alive and caught up", func() bool {
			code, _ := nd.tryAPI("GET", "/api/health/checks/node-is-quorum-critical", nil, nil)
			return code == 200
		})
	}
	if err := victim.p.Stop(); err != nil {
		t.Logf("known issue: the thawed node's graceful shutdown: %v", err)
	}
}
